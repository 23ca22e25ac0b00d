// Implementation of cli.h.
// Thread-safety: see cli.h.
#include "bench/replay/cli.h"

#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/replay/html_report.h"
#include "bench/replay/replayer.h"
#include "bench/replay/report.h"

namespace fragfree::replay {

std::string UsageText() {
  return absl::StrCat(
      "usage: fragfree-replay [options] TRACE...\n"
      "Replays allocation traces through allocator models and reports\n"
      "fragmentation (peak reserved vs allocated), the smallest capacity that\n"
      "runs each trace, and per-call latency.\n"
      "\n"
      "options:\n"
      "  --policy LIST        comma-separated policies (default: ",
      absl::StrJoin(AllPolicyNames(), ","),
      ")\n"
      "  --capacity-gib N     device memory the policies may reserve "
      "(default 141)\n"
      "  --no-min-capacity    skip the minimum-capacity search\n"
      "  --json               one JSON object per line per (trace, policy)\n"
      "  --html FILE          also write a self-contained HTML report\n"
      "  --snapshot FILE      write fragfree's state at the end of the (last)\n"
      "                       trace, with its event trace, as a PyTorch "
      "memory\n"
      "                       snapshot (python -m torch.cuda._memory_viz\n"
      "                       trace_plot FILE -o plot.html)\n"
      "  --event-lag N        fragfree: device work completes N allocator\n"
      "                       calls after it is issued (a GPU behind the\n"
      "                       CPU); default 0, at once\n"
      "  --lenient            skip bad trace lines (and report how many)\n"
      "  --format F           auto|csv|rmm (default auto: from the header)\n"
      "  --alloc-conf CONF    PYTORCH_CUDA_ALLOC_CONF for the native and\n"
      "                       expandable models (e.g. "
      "roundup_power2_divisions:4)\n"
      "  -h, --help           this text\n"
      "\n"
      "TRACE: action,addr,size,stream,time_us CSV (shared/traces; from a\n"
      "snapshot pickle via bench/replay/snapshot_to_csv.py) or an RMM\n"
      "logging_resource_adaptor CSV; either may be gzip'd.\n");
}

absl::StatusOr<CliOptions> ParseArgs(const std::vector<std::string>& args) {
  CliOptions o;
  o.policies = AllPolicyNames();
  for (size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::string value;
    bool has_inline_value = false;
    if (arg.rfind("--", 0) == 0) {
      const size_t eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_inline_value = true;
      }
    }
    auto take_value = [&]() -> absl::StatusOr<std::string> {
      if (has_inline_value) return value;
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("option ", arg, " needs a value"));
      }
      return args[++i];
    };
    auto no_value = [&]() -> absl::Status {
      if (has_inline_value) {
        return absl::InvalidArgumentError(
            absl::StrCat("option ", arg, " takes no value"));
      }
      return absl::OkStatus();
    };
    if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "--policy") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      o.policies.clear();
      for (absl::string_view piece :
           absl::StrSplit(*v, ',', absl::SkipEmpty())) {
        const std::string name(piece);
        absl::StatusOr<PolicyFactory> f =
            MakePolicyFactory(name, o.policy_options);
        if (!f.ok()) return f.status();
        o.policies.emplace_back(name);
      }
      if (o.policies.empty()) {
        return absl::InvalidArgumentError("--policy needs at least one name");
      }
    } else if (arg == "--capacity-gib") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      double gib = 0;
      if (!absl::SimpleAtod(*v, &gib) || !(gib > 0) || !std::isfinite(gib) ||
          gib > 1e6) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--capacity-gib wants a positive number of GiB, got '", *v, "'"));
      }
      o.capacity_gib = gib;
    } else if (arg == "--no-min-capacity") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      o.min_capacity = false;
    } else if (arg == "--json") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      o.json = true;
    } else if (arg == "--event-lag") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      uint64_t lag = 0;
      if (!absl::SimpleAtoi(*v, &lag) || lag > (uint64_t{1} << 40)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--event-lag wants a number of allocator calls, got '", *v, "'"));
      }
      o.policy_options.fragfree_event_lag = lag;
    } else if (arg == "--lenient") {
      if (absl::Status s = no_value(); !s.ok()) return s;
      o.lenient = true;
    } else if (arg == "--html") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      if (v->empty()) return absl::InvalidArgumentError("--html needs a file");
      o.html_path = *v;
    } else if (arg == "--snapshot") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      if (v->empty()) {
        return absl::InvalidArgumentError("--snapshot needs a file");
      }
      o.snapshot_path = *v;
    } else if (arg == "--format") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      absl::StatusOr<TraceFormat> f = ParseTraceFormat(*v);
      if (!f.ok()) return f.status();
      o.format = *f;
    } else if (arg == "--alloc-conf") {
      absl::StatusOr<std::string> v = take_value();
      if (!v.ok()) return v.status();
      absl::StatusOr<PytorchAllocConfig> conf = ParsePytorchAllocConf(*v);
      if (!conf.ok()) return conf.status();
      o.policy_options.pytorch = *conf;
    } else if (arg.size() > 1 && arg[0] == '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown option '", args[i], "'"));
    } else {
      o.traces.push_back(args[i]);
    }
  }
  if (o.traces.empty() && !o.help) {
    return absl::InvalidArgumentError("no TRACE given");
  }
  return o;
}

int RunCli(const CliOptions& options, std::ostream& out, std::ostream& err) {
  PolicyConfig base;
  base.capacity_bytes = static_cast<uint64_t>(options.capacity_gib * kGiB) /
                        (2 * kMiB) * (2 * kMiB);
  base.device_total_bytes = base.capacity_bytes;
  ReadOptions read_options;
  read_options.lenient = options.lenient;
  std::vector<TraceReport> reports;
  int status = 0;
  for (const std::string& path : options.traces) {
    absl::StatusOr<Trace> trace = ReadTrace(path, options.format, read_options);
    if (!trace.ok()) {
      err << "fragfree-replay: " << trace.status().message() << "\n";
      status = 1;
      continue;
    }
    for (const std::string& w : trace->warnings) {
      err << "fragfree-replay: warning: " << w << "\n";
    }
    if (trace->skipped_lines > 0) {
      err << "fragfree-replay: " << path << ": skipped " << trace->skipped_lines
          << " bad line(s) (--lenient)\n";
    }
    TraceReport report = SummariseTrace(*trace);
    for (const std::string& name : options.policies) {
      absl::StatusOr<PolicyFactory> factory =
          MakePolicyFactory(name, options.policy_options);
      // With --snapshot, the main replay records fragfree's event trace (the
      // minimum-capacity search below does not need it).
      PolicyOptions traced = options.policy_options;
      if (!options.snapshot_path.empty()) {
        traced.fragfree_trace_entries = 3 * trace->events.size() + 4096;
      }
      absl::StatusOr<PolicyFactory> main_factory =
          MakePolicyFactory(name, traced);
      absl::StatusOr<std::unique_ptr<ReplayPolicy>> policy =
          main_factory.ok() ? (*main_factory)(base)
                            : absl::StatusOr<std::unique_ptr<ReplayPolicy>>(
                                  main_factory.status());
      if (!policy.ok()) {
        err << "fragfree-replay: policy " << name << ": "
            << policy.status().message() << "\n";
        status = 1;
        continue;
      }
      PolicyReport pr;
      pr.capacity_bytes = base.capacity_bytes;
      pr.replay = Replay(*trace, **policy, ReplayOptions{});
      if (!options.snapshot_path.empty() && name == "fragfree") {
        std::ofstream snap(options.snapshot_path,
                           std::ios::binary | std::ios::trunc);
        if (!(*policy)->WriteSnapshotPickle(snap) || !snap.flush()) {
          err << "fragfree-replay: cannot write " << options.snapshot_path
              << "\n";
          status = 1;
        }
      }
      if (!pr.replay.policy_status.ok()) {
        err << "fragfree-replay: policy " << name << " failed on " << path
            << ": " << pr.replay.policy_status.message() << "\n";
        status = 1;
      }
      if (options.min_capacity) {
        const uint64_t known_fit =
            pr.replay.ooms == 0 ? pr.replay.figures.peak_reserved_bytes : 0;
        absl::StatusOr<MinCapacity> mc =
            FindMinCapacity(*trace, *factory, base, known_fit);
        if (mc.ok()) {
          pr.min_capacity_searched = true;
          pr.min_capacity = *mc;
        } else {
          err << "fragfree-replay: policy " << name
              << ": min capacity search failed: " << mc.status().message()
              << "\n";
          status = 1;
        }
      }
      if (options.json) out << FormatJsonLine(report, pr) << "\n";
      report.policies.push_back(std::move(pr));
    }
    if (!options.json) out << FormatTable(report) << "\n";
    out.flush();
    reports.push_back(std::move(report));
  }
  if (!options.html_path.empty()) {
    std::ofstream html(options.html_path, std::ios::binary | std::ios::trunc);
    html << RenderHtml(reports);
    html.close();
    if (!html) {
      err << "fragfree-replay: cannot write " << options.html_path << "\n";
      status = 1;
    }
  }
  return status;
}

}  // namespace fragfree::replay
