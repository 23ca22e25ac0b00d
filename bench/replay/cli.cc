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
      "TRACE: action,addr,size,stream,time_us CSV (data/traces; from a\n"
      "snapshot pickle via bench/replay/snapshot_to_csv.py) or an RMM\n"
      "logging_resource_adaptor CSV; either may be gzip'd.\n");
}

namespace {

// --- ParseArgs: one row per option (kOptions), each with its own parser. ---

absl::Status Usage(std::string_view what) {
  return absl::InvalidArgumentError(std::string(what));
}

absl::Status SetPolicies(const std::string& v, CliOptions& o) {
  o.policies.clear();
  for (absl::string_view piece : absl::StrSplit(v, ',', absl::SkipEmpty())) {
    const std::string name(piece);
    absl::StatusOr<PolicyFactory> f = MakePolicyFactory(name, o.policy_options);
    if (!f.ok()) return f.status();
    o.policies.emplace_back(name);
  }
  if (o.policies.empty()) return Usage("--policy needs at least one name");
  return absl::OkStatus();
}

absl::Status SetCapacity(const std::string& v, CliOptions& o) {
  double gib = 0;
  if (!absl::SimpleAtod(v, &gib) || !(gib > 0) || !std::isfinite(gib) ||
      gib > 1e6) {
    return Usage(absl::StrCat(
        "--capacity-gib wants a positive number of GiB, got '", v, "'"));
  }
  o.capacity_gib = gib;
  return absl::OkStatus();
}

absl::Status SetEventLag(const std::string& v, CliOptions& o) {
  uint64_t lag = 0;
  if (!absl::SimpleAtoi(v, &lag) || lag > (uint64_t{1} << 40)) {
    return Usage(absl::StrCat(
        "--event-lag wants a number of allocator calls, got '", v, "'"));
  }
  o.policy_options.fragfree_event_lag = lag;
  return absl::OkStatus();
}

absl::Status SetHtml(const std::string& v, CliOptions& o) {
  if (v.empty()) return Usage("--html needs a file");
  o.html_path = v;
  return absl::OkStatus();
}

absl::Status SetSnapshot(const std::string& v, CliOptions& o) {
  if (v.empty()) return Usage("--snapshot needs a file");
  o.snapshot_path = v;
  return absl::OkStatus();
}

absl::Status SetFormat(const std::string& v, CliOptions& o) {
  absl::StatusOr<TraceFormat> f = ParseTraceFormat(v);
  if (!f.ok()) return f.status();
  o.format = *f;
  return absl::OkStatus();
}

absl::Status SetAllocConf(const std::string& v, CliOptions& o) {
  absl::StatusOr<PytorchAllocConfig> conf = ParsePytorchAllocConf(v);
  if (!conf.ok()) return conf.status();
  o.policy_options.pytorch = *conf;
  return absl::OkStatus();
}

struct CliOption {
  std::string_view name;
  bool takes_value;  // else a switch: `apply` gets ""
  absl::Status (*apply)(const std::string& value, CliOptions& o);
};

constexpr CliOption kOptions[] = {
    {"--policy", true, SetPolicies},
    {"--capacity-gib", true, SetCapacity},
    {"--no-min-capacity", false,
     [](const std::string&, CliOptions& o) {
       o.min_capacity = false;
       return absl::OkStatus();
     }},
    {"--json", false,
     [](const std::string&, CliOptions& o) {
       o.json = true;
       return absl::OkStatus();
     }},
    {"--event-lag", true, SetEventLag},
    {"--lenient", false,
     [](const std::string&, CliOptions& o) {
       o.lenient = true;
       return absl::OkStatus();
     }},
    {"--html", true, SetHtml},
    {"--snapshot", true, SetSnapshot},
    {"--format", true, SetFormat},
    {"--alloc-conf", true, SetAllocConf},
};

// One command-line word: a long option's "--name=value" is split.
struct Arg {
  std::string name;
  std::string value;
  bool has_inline_value = false;
};

Arg SplitArg(const std::string& word) {
  Arg arg{word, "", false};
  const size_t eq = word.find('=');
  if (word.rfind("--", 0) == 0 && eq != std::string::npos) {
    arg = {word.substr(0, eq), word.substr(eq + 1), true};
  }
  return arg;
}

// Applies `option` to `o`, taking its value inline or from args[++i].
absl::Status ApplyOption(const CliOption& option, const Arg& arg,
                         const std::vector<std::string>& args, size_t& i,
                         CliOptions& o) {
  if (!option.takes_value) {
    if (arg.has_inline_value) {
      return Usage(absl::StrCat("option ", arg.name, " takes no value"));
    }
    return option.apply("", o);
  }
  if (arg.has_inline_value) return option.apply(arg.value, o);
  if (i + 1 >= args.size()) {
    return Usage(absl::StrCat("option ", arg.name, " needs a value"));
  }
  return option.apply(args[++i], o);
}

const CliOption* FindOption(std::string_view name) {
  for (const CliOption& option : kOptions) {
    if (option.name == name) return &option;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<CliOptions> ParseArgs(const std::vector<std::string>& args) {
  CliOptions o;
  o.policies = AllPolicyNames();
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg arg = SplitArg(args[i]);
    if (arg.name == "-h" || arg.name == "--help") {
      o.help = true;
    } else if (const CliOption* option = FindOption(arg.name)) {
      if (absl::Status s = ApplyOption(*option, arg, args, i, o); !s.ok()) {
        return s;
      }
    } else if (arg.name.size() > 1 && arg.name[0] == '-') {
      return Usage(absl::StrCat("unknown option '", args[i], "'"));
    } else {
      o.traces.push_back(args[i]);
    }
  }
  if (o.traces.empty() && !o.help) return Usage("no TRACE given");
  return o;
}

namespace {

// --- RunCli's steps. Each returns the exit status of its part: 0, or 1 when
// something failed (and was reported on `err`). ---

// The minimum-capacity search of one policy on one trace, into `pr`.
int SearchMinCapacity(const Trace& trace, const PolicyFactory& factory,
                      const PolicyConfig& base, const std::string& name,
                      PolicyReport& pr, std::ostream& err) {
  const uint64_t known_fit =
      pr.replay.ooms == 0 ? pr.replay.figures.peak_reserved_bytes : 0;
  absl::StatusOr<MinCapacity> mc =
      FindMinCapacity(trace, factory, base, known_fit);
  if (!mc.ok()) {
    err << "fragfree-replay: policy " << name
        << ": min capacity search failed: " << mc.status().message() << "\n";
    return 1;
  }
  pr.min_capacity_searched = true;
  pr.min_capacity = *mc;
  return 0;
}

// fragfree's end state after the main replay, as a snapshot pickle.
int WriteSnapshot(const ReplayPolicy& policy, const std::string& path,
                  std::ostream& err) {
  std::ofstream snap(path, std::ios::binary | std::ios::trunc);
  if (!policy.WriteSnapshotPickle(snap) || !snap.flush()) {
    err << "fragfree-replay: cannot write " << path << "\n";
    return 1;
  }
  return 0;
}

// Replays `trace` (read from `path`) through the policy `name` and appends its
// figures to `report`.
int ReplayOnePolicy(const CliOptions& options, const PolicyConfig& base,
                    const Trace& trace, const std::string& path,
                    const std::string& name, TraceReport& report,
                    std::ostream& out, std::ostream& err) {
  absl::StatusOr<PolicyFactory> factory =
      MakePolicyFactory(name, options.policy_options);
  // With --snapshot, the main replay records fragfree's event trace (the
  // minimum-capacity search below does not need it).
  PolicyOptions traced = options.policy_options;
  if (!options.snapshot_path.empty()) {
    traced.fragfree_trace_entries = 3 * trace.events.size() + 4096;
  }
  absl::StatusOr<PolicyFactory> main_factory = MakePolicyFactory(name, traced);
  absl::StatusOr<std::unique_ptr<ReplayPolicy>> policy =
      main_factory.ok() ? (*main_factory)(base)
                        : absl::StatusOr<std::unique_ptr<ReplayPolicy>>(
                              main_factory.status());
  if (!policy.ok()) {
    err << "fragfree-replay: policy " << name << ": "
        << policy.status().message() << "\n";
    return 1;
  }
  int status = 0;
  PolicyReport pr;
  pr.capacity_bytes = base.capacity_bytes;
  pr.replay = Replay(trace, **policy, ReplayOptions{});
  if (!options.snapshot_path.empty() && name == "fragfree") {
    status |= WriteSnapshot(**policy, options.snapshot_path, err);
  }
  if (!pr.replay.policy_status.ok()) {
    err << "fragfree-replay: policy " << name << " failed on " << path << ": "
        << pr.replay.policy_status.message() << "\n";
    status = 1;
  }
  if (options.min_capacity) {
    status |= SearchMinCapacity(trace, *factory, base, name, pr, err);
  }
  if (options.json) out << FormatJsonLine(report, pr) << "\n";
  report.policies.push_back(std::move(pr));
  return status;
}

// Reads one trace and replays it through every policy, into `reports`.
int ReplayOneTrace(const CliOptions& options, const PolicyConfig& base,
                   const std::string& path, std::vector<TraceReport>& reports,
                   std::ostream& out, std::ostream& err) {
  ReadOptions read_options;
  read_options.lenient = options.lenient;
  absl::StatusOr<Trace> trace = ReadTrace(path, options.format, read_options);
  if (!trace.ok()) {
    err << "fragfree-replay: " << trace.status().message() << "\n";
    return 1;
  }
  for (const std::string& w : trace->warnings) {
    err << "fragfree-replay: warning: " << w << "\n";
  }
  if (trace->skipped_lines > 0) {
    err << "fragfree-replay: " << path << ": skipped " << trace->skipped_lines
        << " bad line(s) (--lenient)\n";
  }
  int status = 0;
  TraceReport report = SummariseTrace(*trace);
  for (const std::string& name : options.policies) {
    status |=
        ReplayOnePolicy(options, base, *trace, path, name, report, out, err);
  }
  if (!options.json) out << FormatTable(report) << "\n";
  out.flush();
  reports.push_back(std::move(report));
  return status;
}

int WriteHtml(const std::vector<TraceReport>& reports, const std::string& path,
              std::ostream& err) {
  std::ofstream html(path, std::ios::binary | std::ios::trunc);
  html << RenderHtml(reports);
  html.close();
  if (!html) {
    err << "fragfree-replay: cannot write " << path << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int RunCli(const CliOptions& options, std::ostream& out, std::ostream& err) {
  PolicyConfig base;
  base.capacity_bytes = static_cast<uint64_t>(options.capacity_gib * kGiB) /
                        (2 * kMiB) * (2 * kMiB);
  base.device_total_bytes = base.capacity_bytes;
  std::vector<TraceReport> reports;
  int status = 0;
  for (const std::string& path : options.traces) {
    status |= ReplayOneTrace(options, base, path, reports, out, err);
  }
  if (!options.html_path.empty()) {
    status |= WriteHtml(reports, options.html_path, err);
  }
  return status;
}

}  // namespace fragfree::replay
