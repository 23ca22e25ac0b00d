// ReportOom and OomStatus (shim/oom.h): the context from the engine, the
// program's hints (ff_set_oom_hints), and the report files.
// Thread-safety: the hints are guarded by hints_mu; file names are unique per
// process (pid) and report (an atomic counter).
#include "shim/oom.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <map>

#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "allocator/base/units.h"
#include "allocator/obs/oom_report.h"
#include "shim/device_bucket_advice.h"
#include "shim/runtime.h"

namespace fragfree {
namespace {

// Writes `text` to `path`; on failure returns false with the reason.
bool WriteFile(const std::string& path, const std::string& text,
               std::string* error) {
  FILE* f = fopen(path.c_str(), "w");
  if (f == nullptr) {
    *error = absl::StrFormat("%s: %s", path, strerror(errno));
    return false;
  }
  bool ok = fwrite(text.data(), 1, text.size(), f) == text.size();
  const int write_errno = errno;
  if (fclose(f) != 0 || !ok) {
    *error =
        absl::StrFormat("%s: %s", path, strerror(ok ? errno : write_errno));
    return false;
  }
  return true;
}

// mkdir -p: creates `dir` and its missing parents. False with the reason when
// a component cannot be created or exists and is not a directory.
bool MakeDirs(const std::string& dir, std::string* error) {
  for (size_t end = 1; end <= dir.size(); ++end) {
    if (end != dir.size() && dir[end] != '/') continue;
    const std::string prefix = dir.substr(0, end);
    if (mkdir(prefix.c_str(), 0755) == 0 || errno == EEXIST) continue;
    *error = absl::StrFormat("%s: %s", prefix, strerror(errno));
    return false;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *error = absl::StrFormat("%s: not a directory", dir);
    return false;
  }
  return true;
}

// Writes the three renderings to <dir>/fragfree-oom-<pid>-<n>.{txt,json,html}
// and says where (or why not) on stderr; *line gets the same sentence for the
// text. False when a file could not be written.
bool WriteReportFiles(const std::string& dir, const OomContext& context,
                      const OomDiagnosis& diagnosis, const std::string& text,
                      std::string* line) {
  static std::atomic<int> count{0};
  const std::string base = absl::StrFormat("%s/fragfree-oom-%d-%d", dir,
                                           getpid(), count.fetch_add(1));
  std::string error;
  const bool ok =
      MakeDirs(dir, &error) && WriteFile(base + ".txt", text, &error) &&
      WriteFile(base + ".json", OomReportJson(context, diagnosis), &error) &&
      WriteFile(base + ".html", OomReportHtml(context, diagnosis), &error);
  *line = ok ? absl::StrFormat("OOM report written to %s.{txt,json,html}", base)
             : absl::StrFormat(
                   "could not write the OOM report "
                   "(oom_report_path %s): %s",
                   dir, error);
  fprintf(stderr, "fragfree: %s\n", line->c_str());
  return ok;
}

absl::Mutex hints_mu;
// Per device; absent until the program gives hints.
std::map<int, OomHints>& Hints() {
  static auto* const hints = new std::map<int, OomHints>();
  return *hints;
}

// The request of the last report OomStatus made, to recognise a retry of the
// same request with nothing allocated in between (PyTorch's cudaMallocAsync
// backend synchronizes and retries once): the retry gets one line pointing at
// that report instead of a second report.
struct LastReport {
  int device = -1;
  StreamHandle stream = 0;
  size_t requested_bytes = 0;
  int64_t allocations = -1;  // cumulative allocation count at the report
  std::string where;         // the report files' line, or "" without files
};
absl::Mutex last_mu;
LastReport& Last() ABSL_EXCLUSIVE_LOCKS_REQUIRED(last_mu) {
  static auto* const last = new LastReport();
  return *last;
}

// ReportOom; *files gets the files' line ("" when none were written).
std::string Report(DeviceAllocator& device, const Options& options,
                   std::string* files);

}  // namespace

void SetOomHints(int device, const OomHints& hints) {
  absl::MutexLock lock(&hints_mu);
  Hints()[device] = hints;
}

std::string ReportOom(DeviceAllocator& device, const Options& options) {
  std::string files;
  return Report(device, options, &files);
}

namespace {

std::string Report(DeviceAllocator& device, const Options& options,
                   std::string* files) {
  OomContext context;
  context.facts = device.last_oom();
  context.stats = device.GetStats();
  context.arenas = device.Arenas();
  // The bucket advisor over the request sizes sampled so far (bucket_sample).
  if (DeviceBucketAdvice a = AdviseDeviceBuckets(&device, options);
      a.has_sizes) {
    context.bucket_advice = std::move(a.advice);
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
    std::string line;
    if (WriteReportFiles(options.oom_report_path, context, diagnosis, text,
                         &line)) {
      *files = line;
    }
    text += "\n" + line;
  }
  if (!options.snapshot_path.empty()) {
    absl::Status s = DumpSnapshot(device.device(), options.snapshot_path);
    text += s.ok() ? absl::StrFormat("\nSnapshot: %s", options.snapshot_path)
                   : absl::StrFormat("\n(%s)", s.message());
  }
  return text;
}

}  // namespace

absl::Status OomStatus(DeviceAllocator& device, const absl::Status& failure) {
  if (!absl::IsResourceExhausted(failure)) return failure;
  const OomFacts facts = device.last_oom();
  LastReport key;
  key.device = device.device();
  key.stream = facts.stream;
  key.requested_bytes = facts.requested_bytes;
  key.allocations = device.GetStats().allocation.pool[kPoolAll].allocated;
  {
    absl::MutexLock lock(&last_mu);
    const LastReport& last = Last();
    if (last.device == key.device && last.stream == key.stream &&
        last.requested_bytes == key.requested_bytes &&
        last.allocations == key.allocations) {
      return absl::ResourceExhaustedError(absl::StrFormat(
          "out of memory again: the same request of %s on device %d, with "
          "nothing allocated since the report above%s%s",
          FormatBytes(key.requested_bytes), key.device,
          last.where.empty() ? "" : "; ", last.where));
    }
  }
  std::string text = Report(device, device.options(), &key.where);
  {
    absl::MutexLock lock(&last_mu);
    Last() = std::move(key);
  }
  return absl::ResourceExhaustedError(text);
}

}  // namespace fragfree
