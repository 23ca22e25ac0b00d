// Options::Parse: the FRAGFREE_CONF tokenizer and every key's parser and
// validation (errors name the key and what was expected). Thread-safety: pure
// functions.
#include "allocator/options.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "allocator/base/units.h"
#include "allocator/obs/bucket_advisor.h"

namespace fragfree {
namespace {

// Splits `conf` into tokens: words, and the single characters , : [ ].
std::vector<std::string> Tokenize(std::string_view conf) {
  std::vector<std::string> tokens;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(word), word.clear();
  };
  for (char c : conf) {
    if (c == ',' || c == ':' || c == '[' || c == ']') {
      flush();
      tokens.push_back(std::string(1, c));
    } else if (!std::isspace(static_cast<unsigned char>(c))) {
      word += c;
    } else {
      flush();
    }
  }
  flush();
  return tokens;
}

absl::Status BadValue(std::string_view key, std::string_view value,
                      std::string_view expected) {
  return absl::InvalidArgumentError(
      absl::StrFormat("FRAGFREE_CONF: bad value '%s' for key '%s': expected %s",
                      value, key, expected));
}

absl::StatusOr<bool> ParseBool(std::string_view key, std::string_view v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  return BadValue(key, v, "True or False");
}

absl::StatusOr<size_t> ParseSize(std::string_view key, std::string_view v) {
  // Plain bytes, or with a K/M/G suffix (binary units).
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

// roundup_power2_divisions: N, or [<MB>:<div>,...,>:<div>] (PyTorch semantics).
absl::Status ParseDivisions(const std::vector<std::string>& t, size_t& i,
                            RoundingConfig& rounding) {
  const char* key = "roundup_power2_divisions";
  auto check = [&](uint64_t d) -> absl::Status {
    if (d != 0 && !IsPowerOfTwo(d)) {
      return BadValue(key, std::to_string(d), "a power of two (or 0)");
    }
    return absl::OkStatus();
  };
  if (i < t.size() && t[i] != "[") {
    absl::StatusOr<uint64_t> d = ParseUint(key, t[i]);
    if (!d.ok()) return d.status();
    if (absl::Status s = check(*d); !s.ok()) return s;
    rounding.divisions.fill(*d);
    ++i;
    return absl::OkStatus();
  }
  ++i;  // '['
  bool first = true;
  size_t last_index = 0;
  while (i < t.size() && t[i] != "]") {
    if (t[i] == ",") {
      ++i;
      continue;
    }
    if (i + 2 >= t.size() || t[i + 1] != ":") {
      return BadValue(key, t[i], "[<MB>:<divisions>,...,>:<divisions>]");
    }
    absl::StatusOr<uint64_t> d = ParseUint(key, t[i + 2]);
    if (!d.ok()) return d.status();
    if (absl::Status s = check(*d); !s.ok()) return s;
    if (t[i] == ">") {
      for (size_t k = last_index + 1; k < 16; ++k) rounding.divisions[k] = *d;
    } else {
      absl::StatusOr<uint64_t> mb = ParseUint(key, t[i]);
      if (!mb.ok()) return mb.status();
      if (*mb == 0 || !IsPowerOfTwo(*mb)) {
        return BadValue(key, t[i],
                        "interval boundaries that are powers of two");
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
  }
  if (i >= t.size()) return BadValue(key, "[", "a closing ']'");
  ++i;
  return absl::OkStatus();
}

// round_buckets:[512K,1M,4M,...]: explicit rounding buckets.
absl::Status ParseBuckets(const std::vector<std::string>& t, size_t& i,
                          RoundingConfig& rounding) {
  const char* key = "round_buckets";
  if (i >= t.size() || t[i] != "[") return BadValue(key, "", "[size,size,...]");
  ++i;
  rounding.buckets.clear();
  while (i < t.size() && t[i] != "]") {
    if (t[i] == ",") {
      ++i;
      continue;
    }
    absl::StatusOr<size_t> b = ParseSize(key, t[i]);
    if (!b.ok()) return b.status();
    if (*b == 0 || *b % 512 != 0) {
      return BadValue(key, t[i], "bucket sizes that are multiples of 512");
    }
    rounding.buckets.push_back(*b);
    ++i;
  }
  if (i >= t.size()) return BadValue(key, "[", "a closing ']'");
  ++i;
  std::sort(rounding.buckets.begin(), rounding.buckets.end());
  rounding.buckets.erase(
      std::unique(rounding.buckets.begin(), rounding.buckets.end()),
      rounding.buckets.end());
  return absl::OkStatus();
}

}  // namespace

const std::vector<std::string>& Options::KnownKeys() {
  // Never destroyed: exit handlers may parse options after static destruction.
  static const auto* const keys =
      new std::vector<std::string>{"backend",
                                   "host_capacity_mb",
                                   "host_granularity_kb",
                                   "host_devices",
                                   "per_process_memory_fraction",
                                   "memory_limit_mb",
                                   "roundup_power2_divisions",
                                   "round_buckets",
                                   "reclaim_before_grow",
                                   "grow_slack",
                                   "va_factor",
                                   "stats_at_exit",
                                   "snapshot_path",
                                   "oom_report_path",
                                   "trace_entries",
                                   "bucket_sample",
                                   "bucket_advice_k"};
  return *keys;
}

absl::StatusOr<Options> Options::Parse(std::string_view conf) {
  return Parse(conf, Options());
}

absl::StatusOr<Options> Options::Parse(std::string_view conf, Options o) {
  std::vector<std::string> t = Tokenize(conf);
  size_t i = 0;
  while (i < t.size()) {
    if (t[i] == ",") {
      ++i;
      continue;
    }
    const std::string key = t[i];
    const auto& known = KnownKeys();
    if (std::find(known.begin(), known.end(), key) == known.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("FRAGFREE_CONF: unknown key '%s'. Known keys: %s",
                          key, absl::StrJoin(known, ", ")));
    }
    if (i + 2 > t.size() || t[i + 1] != ":") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "FRAGFREE_CONF: key '%s' needs a value ('%s:<value>')", key, key));
    }
    i += 2;
    if (key == "roundup_power2_divisions") {
      if (absl::Status s = ParseDivisions(t, i, o.rounding); !s.ok()) return s;
      continue;
    }
    if (key == "round_buckets") {
      if (absl::Status s = ParseBuckets(t, i, o.rounding); !s.ok()) return s;
      continue;
    }
    if (i >= t.size() || t[i] == "," || t[i] == "[" || t[i] == "]") {
      return absl::InvalidArgumentError(absl::StrFormat(
          "FRAGFREE_CONF: key '%s' needs a value ('%s:<value>')", key, key));
    }
    // Paths may contain ':'; take tokens up to the next ','.
    std::string value = t[i++];
    if (key == "snapshot_path" || key == "oom_report_path") {
      while (i < t.size() && t[i] != ",") value += t[i++];
    }
    absl::Status status;
    if (key == "backend") {
      if (value == "cuda")
        o.backend = BackendKind::kCuda;
      else if (value == "host")
        o.backend = BackendKind::kHost;
      else if (value == "simulated")
        o.backend = BackendKind::kSimulated;
      else
        status = BadValue(key, value, "cuda, host or simulated");
    } else if (key == "host_capacity_mb") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok() && *n == 0)
        n = BadValue(key, value, "a positive number of MiB");
      if (n.ok()) o.host_capacity_bytes = *n * kMiB;
      status = n.status();
    } else if (key == "host_granularity_kb") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok() && (*n < 4 || !IsPowerOfTwo(*n))) {
        n = BadValue(key, value, "a power of two >= 4 (KiB)");
      }
      if (n.ok()) o.host_granularity_bytes = *n * kKiB;
      status = n.status();
    } else if (key == "host_devices") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok() && (*n == 0 || *n > 64)) {
        n = BadValue(key, value, "a number of devices from 1 to 64");
      }
      if (n.ok()) o.host_devices = int(*n);
      status = n.status();
    } else if (key == "per_process_memory_fraction") {
      double f = 0;
      if (!absl::SimpleAtod(value, &f) || !(f > 0.0 && f <= 1.0)) {
        status = BadValue(key, value, "a fraction in (0, 1]");
      } else {
        o.memory_fraction = f;
      }
    } else if (key == "memory_limit_mb") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok()) o.memory_limit_bytes = *n * kMiB;
      status = n.status();
    } else if (key == "reclaim_before_grow") {
      if (value == "auto") {
        o.reclaim_before_grow = Options::Reclaim::kAuto;
      } else {
        absl::StatusOr<bool> b = ParseBool(key, value);
        if (b.ok()) {
          o.reclaim_before_grow =
              *b ? Options::Reclaim::kAlways : Options::Reclaim::kNever;
        } else {
          status = BadValue(key, value, "True, False or auto");
        }
      }
    } else if (key == "grow_slack") {
      double f = 0;
      if (!absl::SimpleAtod(value, &f) || !(f >= 0.0 && f <= 10.0)) {
        status = BadValue(key, value, "a fraction >= 0 (0.03 = 3%)");
      } else {
        o.grow_slack = f;
      }
    } else if (key == "va_factor") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok() && (*n < 1 || *n > 64)) n = BadValue(key, value, "1 to 64");
      if (n.ok()) o.va_factor = *n;
      status = n.status();
    } else if (key == "stats_at_exit") {
      absl::StatusOr<bool> b = ParseBool(key, value);
      if (b.ok()) o.stats_at_exit = *b;
      status = b.status();
    } else if (key == "snapshot_path") {
      o.snapshot_path = value;
    } else if (key == "oom_report_path") {
      o.oom_report_path = value;
    } else if (key == "trace_entries") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok()) o.trace_entries = *n;
      status = n.status();
    } else if (key == "bucket_sample") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (n.ok() && *n > kMaxBucketSample) {
        n = BadValue(key, value,
                     absl::StrFormat("0 (off) or 1 to %d: one request in N "
                                     "is sampled",
                                     kMaxBucketSample));
      } else if (!n.ok()) {
        n = BadValue(key, value, "a whole number: 0 (off) or 1 in N requests");
      }
      if (n.ok()) o.bucket_sample = uint32_t(*n);
      status = n.status();
    } else if (key == "bucket_advice_k") {
      absl::StatusOr<uint64_t> n = ParseUint(key, value);
      if (!n.ok() || *n < 1 || *n > kMaxAdvisedBuckets) {
        n = BadValue(key, value,
                     absl::StrFormat("a number of buckets from 1 to %d",
                                     kMaxAdvisedBuckets));
      }
      if (n.ok()) o.bucket_advice_k = *n;
      status = n.status();
    }
    if (!status.ok()) return status;
  }
  if (o.host_capacity_bytes % o.host_granularity_bytes != 0) {
    o.host_capacity_bytes =
        AlignUp(o.host_capacity_bytes, o.host_granularity_bytes);
  }
  return o;
}

}  // namespace fragfree
