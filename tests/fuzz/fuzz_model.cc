// fuzz_model: engine_fuzz's reference model and its checks (fuzz_model.h).
// Thread-safety: single-threaded.
#include "tests/fuzz/fuzz_model.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>

#include "allocator/base/units.h"
#include "allocator/obs/allocator_view.h"
#include "allocator/obs/stats.h"

namespace fragfree::fuzz {

Reporter::Reporter(size_t page, size_t capacity)
    : page_(page),
      capacity_(capacity),
      trace_(getenv("FRAGFREE_FUZZ_TRACE") != nullptr) {}

void Reporter::Fail(const char* fmt, ...) const {
  va_list args;
  va_start(args, fmt);
  fprintf(stderr,
          "\nengine_fuzz: step %d (%s), page %zu B, capacity %zu B: ", step_,
          op_name(), page_, capacity_);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fprintf(stderr, "\n");
  abort();
}

void Reporter::Trace(const char* fmt, ...) const {
  if (!trace_) return;
  va_list args;
  va_start(args, fmt);
  fprintf(stderr, "[%d] ", step_);
  vfprintf(stderr, fmt, args);
  va_end(args);
  fprintf(stderr, "\n");
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

Model::Model(size_t page, size_t capacity, const Options& options,
             const Reporter& report)
    : page_(page),
      capacity_(capacity),
      rounding_(options.rounding),
      report_(report),
      limit_request_(options.memory_limit_bytes),
      fraction_(options.memory_fraction) {}

size_t Model::LimitBytes() const {
  size_t limit = size_t(double(capacity_) * fraction_);
  if (limit_request_ != 0) limit = std::min(limit, limit_request_);
  return AlignDown(limit, page_);
}

size_t Model::IndexOf(uintptr_t addr) const {
  return size_t(std::find(order_.begin(), order_.end(), addr) - order_.begin());
}

std::vector<uintptr_t> Model::EveryOther(int parity) const {
  std::vector<uintptr_t> out;
  size_t i = 0;
  for (const auto& [addr, b] : live_) {
    if (i++ % 2 == size_t(parity)) out.push_back(addr);
  }
  return out;
}

uintptr_t Model::BadPointer(uint8_t kind, uint16_t v) const {
  static char foreign[64];
  switch (kind % 5) {
    case 0:
      return reinterpret_cast<uintptr_t>(&foreign[v % 64]);
    case 1:  // interior pointer of a live block
      if (!order_.empty()) {
        uintptr_t addr = order_[v % order_.size()];
        return addr + 1 + v % std::max<size_t>(live_.at(addr).rounded - 1, 1);
      }
      return 0x1000;
    case 2:  // double free
      if (!freed_.empty()) return freed_[v % freed_.size()];
      return 0x2000;
    case 3:  // near a live block, any offset
      if (!order_.empty()) return order_[v % order_.size()] + v * 512;
      return 0x3000;
    default:
      return uintptr_t(Mix(v)) & ~uintptr_t{511};
  }
}

void Model::AddLive(uintptr_t addr, size_t size, StreamHandle stream) {
  const LiveBlock b{size, rounding_.Round(size), Mix(++seed_), stream};
  auto next = live_.lower_bound(addr);
  if (next != live_.end() && next->first < addr + b.rounded) {
    report_.Fail("new block 0x%zx+%zu overlaps the live block at 0x%zx",
                 size_t(addr), b.rounded, size_t(next->first));
  }
  if (next != live_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second.rounded > addr) {
      report_.Fail("new block 0x%zx overlaps the live block at 0x%zx+%zu",
                   size_t(addr), size_t(prev->first), prev->second.rounded);
    }
  }
  live_.emplace(addr, b);
  order_.push_back(addr);
  allocated_ += b.rounded;
  requested_ += b.size;
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  freed_.erase(std::remove(freed_.begin(), freed_.end(), addr), freed_.end());
  WritePattern(addr, b);
}

void Model::RemoveLive(size_t index) {
  uintptr_t addr = order_[index];
  const LiveBlock& b = live_.at(addr);
  allocated_ -= b.rounded;
  requested_ -= b.size;
  live_.erase(addr);
  order_[index] = order_.back();
  order_.pop_back();
  freed_.push_back(addr);
  if (freed_.size() > 64) freed_.erase(freed_.begin());
}

// One word per 4 KiB (so a page mapped at the wrong place shows) and the last
// 8 bytes; stride words that overlap the tail word are not checked.
void Model::WritePattern(uintptr_t addr, const LiveBlock& b) const {
  char* p = reinterpret_cast<char*>(addr);
  for (size_t off = 0; off < b.size; off += 4096) {
    uint64_t v = Mix(b.seed + off);
    memcpy(p + off, &v, std::min<size_t>(8, b.size - off));
  }
  if (b.size >= 16) {
    uint64_t v = Mix(b.seed ^ 0xabcdefull);
    memcpy(p + b.size - 8, &v, 8);
  }
}

void Model::CheckPattern(uintptr_t addr, const LiveBlock& b) const {
  const char* p = reinterpret_cast<const char*>(addr);
  for (size_t off = 0; off < b.size; off += 4096) {
    const size_t n = std::min<size_t>(8, b.size - off);
    if (b.size >= 16 && off + 8 > b.size - 8) continue;
    uint64_t want = Mix(b.seed + off);
    if (memcmp(p + off, &want, n) != 0) {
      report_.Fail(
          "data of the live block at 0x%zx (%zu B) changed at offset %zu",
          size_t(addr), b.size, off);
    }
  }
  if (b.size >= 16) {
    uint64_t want = Mix(b.seed ^ 0xabcdefull);
    if (memcmp(p + b.size - 8, &want, 8) != 0) {
      report_.Fail("tail of the live block at 0x%zx (%zu B) changed",
                   size_t(addr), b.size);
    }
  }
}

void Model::VerifyAll() const {
  for (const auto& [addr, b] : live_) CheckPattern(addr, b);
}

bool Model::PoolsHoldPages() const {
  for (int id = 0; id < kMaxPools; ++id) {
    if (begun_[id] && !pools_[id].released) return true;
  }
  return false;
}

bool Model::Capturing() const {
  for (const PoolModel& p : pools_) {
    if (p.capturing) return true;
  }
  return false;
}

void Model::CheckState(DeviceAllocator& a) {
  if (absl::Status s = a.CheckInvariants(); !s.ok()) {
    report_.Fail("CheckInvariants: %s", s.ToString().c_str());
  }
  DeviceStats st = a.GetStats();
  const Stat& alloc = st.allocated_bytes.pool[kPoolAll];
  if (size_t(alloc.current) != allocated_) {
    report_.Fail("allocated_bytes.all.current %lld != model %zu",
                 (long long)alloc.current, allocated_);
  }
  if (size_t(alloc.peak) != peak_allocated_) {
    report_.Fail("allocated_bytes.all.peak %lld != model %zu",
                 (long long)alloc.peak, peak_allocated_);
  }
  if (size_t(st.requested_bytes.pool[kPoolAll].current) != requested_) {
    report_.Fail("requested_bytes.all.current %lld != model %zu",
                 (long long)st.requested_bytes.pool[kPoolAll].current,
                 requested_);
  }
  if (size_t(st.allocation.pool[kPoolAll].current) != live_.size()) {
    report_.Fail("allocation.all.current %lld != %zu live blocks",
                 (long long)st.allocation.pool[kPoolAll].current, live_.size());
  }
  if (st.num_ooms != ooms_) {
    report_.Fail("num_ooms %lld != model %lld", (long long)st.num_ooms,
                 (long long)ooms_);
  }
  if (st.invalid_frees != invalid_frees_) {
    report_.Fail("invalid_frees %lld != model %lld",
                 (long long)st.invalid_frees, (long long)invalid_frees_);
  }
  if (a.memory_limit() != LimitBytes()) {
    report_.Fail("memory_limit() %zu != model %zu", a.memory_limit(),
                 LimitBytes());
  }
  if (size_t(st.reserved_bytes.pool[kPoolAll].current) > capacity_) {
    report_.Fail("reserved_bytes %lld exceed the capacity",
                 (long long)st.reserved_bytes.pool[kPoolAll].current);
  }
  // Data can only be hurt when pages move: check every live block then.
  if (st.pages_unmapped != last_unmapped_) {
    last_unmapped_ = st.pages_unmapped;
    VerifyAll();
  }
}

void Model::CheckOomJustified(size_t size, StreamHandle stream, size_t touched,
                              const absl::Status& status) const {
  const size_t limit_pages = LimitBytes() / page_;
  if (size > LimitBytes()) return;
  const size_t rounded = rounding_.Round(size);
  const size_t need = (rounded + page_ - 1) / page_ + 1;
  if (touched + need <= limit_pages) {
    report_.Fail(
        "OOM for %zu B (%zu rounded) on stream 0x%zx with %zu of %zu "
        "pages touched by live blocks: %s",
        size, rounded, size_t(stream), touched, limit_pages,
        status.ToString().c_str());
  }
}

void Model::CheckAfterEmptyCache(DeviceAllocator& a,
                                 const PhysicalBackend& backend) const {
  DeviceStats st = a.GetStats();
  size_t touched = TouchedPages(a, page_);
  if (size_t(st.reserved_bytes.pool[kPoolAll].current) != touched * page_) {
    report_.Fail(
        "after EmptyCache %lld B are mapped but live blocks touch "
        "only %zu pages",
        (long long)st.reserved_bytes.pool[kPoolAll].current, touched);
  }
  if (st.idle_page_bytes.current != 0) {
    report_.Fail("after EmptyCache %lld B of idle pages remain",
                 (long long)st.idle_page_bytes.current);
  }
  size_t backend_used = capacity_ - backend.MemoryInfo().free_bytes;
  if (backend_used != touched * page_) {
    report_.Fail(
        "after EmptyCache the backend holds %zu B for %zu mapped "
        "pages",
        backend_used, touched);
  }
}

void Model::CheckAllReturned(DeviceAllocator& a,
                             const PhysicalBackend& backend) const {
  DeviceStats st = a.GetStats();
  if (st.reserved_bytes.pool[kPoolAll].current != 0 ||
      st.idle_page_bytes.current != 0 ||
      st.active_bytes.pool[kPoolAll].current != 0) {
    report_.Fail(
        "after freeing everything and EmptyCache: reserved %lld, idle "
        "%lld, active %lld (want 0)",
        (long long)st.reserved_bytes.pool[kPoolAll].current,
        (long long)st.idle_page_bytes.current,
        (long long)st.active_bytes.pool[kPoolAll].current);
  }
  if (backend.MemoryInfo().free_bytes != capacity_) {
    report_.Fail(
        "after freeing everything and EmptyCache the backend has %zu of "
        "%zu B free (pages leaked)",
        backend.MemoryInfo().free_bytes, capacity_);
  }
}

}  // namespace fragfree::fuzz
