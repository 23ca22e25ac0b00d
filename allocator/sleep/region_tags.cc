// Region tags: the process-wide intern table and the per-thread region stack
// (region_tags.h). Thread-safety: the table under its mutex; the stack is
// thread-local.
#include "allocator/sleep/region_tags.h"

#include "absl/strings/str_format.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/base/metadata_containers.h"
#include "allocator/base/mutex.h"

namespace fragfree {
namespace {

using TagString =
    std::basic_string<char, std::char_traits<char>, MetadataAllocator<char>>;

// Names by id (index 0 unused), and ids by name. On the metadata arena; never
// destroyed (allocations may be freed during static destruction).
struct TagTable {
  Mutex mu;
  MetadataVector<TagString> names ABSL_GUARDED_BY(mu);
  MetadataFlatHashMap<TagString, RegionTag> ids ABSL_GUARDED_BY(mu);
};

TagTable& Table() {
  static TagTable* const table = MetadataNew<TagTable>();
  return *table;
}

absl::Status CheckName(std::string_view name) {
  if (name.empty()) {
    return absl::InvalidArgumentError("a region tag must not be empty");
  }
  if (name.size() > kMaxRegionTagLength) {
    return absl::InvalidArgumentError(
        absl::StrFormat("region tag '%s...' is longer than %d characters",
                        name.substr(0, 32), kMaxRegionTagLength));
  }
  for (char c : name) {
    if (static_cast<unsigned char>(c) < 0x20) {
      return absl::InvalidArgumentError(
          "a region tag must not contain control characters");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<RegionTag> InternRegionTag(std::string_view name) {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  TagTable& t = Table();
  MutexLock lock(&t.mu);
  TagString key(name.data(), name.size());
  if (auto it = t.ids.find(key); it != t.ids.end()) return it->second;
  if (t.names.empty()) t.names.emplace_back();  // id 0: untagged
  if (t.names.size() > kMaxRegionTags) {
    return absl::ResourceExhaustedError(absl::StrFormat(
        "too many distinct region tags (at most %d)", kMaxRegionTags));
  }
  const RegionTag id = RegionTag(t.names.size());
  t.names.push_back(key);
  t.ids.emplace(std::move(key), id);
  return id;
}

RegionTag FindRegionTag(std::string_view name) {
  TagTable& t = Table();
  MutexLock lock(&t.mu);
  auto it = t.ids.find(TagString(name.data(), name.size()));
  return it == t.ids.end() ? kNoRegionTag : it->second;
}

std::string RegionTagName(RegionTag tag) {
  TagTable& t = Table();
  MutexLock lock(&t.mu);
  if (tag == kNoRegionTag || tag >= t.names.size()) return "";
  return std::string(t.names[tag].data(), t.names[tag].size());
}

std::vector<RegionTag> AllRegionTags() {
  TagTable& t = Table();
  MutexLock lock(&t.mu);
  std::vector<RegionTag> out;
  for (size_t i = 1; i < t.names.size(); ++i) out.push_back(RegionTag(i));
  return out;
}

absl::Status RegionBegin(std::string_view name) {
  internal::RegionStack& s = internal::region_stack;
  if (s.depth >= kMaxRegionDepth) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "regions are nested more than %d deep on this thread (a missing "
        "region end?)",
        kMaxRegionDepth));
  }
  absl::StatusOr<RegionTag> tag = InternRegionTag(name);
  if (!tag.ok()) return tag.status();
  s.tags[s.depth++] = *tag;
  internal::regions_open.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::Status RegionEnd() {
  internal::RegionStack& s = internal::region_stack;
  if (s.depth == 0) {
    return absl::FailedPreconditionError(
        "region end without a region begin on this thread");
  }
  --s.depth;
  internal::regions_open.fetch_sub(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

}  // namespace fragfree
