// Region tags (docs/sleep.md): the names a program gives to groups of
// allocations ("weights", "kv_cache") so that it can pause and resume them
// together. Names are interned process-wide into small ids (1..kMaxRegionTags;
// 0 = untagged), the same on every device. Each thread has a stack of open
// regions; an allocation made on a thread takes the tag on top of its stack.
// Thread-safety: the intern table is guarded by its own mutex (ids, once
// given, never change or go away); the region stack is thread-local; the count
// of open regions is atomic, and a thread's own begin is counted before it
// returns, so the thread reads its stack on its next allocation.
#ifndef FRAGFREE_ALLOCATOR_SLEEP_REGION_TAGS_H_
#define FRAGFREE_ALLOCATOR_SLEEP_REGION_TAGS_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragfree {

using RegionTag = uint16_t;  // 0: untagged
inline constexpr RegionTag kNoRegionTag = 0;
inline constexpr size_t kMaxRegionTags = 4096;
inline constexpr size_t kMaxRegionTagLength = 128;
inline constexpr int kMaxRegionDepth = 64;

// The id of `name`, interned on first use. InvalidArgument for an empty name,
// one longer than kMaxRegionTagLength or one with a NUL or control character;
// ResourceExhausted past kMaxRegionTags distinct names.
absl::StatusOr<RegionTag> InternRegionTag(std::string_view name);
// The id of `name` if it was ever interned, else kNoRegionTag.
RegionTag FindRegionTag(std::string_view name);
// The name of an interned id ("" for kNoRegionTag or an unknown id).
std::string RegionTagName(RegionTag tag);
// Every interned id, ascending.
std::vector<RegionTag> AllRegionTags();

namespace internal {
struct RegionStack {
  RegionTag tags[kMaxRegionDepth] = {};
  int depth = 0;
};
// constinit: initialised statically, so that a read needs no TLS init
// wrapper.
inline constinit thread_local RegionStack region_stack;
// Regions open on all threads together (a thread that exits inside a region
// leaves its count): while it is zero no thread, the caller included, is in a
// region, and CurrentRegionTag reads no thread-local (in libfragfree.so each
// thread-local read is a call to the dynamic linker's TLS lookup).
inline constinit std::atomic<int64_t> regions_open{0};
}  // namespace internal

// Opens a region on the calling thread: its allocations take `name`'s tag until
// the matching RegionEnd. Nesting is allowed (the innermost tag applies), up to
// kMaxRegionDepth deep (FailedPrecondition beyond).
absl::Status RegionBegin(std::string_view name);
// Closes the calling thread's innermost region; FailedPrecondition when none is
// open.
absl::Status RegionEnd();
// The calling thread's current tag (kNoRegionTag outside any region): on the
// allocation path, one relaxed load while no thread is in a region.
inline RegionTag CurrentRegionTag() {
  if (internal::regions_open.load(std::memory_order_relaxed) == 0) {
    return kNoRegionTag;
  }
  const internal::RegionStack& s = internal::region_stack;
  return s.depth == 0 ? kNoRegionTag : s.tags[s.depth - 1];
}

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_SLEEP_REGION_TAGS_H_
