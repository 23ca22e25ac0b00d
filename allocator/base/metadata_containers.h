// abseil's containers on the metadata arena (base/metadata_arena.h has the std
// ones): MetadataFlatHashMap, MetadataFlatHashSet, MetadataBtreeSet,
// MetadataBtreeMap. Same hashing and ordering as the plain abseil types; only
// the allocator differs. Thread-safety: like the abseil containers (the
// arena itself is thread-safe).
#ifndef FRAGFREE_ALLOCATOR_BASE_METADATA_CONTAINERS_H_
#define FRAGFREE_ALLOCATOR_BASE_METADATA_CONTAINERS_H_

#include <functional>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/hash/hash.h"
#include "allocator/base/metadata_arena.h"

namespace fragfree {

template <typename K, typename V>
using MetadataFlatHashMap =
    absl::flat_hash_map<K, V, absl::Hash<K>, std::equal_to<K>,
                        MetadataAllocator<std::pair<const K, V>>>;
template <typename K>
using MetadataFlatHashSet =
    absl::flat_hash_set<K, absl::Hash<K>, std::equal_to<K>,
                        MetadataAllocator<K>>;
template <typename K, typename Less = std::less<K>>
using MetadataBtreeSet = absl::btree_set<K, Less, MetadataAllocator<K>>;
template <typename K, typename V, typename Less = std::less<K>>
using MetadataBtreeMap =
    absl::btree_map<K, V, Less, MetadataAllocator<std::pair<const K, V>>>;

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_METADATA_CONTAINERS_H_
