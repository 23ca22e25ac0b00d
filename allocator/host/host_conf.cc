// HostConf::Parse: FRAGFREE_HOST_CONF, `key:value` pairs separated by commas.
// Thread-safety: pure function.
#include "allocator/host/host_conf.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {

absl::Status Bad(std::string_view key, std::string_view value,
                 std::string_view expected) {
  return absl::InvalidArgumentError(absl::StrFormat(
      "FRAGFREE_HOST_CONF: bad value '%s' for key '%s': expected %s", value,
      key, expected));
}

absl::StatusOr<bool> Bool(std::string_view key, std::string_view v) {
  if (v == "True" || v == "true" || v == "1") return true;
  if (v == "False" || v == "false" || v == "0") return false;
  return Bad(key, v, "True or False");
}

absl::StatusOr<int64_t> Int(std::string_view key, std::string_view v,
                            int64_t min, int64_t max) {
  int64_t n = 0;
  if (!absl::SimpleAtoi(absl::string_view(v.data(), v.size()), &n) || n < min ||
      n > max) {
    return Bad(key, v, absl::StrFormat("an integer in [%d, %d]", min, max));
  }
  return n;
}

}  // namespace

absl::StatusOr<HostConf> HostConf::Parse(std::string_view conf_text) {
  HostConf out;
  // (Debian's abseil has its own string_view: split with it, compare as std.)
  const absl::string_view conf(conf_text.data(), conf_text.size());
  for (absl::string_view item :
       absl::StrSplit(conf, ',', absl::SkipWhitespace())) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(item, absl::MaxSplits(':', 1));
    const absl::string_view k = absl::StripAsciiWhitespace(kv.first);
    const absl::string_view v = absl::StripAsciiWhitespace(kv.second);
    const std::string_view key(k.data(), k.size());
    const std::string_view value(v.data(), v.size());
    if (key == "chunk_mb") {
      absl::StatusOr<int64_t> n = Int(key, value, 1, 1 << 20);
      if (!n.ok()) return n.status();
      out.pinned.chunk_bytes = size_t(*n) * kMiB;
    } else if (key == "release_after_ms") {
      absl::StatusOr<int64_t> n = Int(key, value, -1, int64_t{1} << 40);
      if (!n.ok()) return n.status();
      out.pinned.release_after_ms = *n;
    } else if (key == "pin") {
      if (value != "host_alloc" && value != "register") {
        return Bad(key, value, "host_alloc or register");
      }
      out.register_pages = value == "register";
    } else if (key == "serve_preload" || key == "emulate_populate" ||
               key == "emulate_lock") {
      absl::StatusOr<bool> b = Bool(key, value);
      if (!b.ok()) return b.status();
      bool& target = key == "serve_preload"      ? out.serve_preload
                     : key == "emulate_populate" ? out.emulation.populate
                                                 : out.emulation.lock;
      target = *b;
    } else if (key == "emulate_capacity_mb") {
      absl::StatusOr<int64_t> n = Int(key, value, 0, int64_t{1} << 30);
      if (!n.ok()) return n.status();
      out.emulation.capacity_bytes = size_t(*n) * kMiB;
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "FRAGFREE_HOST_CONF: unknown key '%s' (known: chunk_mb, "
          "release_after_ms, pin, serve_preload, emulate_populate, "
          "emulate_lock, emulate_capacity_mb)",
          key));
    }
  }
  return out;
}

}  // namespace fragfree
