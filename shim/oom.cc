#include "shim/oom.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "allocator/obs/bucket_advisor.h"
#include "allocator/obs/oom_report.h"
#include "shim/runtime.h"

namespace fragfree {
namespace {

bool WriteFile(const std::string& path, const std::string& text) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  return fclose(f) == 0 && ok;
}

absl::Mutex hints_mu;
// Per device; absent until the program gives hints.
std::map<int, OomHints>& Hints() {
  static auto* const hints = new std::map<int, OomHints>();
  return *hints;
}

}  // namespace

void SetOomHints(int device, const OomHints& hints) {
  absl::MutexLock lock(&hints_mu);
  Hints()[device] = hints;
}

std::string ReportOom(DeviceAllocator& device, const Options& options) {
  OomContext context;
  context.facts = device.last_oom();
  context.stats = device.GetStats();
  context.arenas = device.Arenas();
  // The bucket advisor over the request sizes sampled so far (bucket_sample);
  // requests above the limit could not be served by any bucket.
  if (std::vector<SizeCount> sizes = device.RequestSizes(); !sizes.empty()) {
    BucketAdvisorOptions advisor;
    advisor.num_buckets = options.bucket_advice_k;
    if (context.facts.limit_bytes != 0) {
      advisor.max_size = context.facts.limit_bytes;
    }
    context.bucket_advice = AdviseBuckets(sizes, advisor);
  }
  context.techniques.emplace();
  context.techniques->round_buckets = !options.rounding.buckets.empty();
  {
    absl::MutexLock lock(&hints_mu);
    auto it = Hints().find(device.device());
    if (it != Hints().end()) {
      context.categories = it->second.categories;
      ActiveTechniques t = it->second.techniques;
      t.round_buckets = context.techniques->round_buckets;
      context.techniques = t;
    } else {
      context.techniques.reset();  // unknown: advice says "if not already on"
    }
  }
  OomDiagnosis diagnosis = DiagnoseOom(context);
  std::string text = OomReportText(context, diagnosis);
  if (!options.oom_report_path.empty()) {
    static std::atomic<int> count{0};
    mkdir(options.oom_report_path.c_str(), 0755);
    std::string base =
        absl::StrFormat("%s/fragfree-oom-%d-%d", options.oom_report_path,
                        getpid(), count.fetch_add(1));
    bool ok = WriteFile(base + ".json", OomReportJson(context, diagnosis)) &&
              WriteFile(base + ".html", OomReportHtml(context, diagnosis));
    text +=
        ok ? absl::StrFormat("\nReport: %s.html (and .json)", base)
           : absl::StrFormat("\n(could not write the report to %s.*)", base);
  }
  if (!options.snapshot_path.empty()) {
    absl::Status s = DumpSnapshot(device.device(), options.snapshot_path);
    text += s.ok() ? absl::StrFormat("\nSnapshot: %s", options.snapshot_path)
                   : absl::StrFormat("\n(%s)", s.message());
  }
  return text;
}

}  // namespace fragfree
