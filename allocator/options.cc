// Options::Parse: FRAGFREE_CONF's key table (kKeys: one row per key with its
// parser, default and documentation), from which Parse, KnownKeys and the
// README's table (MarkdownTable) all come. Errors name the key and what was
// expected. Adding a key: a field in options.h, a row here, and the README
// table (tests/allocator/options_test.cc compares it). Thread-safety: pure
// functions over a constant table.
#include "allocator/options.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/base/config_tokens.h"
#include "allocator/base/units.h"
#include "allocator/obs/bucket_advisor.h"
#include "allocator/phys/backend_registry.h"

namespace fragfree {
namespace {

using Tokens = std::vector<std::string>;

// --- Value parsers shared by several keys. ---

absl::Status BadValue(std::string_view key, std::string_view value,
                      std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrFormat("FRAGFREE_CONF: bad value '%s' for key '%s': expected %s",
                      value, key, expected));
}

absl::Status NeedsValue(std::string_view key) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "FRAGFREE_CONF: key '%s' needs a value ('%s:<value>')", key, key));
}

absl::StatusOr<bool> ParseBool(std::string_view key, std::string_view v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  return BadValue(key, v, "True or False");
}

// Plain bytes, or with a K/M/G suffix (binary units).
absl::StatusOr<size_t> ParseSize(std::string_view key, std::string_view v) {
  size_t multiplier = 1;
  std::string digits(v);
  if (!digits.empty()) {
    char last = char(std::toupper(static_cast<unsigned char>(digits.back())));
    if (last == 'K' || last == 'M' || last == 'G') {
      multiplier = last == 'K' ? kKiB : last == 'M' ? kMiB : kGiB;
      digits.pop_back();
    }
  }
  uint64_t n = 0;
  if (!absl::SimpleAtoi(digits, &n)) {
    return BadValue(key, v, "a size (bytes, or with a K/M/G suffix)");
  }
  return size_t(n) * multiplier;
}

absl::StatusOr<uint64_t> ParseUint(std::string_view key, std::string_view v) {
  uint64_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &n)) {
    return BadValue(key, v, "a whole number");
  }
  return n;
}

// A whole number in [lo, hi], else `expected`.
absl::StatusOr<uint64_t> ParseUintIn(std::string_view key, std::string_view v,
                                     uint64_t lo, uint64_t hi,
                                     std::string_view expected) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (n.ok() && (*n < lo || *n > hi)) return BadValue(key, v, expected);
  return n;
}

// --- One parser per key. A word key's parser gets the key's value (one
// token, or for paths every token up to the next ','); a list key's parser
// consumes its tokens from t[i] on. ---

using WordParser = absl::Status (*)(std::string_view key, std::string_view v,
                                    Options& o);
using KeyParser = absl::Status (*)(std::string_view key, const Tokens& t,
                                   size_t& i, Options& o);

// The value of a word key: t[i] must be a word. Paths may contain ':', so a
// path's value runs to the next ','.
template <WordParser kParse, bool kPath = false>
absl::Status Word(std::string_view key, const Tokens& t, size_t& i,
                  Options& o) {
  if (i >= t.size() || t[i] == "," || t[i] == "[" || t[i] == "]") {
    return NeedsValue(key);
  }
  std::string value = t[i++];
  if constexpr (kPath) {
    while (i < t.size() && t[i] != ",") value += t[i++];
  }
  return kParse(key, value, o);
}

absl::Status SetBackend(std::string_view key, std::string_view v, Options& o) {
  if (FindBackend(v) == nullptr) return BadValue(key, v, BackendNames());
  o.backend = std::string(v);
  return absl::OkStatus();
}

absl::Status SetHostCapacity(std::string_view key, std::string_view v,
                             Options& o) {
  absl::StatusOr<uint64_t> n =
      ParseUintIn(key, v, 1, UINT64_MAX, "a positive number of MiB");
  if (n.ok()) o.host_capacity_bytes = *n * kMiB;
  return n.status();
}

absl::Status SetHostGranularity(std::string_view key, std::string_view v,
                                Options& o) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (n.ok() && (*n < 4 || !IsPowerOfTwo(*n))) {
    return BadValue(key, v, "a power of two >= 4 (KiB)");
  }
  if (n.ok()) o.host_granularity_bytes = *n * kKiB;
  return n.status();
}

absl::Status SetHostDevices(std::string_view key, std::string_view v,
                            Options& o) {
  absl::StatusOr<uint64_t> n =
      ParseUintIn(key, v, 1, 64, "a number of devices from 1 to 64");
  if (n.ok()) o.host_devices = int(*n);
  return n.status();
}

// A number in [lo, hi] (in (lo, hi] with `lo_open`); `expected` says which
// in the error.
absl::StatusOr<double> ParseNumberIn(std::string_view key, std::string_view v,
                                     double lo, bool lo_open, double hi,
                                     const char* expected) {
  double f = 0;
  if (!absl::SimpleAtod(absl::string_view(v.data(), v.size()), &f) ||
      !((lo_open ? f > lo : f >= lo) && f <= hi)) {
    return BadValue(key, v, expected);
  }
  return f;
}

absl::Status SetMemoryFraction(std::string_view key, std::string_view v,
                               Options& o) {
  absl::StatusOr<double> f =
      ParseNumberIn(key, v, 0.0, /*lo_open=*/true, 1.0, "a fraction in (0, 1]");
  if (f.ok()) o.memory_fraction = *f;
  return f.status();
}

absl::Status SetMemoryLimit(std::string_view key, std::string_view v,
                            Options& o) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (n.ok()) o.memory_limit_bytes = *n * kMiB;
  return n.status();
}

absl::Status SetReclaim(std::string_view key, std::string_view v, Options& o) {
  if (v == "auto") {
    o.reclaim_before_grow = Options::Reclaim::kAuto;
    return absl::OkStatus();
  }
  absl::StatusOr<bool> b = ParseBool(key, v);
  if (!b.ok()) return BadValue(key, v, "True, False or auto");
  o.reclaim_before_grow =
      *b ? Options::Reclaim::kAlways : Options::Reclaim::kNever;
  return absl::OkStatus();
}

absl::Status SetGrowSlack(std::string_view key, std::string_view v,
                          Options& o) {
  absl::StatusOr<double> f = ParseNumberIn(key, v, 0.0, /*lo_open=*/false, 10.0,
                                           "a fraction >= 0 (0.03 = 3%)");
  if (f.ok()) o.grow_slack = *f;
  return f.status();
}

absl::Status SetMoveTimeBudget(std::string_view key, std::string_view v,
                               Options& o) {
  absl::StatusOr<double> f =
      ParseNumberIn(key, v, 0.0, /*lo_open=*/false, 1.0,
                    "a fraction in [0, 1] (0.02 = 2% of the time)");
  if (f.ok()) o.move_time_budget = *f;
  return f.status();
}

absl::Status SetMoveClock(std::string_view key, std::string_view v,
                          Options& o) {
  if (v == "wall") {
    o.move_clock = Options::MoveClock::kWall;
  } else if (v == "cpu") {
    o.move_clock = Options::MoveClock::kCpu;
  } else {
    return BadValue(key, v, "wall or cpu");
  }
  return absl::OkStatus();
}

// True or False into `kField`.
template <bool Options::*kField>
absl::Status SetFlag(std::string_view key, std::string_view v, Options& o) {
  absl::StatusOr<bool> b = ParseBool(key, v);
  if (b.ok()) o.*kField = *b;
  return b.status();
}

absl::Status SetVaFactor(std::string_view key, std::string_view v, Options& o) {
  absl::StatusOr<uint64_t> n = ParseUintIn(key, v, 1, 64, "1 to 64");
  if (n.ok()) o.va_factor = *n;
  return n.status();
}

// page_size_mb and large_page_mb: a number of MiB into a byte field.
template <size_t Options::*kField>
absl::Status SetMiB(std::string_view key, std::string_view v, Options& o) {
  absl::StatusOr<uint64_t> n =
      ParseUintIn(key, v, 0, uint64_t{1} << 20, "0 or a number of MiB");
  if (n.ok()) o.*kField = *n * kMiB;
  return n.status();
}

absl::Status SetSnapshotPath(std::string_view, std::string_view v, Options& o) {
  o.snapshot_path = v;
  return absl::OkStatus();
}

absl::Status SetOomReportPath(std::string_view, std::string_view v,
                              Options& o) {
  o.oom_report_path = v;
  return absl::OkStatus();
}

absl::Status SetTraceEntries(std::string_view key, std::string_view v,
                             Options& o) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (n.ok()) o.trace_entries = *n;
  return n.status();
}

absl::Status SetBucketSample(std::string_view key, std::string_view v,
                             Options& o) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (!n.ok()) {
    return BadValue(key, v, "a whole number: 0 (off) or 1 in N requests");
  }
  if (*n > kMaxBucketSample) {
    return BadValue(key, v,
                    absl::StrFormat("0 (off) or 1 to %d: one request in N "
                                    "is sampled",
                                    kMaxBucketSample));
  }
  o.bucket_sample = uint32_t(*n);
  return absl::OkStatus();
}

absl::Status SetBucketAdviceK(std::string_view key, std::string_view v,
                              Options& o) {
  absl::StatusOr<uint64_t> n = ParseUint(key, v);
  if (!n.ok() || *n < 1 || *n > kMaxAdvisedBuckets) {
    return BadValue(key, v,
                    absl::StrFormat("a number of buckets from 1 to %d",
                                    kMaxAdvisedBuckets));
  }
  o.bucket_advice_k = *n;
  return absl::OkStatus();
}

// Skips ',' tokens inside a list; whether t[i] is a list item.
bool NextListItem(const Tokens& t, size_t& i) {
  while (i < t.size() && t[i] == ",") ++i;
  return i < t.size() && t[i] != "]";
}

// Consumes the list's closing ']' (the list has ended at t[i] or at the end).
absl::Status CloseList(std::string_view key, const Tokens& t, size_t& i) {
  if (i >= t.size()) return BadValue(key, "[", "a closing ']'");
  ++i;
  return absl::OkStatus();
}

absl::Status CheckDivisions(std::string_view key, uint64_t d) {
  if (d != 0 && !IsPowerOfTwo(d)) {
    return BadValue(key, std::to_string(d), "a power of two (or 0)");
  }
  return absl::OkStatus();
}

// One `<MB>:<div>` or `>:<div>` item of the divisions list at t[i]; `first`
// and `last_index` carry PyTorch's fill rules across items.
absl::Status ParseDivisionItem(std::string_view key, const Tokens& t, size_t& i,
                               bool& first, size_t& last_index,
                               RoundingConfig& rounding) {
  if (i + 2 >= t.size() || t[i + 1] != ":") {
    return BadValue(key, t[i], "[<MB>:<divisions>,...,>:<divisions>]");
  }
  absl::StatusOr<uint64_t> d = ParseUint(key, t[i + 2]);
  if (!d.ok()) return d.status();
  if (absl::Status s = CheckDivisions(key, *d); !s.ok()) return s;
  if (t[i] == ">") {
    for (size_t k = last_index + 1; k < 16; ++k) rounding.divisions[k] = *d;
  } else {
    absl::StatusOr<uint64_t> mb = ParseUint(key, t[i]);
    if (!mb.ok()) return mb.status();
    if (*mb == 0 || !IsPowerOfTwo(*mb)) {
      return BadValue(key, t[i], "interval boundaries that are powers of two");
    }
    size_t index = std::min<size_t>(Log2Floor(*mb), 15);
    if (first) {
      for (size_t k = 0; k <= index; ++k) rounding.divisions[k] = *d;
    }
    rounding.divisions[index] = *d;
    last_index = index;
    first = false;
  }
  i += 3;
  return absl::OkStatus();
}

// roundup_power2_divisions: N, or [<MB>:<div>,...,>:<div>] (PyTorch semantics).
absl::Status ParseDivisions(std::string_view key, const Tokens& t, size_t& i,
                            Options& o) {
  if (i < t.size() && t[i] != "[") {
    absl::StatusOr<uint64_t> d = ParseUint(key, t[i]);
    if (!d.ok()) return d.status();
    if (absl::Status s = CheckDivisions(key, *d); !s.ok()) return s;
    o.rounding.divisions.fill(*d);
    ++i;
    return absl::OkStatus();
  }
  ++i;  // '['
  bool first = true;
  size_t last_index = 0;
  while (NextListItem(t, i)) {
    absl::Status s =
        ParseDivisionItem(key, t, i, first, last_index, o.rounding);
    if (!s.ok()) return s;
  }
  return CloseList(key, t, i);
}

// round_buckets:[512K,1M,4M,...]: explicit rounding buckets, kept sorted and
// unique.
absl::Status ParseBuckets(std::string_view key, const Tokens& t, size_t& i,
                          Options& o) {
  std::vector<size_t>& buckets = o.rounding.buckets;
  if (i >= t.size() || t[i] != "[") return BadValue(key, "", "[size,size,...]");
  ++i;
  buckets.clear();
  while (NextListItem(t, i)) {
    absl::StatusOr<size_t> b = ParseSize(key, t[i]);
    if (!b.ok()) return b.status();
    if (*b == 0 || *b % 512 != 0) {
      return BadValue(key, t[i], "bucket sizes that are multiples of 512");
    }
    buckets.push_back(*b);
    ++i;
  }
  if (absl::Status s = CloseList(key, t, i); !s.ok()) return s;
  std::sort(buckets.begin(), buckets.end());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  return absl::OkStatus();
}

// --- The table. ---

struct KeyRow {
  Options::KeyDoc doc;
  KeyParser parse;
};

// A row whose documentation is allocator/phys/backend_registry.cc's
// BackendsDoc(), so that a new backend is documented where it is listed.
constexpr std::string_view kFromBackendTable = "(the backend table)";

constexpr KeyRow kKeys[] = {
    // The documentation is the backend table's (kFromBackendTable).
    {{"backend", "`cuda`", kFromBackendTable}, Word<SetBackend>},
    {{"host_capacity_mb", "1024",
      "physical memory of the host / simulated device"},
     Word<SetHostCapacity>},
    {{"host_granularity_kb", "2048",
      "page size of the host / simulated device (power of two, ≥ 4)"},
     Word<SetHostGranularity>},
    {{"host_devices", "1",
      "devices the host / simulated backend emulates (1–64), each with "
      "`host_capacity_mb`: multi-device paths without GPUs"},
     Word<SetHostDevices>},
    {{"per_process_memory_fraction", "1.0",
      "cap fragfree's physical memory at this fraction of the device"},
     Word<SetMemoryFraction>},
    {{"memory_limit_mb", "none",
      "cap fragfree's physical memory at this many MiB"},
     Word<SetMemoryLimit>},
    {{"roundup_power2_divisions", "none",
      "PyTorch's rounding: `N`, or `[<MB>:<div>,...,>:<div>]`"},
     ParseDivisions},
    {{"round_buckets", "none",
      "explicit size buckets, e.g. `[64K,1M,8M]`: a request rounds up to the "
      "next bucket"},
     ParseBuckets},
    {{"reclaim_before_grow", "`auto`",
      "where a request's new pages come from while under the cap: `auto` "
      "takes whole free pages of cached holes (whose last use is known "
      "complete) once mapped memory would exceed `(1 + grow_slack)` × the "
      "most memory ever in use at once (see `grow_for_pending_frees`); `True` "
      "always does; `False` creates pages "
      "until the cap and moves pages only under pressure (fewest remaps, "
      "reserved memory like expandable segments; where a step is the CPU's "
      "and moves pages every step, e.g. checkpointing with a new shape each "
      "step, this saves the moves' driver time: 15-21 ms of a ~100 ms step "
      "on the H200). See "
      "docs/design.md, Note [Where pages come from], for the measured "
      "trade-off"},
     Word<SetReclaim>},
    {{"grow_slack", "0.03", "the slack of `reclaim_before_grow:auto`"},
     Word<SetGrowSlack>},
    {{"move_time_budget", "0",
      "in `reclaim_before_grow:auto`, the most of the recent time (decayed "
      "over about a second, on `move_clock`) that moving pages may take: past "
      "it, a request creates pages instead of moving cached ones. `0` (the "
      "default) moves none once any page has moved in the last minutes, so "
      "a step that waits on the CPU and would move pages every step "
      "(checkpointing with a new shape each step) keeps a little more memory "
      "rather than spend ~35-85 µs a page in the driver; `0.02` lets moves "
      "take 2% of the time (GPT-2 + checkpointing 4-5% less memory, a "
      "CPU-paced Llama step ~1% slower); `1` never grows for it. Under the cap "
      "pages still move. See docs/design.md, Note [Move time budget]"},
     Word<SetMoveTimeBudget>},
    {{"move_clock", "`wall`",
      "the clock `move_time_budget`'s recent time runs on: `wall`, or `cpu` "
      "(the process's CPU time, all threads), which stands still while the "
      "process sleeps or blocks, so a process that is idle part of the time "
      "(an RL trainer waiting for rollouts, a pipeline bubble, processes "
      "taking turns on one GPU) gets the budget of the time it runs. See "
      "docs/design.md, Note [Move time budget]"},
     Word<SetMoveClock>},
    {{"grow_for_pending_frees", "`True`",
      "in `reclaim_before_grow:auto`, blocks freed while another stream may "
      "still use them (`record_stream`) count as in use, and while any are "
      "pending a request creates pages instead of reclaiming (waiting for the "
      "GPU and moving pages every step): memory grows to hold them, as "
      "PyTorch's allocator does (FSDP-style prefetch on a side stream); "
      "`False` counts allocated bytes only (less memory, more page moves and "
      "waits). See docs/design.md, Note [Pending frees count as in use]"},
     Word<SetFlag<&Options::grow_for_pending_frees>>},
    {{"defer_unmap", "`True`",
      "a page reclaimed from a hole that the request's own stream freed is "
      "mapped at once (stream order makes the reuse safe) and its old address "
      "is unmapped once the GPU has passed the hole's last use; `False` waits "
      "for the GPU first, as for other streams' holes. See docs/design.md, "
      "Note [Moving a page without waiting]"},
     Word<SetFlag<&Options::defer_unmap>>},
    {{"page_size_mb", "0",
      "MiB per page, one driver handle each: `0` is the device's allocation "
      "granularity (2 MiB on H100 and H200), else a multiple of it. Larger "
      "pages cost the CPU less per copy (the driver's time to issue a copy "
      "grows with the handles its source and destination span) and memory "
      "comes back in coarser pieces. See docs/design.md, Note [Page size and "
      "handle size], for the measured trade-off"},
     Word<SetMiB<&Options::page_size_bytes>>},
    {{"large_page_mb", "32",
      "MiB per page of the large blocks whose size is a multiple of it, in "
      "arenas of their own: `0` is none, else a multiple of the page (the "
      "default is none where the page does not divide it). A copy over such "
      "a block spans fewer driver handles, so the CPU issues it faster, and no "
      "page is partly used; either size's unused pages are released to make "
      "room for the other rather than grow, and once the two sizes trade "
      "memory (gradients of whole large pages coming as activations go) new "
      "blocks stop taking large pages. See docs/design.md, Note [Large "
      "pages]"},
     Word<SetMiB<&Options::large_page_bytes>>},
    {{"va_factor", "2",
      "virtual address space per arena, as a multiple of the memory cap"},
     Word<SetVaFactor>},
    {{"stats_at_exit", "`False`",
      "print a stats and fragmentation summary at exit"},
     Word<SetFlag<&Options::stats_at_exit>>},
    {{"time_calls", "`False`",
      "time the CPU spent inside every allocation and free (stats "
      "`alloc_cpu_ns`, `alloc_cpu_calls`; both 0 when off): two clock reads "
      "per call, about 10% of a steady-state free+alloc pair; see "
      "docs/stats.md, \"Where the time goes\""},
     Word<SetFlag<&Options::time_calls>>},
    {{"snapshot_path", "none", "write a snapshot at exit (LD_PRELOAD mode)"},
     Word<SetSnapshotPath, /*kPath=*/true>},
    {{"oom_report_path", "none",
      "a directory (created with its parents): each OOM also writes "
      "`fragfree-oom-<pid>-<n>.txt`, `.json` and `.html` (a picture of the "
      "memory map) there, in every mode, and names them on stderr"},
     Word<SetOomReportPath, /*kPath=*/true>},
    {{"trace_entries", "0",
      "trace ring buffer of alloc/free/map/unmap/oom events (0 = off); "
      "snapshots return it as `device_traces`; also `ff_record_history` / "
      "`torch.cuda.memory._record_memory_history`"},
     Word<SetTraceEntries>},
    {{"bucket_sample", "8",
      "the bucket advisor samples one request in N (on average) into a "
      "per-device size histogram (0 = off, 1 = every request); see "
      "docs/oom.md, \"Bucket advisor\""},
     Word<SetBucketSample>},
    {{"bucket_advice_k", "4",
      "rounding buckets the advisor proposes (1–256) in the OOM report, the "
      "`stats_at_exit` summary and `ff_bucket_advice_json(dev, 0, …)`; apply "
      "the proposal with `round_buckets`"},
     Word<SetBucketAdviceK>},
};

const KeyRow* FindKey(std::string_view name) {
  for (const KeyRow& row : kKeys) {
    if (row.doc.name == name) return &row;
  }
  return nullptr;
}

absl::Status UnknownKey(std::string_view key) {
  return absl::InvalidArgumentError(
      absl::StrFormat("FRAGFREE_CONF: unknown key '%s'. Known keys: %s", key,
                      absl::StrJoin(Options::KnownKeys(), ", ")));
}

// One `key:value` at t[i], applied to `o`; leaves i past the value.
absl::Status ParseKey(const Tokens& t, size_t& i, Options& o) {
  const std::string& key = t[i];
  const KeyRow* row = FindKey(key);
  if (row == nullptr) return UnknownKey(key);
  if (i + 2 > t.size() || t[i + 1] != ":") return NeedsValue(key);
  i += 2;
  return row->parse(key, t, i, o);
}

}  // namespace

const std::vector<Options::KeyDoc>& Options::Keys() {
  // Never destroyed: exit handlers may parse options after static destruction.
  static const auto* const docs = [] {
    auto* v = new std::vector<KeyDoc>;
    for (const KeyRow& row : kKeys) {
      v->push_back(row.doc);
      if (row.doc.doc == kFromBackendTable) v->back().doc = BackendsDoc();
    }
    return v;
  }();
  return *docs;
}

const std::vector<std::string>& Options::KnownKeys() {
  static const auto* const keys = [] {
    auto* v = new std::vector<std::string>;
    for (const KeyRow& row : kKeys) v->emplace_back(row.doc.name);
    return v;
  }();
  return *keys;
}

std::string Options::MarkdownTable() {
  std::string out = "| key | default | meaning |\n|---|---|---|\n";
  for (const KeyDoc& doc : Keys()) {
    for (std::string_view part :
         {std::string_view("| `"), doc.name, std::string_view("` | "),
          doc.default_text, std::string_view(" | "), doc.doc,
          std::string_view(" |\n")}) {
      out.append(part);
    }
  }
  return out;
}

absl::StatusOr<Options> Options::Parse(std::string_view conf) {
  return Parse(conf, Options());
}

absl::StatusOr<Options> Options::Parse(std::string_view conf, Options o) {
  const Tokens t = TokenizeConfig(conf);
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] == ",") {
      ++i;
      continue;
    }
    if (absl::Status s = ParseKey(t, i, o); !s.ok()) return s;
  }
  // The host capacity is a whole number of pages.
  if (o.host_capacity_bytes % o.host_granularity_bytes != 0) {
    o.host_capacity_bytes =
        AlignUp(o.host_capacity_bytes, o.host_granularity_bytes);
  }
  return o;
}

}  // namespace fragfree
