// Helpers for the OOM report tests: a minimal JSON checker, arenas built from
// block lists, facts that agree with them, and a numbers-only context.
// Thread-safety: test code, single-threaded.
#ifndef FRAGFREE_TESTS_OBS_OOM_TEST_UTIL_H_
#define FRAGFREE_TESTS_OBS_OOM_TEST_UTIL_H_

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "allocator/base/units.h"
#include "allocator/obs/oom_report.h"

namespace fragfree {
namespace testing_oom {

// --- A minimal JSON checker (RFC 8259 grammar, no semantics). ---------------
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s) : s_(s) {}
  bool Valid() {
    Ws();
    if (!Value()) return false;
    Ws();
    return i_ == s_.size();
  }

 private:
  void Ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' ||
                              s_[i_] == '\t' || s_[i_] == '\r')) {
      ++i_;
    }
  }
  bool Lit(const char* w) {
    size_t n = strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  bool String() {
    if (s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      char c = s_[i_];
      if (c == '"') return ++i_, true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        ++i_;
        if (i_ >= s_.size()) return false;
        if (s_[i_] == 'u') {
          for (int k = 0; k < 4; ++k) {
            if (++i_ >= s_.size() || !isxdigit(s_[i_])) return false;
          }
        } else if (!strchr("\"\\/bfnrt", s_[i_])) {
          return false;
        }
      }
    }
    return false;
  }
  bool Number() {
    size_t start = i_;
    if (s_[i_] == '-') ++i_;
    while (i_ < s_.size() && (isdigit(s_[i_]) || strchr(".eE+-", s_[i_]))) ++i_;
    return i_ > start;
  }
  bool Value() {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '{') {
      ++i_;
      Ws();
      if (s_[i_] == '}') return ++i_, true;
      while (true) {
        Ws();
        if (!String()) return false;
        Ws();
        if (s_[i_++] != ':') return false;
        Ws();
        if (!Value()) return false;
        Ws();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        return s_[i_++] == '}';
      }
    }
    if (c == '[') {
      ++i_;
      Ws();
      if (s_[i_] == ']') return ++i_, true;
      while (true) {
        Ws();
        if (!Value()) return false;
        Ws();
        if (s_[i_] == ',') {
          ++i_;
          continue;
        }
        return s_[i_++] == ']';
      }
    }
    if (c == '"') return String();
    if (c == 't') return Lit("true");
    if (c == 'f') return Lit("false");
    if (c == 'n') return Lit("null");
    return Number();
  }
  const std::string& s_;
  size_t i_ = 0;
};

// --- Building arenas. ------------------------------------------------------
struct Spec {
  size_t size;
  BlockState state;
  uint64_t seq = 0;
  bool mapped = true;  // for free blocks: whether their pages stay mapped
};

inline ArenaView Build(uintptr_t base, size_t page, StreamHandle stream,
                       bool small, const std::vector<Spec>& specs) {
  ArenaView a{};
  a.base = base;
  a.page_size = page;
  a.stream = stream;
  a.small = small;
  uintptr_t at = base;
  for (const Spec& s : specs) {
    a.blocks.push_back(BlockView{
        at, s.size, s.state == BlockState::kFree ? 0 : s.size - s.size / 64,
        s.state, s.seq});
    if (s.state != BlockState::kFree || s.mapped) {
      size_t first = (at - base) / page, last = (at - base + s.size - 1) / page;
      if (a.page_mapped.size() <= last) a.page_mapped.resize(last + 1, false);
      for (size_t p = first; p <= last; ++p) a.page_mapped[p] = true;
    }
    at += s.size;
  }
  a.va_size = std::max<size_t>(2 * (at - base), page);
  for (bool m : a.page_mapped) a.mapped_pages += m;
  return a;
}

// Facts that agree with the arenas: mapped, allocated, active, cached,
// reclaimable.
inline void FactsFromArenas(OomContext* ctx) {
  OomFacts& f = ctx->facts;
  f.mapped_bytes = f.allocated_bytes = f.active_bytes = f.cached_bytes =
      f.reclaimable_bytes = 0;
  size_t requested = 0;
  for (const ArenaView& a : ctx->arenas) {
    f.mapped_bytes += a.mapped_pages * a.page_size;
    auto mapped = [&](size_t p) {
      return p < a.page_mapped.size() && a.page_mapped[p];
    };
    for (const BlockView& b : a.blocks) {
      if (b.state == BlockState::kAllocated) {
        f.allocated_bytes += b.size;
        requested += b.requested;
      }
      if (b.state != BlockState::kFree) {
        f.active_bytes += b.size;
        continue;
      }
      size_t lo = b.addr - a.base, hi = lo + b.size;
      for (size_t p = lo / a.page_size; p * a.page_size < hi; ++p) {
        if (!mapped(p)) continue;
        size_t ps = p * a.page_size, pe = ps + a.page_size;
        f.cached_bytes += std::min(hi, pe) - std::max(lo, ps);
        if (ps >= lo && pe <= hi) f.reclaimable_bytes += a.page_size;
      }
    }
  }
  ctx->stats.allocated_bytes.pool[kPoolAll].current =
      int64_t(f.allocated_bytes);
  ctx->stats.reserved_bytes.pool[kPoolAll].current = int64_t(f.mapped_bytes);
  ctx->stats.requested_bytes.pool[kPoolAll].current = int64_t(requested);
  ctx->stats.mapped_bytes.current = int64_t(f.mapped_bytes);
}

// A context without arenas: numbers only.
inline OomContext Numbers(size_t allocated, size_t mapped, size_t cached,
                          size_t reclaimable) {
  OomContext c;
  c.facts.device = 0;
  c.facts.stream = 0x10;
  c.facts.requested_bytes = 2 * kGiB - 100;
  c.facts.rounded_bytes = 2 * kGiB;
  c.facts.device_total_bytes = 80 * kGiB;
  c.facts.limit_bytes = 80 * kGiB;
  c.facts.device_free_bytes = 1 * kGiB;
  c.facts.mapped_bytes = mapped;
  c.facts.allocated_bytes = allocated;
  c.facts.active_bytes = allocated;
  c.facts.cached_bytes = cached;
  c.facts.reclaimable_bytes = reclaimable;
  c.facts.pages_needed = 1024;
  c.facts.reason = "every whole free page is already in use";
  return c;
}

}  // namespace testing_oom
}  // namespace fragfree

#endif  // FRAGFREE_TESTS_OBS_OOM_TEST_UTIL_H_
