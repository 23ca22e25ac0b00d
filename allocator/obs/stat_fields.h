/* The field lists of fragfree's statistics, as X-macros, in plain C so that the
 * public C header (installed as <fragfree/stat_fields.h>) and the C++ engine
 * are generated from one list. Meanings: docs/stats.md. Thread-safety: macros
 * only. */
#ifndef FRAGFREE_ALLOCATOR_OBS_STAT_FIELDS_H_
#define FRAGFREE_ALLOCATOR_OBS_STAT_FIELDS_H_

/* <name>.{all,small_pool,large_pool}.{current,peak,allocated,freed} */
#define FF_STAT_ARRAY_FIELDS(X) \
  X(allocation)                 \
  X(segment)                    \
  X(active)                     \
  X(inactive_split)             \
  X(allocated_bytes)            \
  X(reserved_bytes)             \
  X(active_bytes)               \
  X(inactive_split_bytes)       \
  X(requested_bytes)

/* <name>.{current,peak,allocated,freed} */
#define FF_STAT_FIELDS(X) \
  X(oversize_allocations) \
  X(oversize_segments)    \
  X(mapped_bytes)         \
  X(idle_page_bytes)

/* Plain counters (PyTorch's scalars first, then fragfree's). */
#define FF_COUNTER_FIELDS(X) \
  X(num_alloc_retries)       \
  X(num_ooms)                \
  X(max_split_size)          \
  X(num_sync_all_streams)    \
  X(num_device_alloc)        \
  X(num_device_free)         \
  X(pages_mapped)            \
  X(pages_unmapped)          \
  X(pages_remapped)          \
  X(handles_created)         \
  X(handles_released)        \
  X(fences_recorded)         \
  X(fence_waits)             \
  X(num_streams)             \
  X(num_arenas)              \
  X(invalid_frees)

/* Figures computed from the allocator's state when stats are taken. */
#define FF_GAUGE_FIELDS(X) \
  X(cached_free_bytes)     \
  X(reclaimable_bytes)     \
  X(largest_free_block)    \
  X(total_free_va_mapped)  \
  X(device_total_bytes)    \
  X(device_free_bytes)     \
  X(memory_limit_bytes)    \
  X(page_size)

/* Sleep and wake (docs/sleep.md): gauges when stats are taken, then counters.
 * In ff_stats_t they come after the fragmentation figures, so the struct only
 * grows. */
#define FF_SLEEP_FIELDS(X) \
  X(paused_tags)           \
  X(paused_bytes)          \
  X(backup_bytes)          \
  X(num_pauses)            \
  X(num_resumes)           \
  X(num_resume_failures)   \
  X(kept_backup_bytes)

/* Where the time goes (docs/stats.md): counters that only grow, never reset.
 * Nanoseconds of CPU time inside the engine's Malloc and Free (and how many
 * such calls), then per kind of backend call (cuMemCreate, cuMemRelease,
 * cuMemMap, cuMemUnmap, cuMemSetAccess on CUDA) the calls and the time in
 * them, then the time spent waiting for fences (version 4); then the time
 * spent moving pages as the move time budget meters it, and the pages created
 * instead of moved because that budget was spent (version 5; docs/design.md,
 * Note [Move time budget]); then the large page that new blocks of a whole
 * number of it take, 0 when none or retired (version 6, a gauge;
 * docs/design.md, Note [Large pages]). Appended last in ff_stats_t. */
#define FF_TIMING_FIELDS(X) \
  X(alloc_cpu_ns)           \
  X(alloc_cpu_calls)        \
  X(create_calls)           \
  X(create_ns)              \
  X(release_calls)          \
  X(release_ns)             \
  X(map_calls)              \
  X(map_ns)                 \
  X(unmap_calls)            \
  X(unmap_ns)               \
  X(set_access_calls)       \
  X(set_access_ns)          \
  X(fence_wait_ns)          \
  X(move_ns)                \
  X(move_budget_pages)      \
  X(large_page_size)

/* ff_stats_t's layout (fragfree.h), pinned: every field's byte offset and the
 * struct's size for FF_STATS_VERSION. fragfree's build checks the struct
 * against this table (shim/c_api.cc) and that every field of the lists above
 * is in it, so a field added anywhere but at the end moves a pinned offset and
 * fails the build. A caller's ff_stats_t.size below FF_STATS_SIZE is refused.
 * Adding a field: append it to FF_TIMING_FIELDS (the struct's last list), its
 * offset here, grow FF_STATS_SIZE and bump FF_STATS_VERSION. Versions: 1 up to
 * external_fragmentation, 2 the sleep fields, 3 kept_backup_bytes, 4 the
 * timing counters, 5 move_ns and move_budget_pages, 6 large_page_size. */
#define FF_STATS_VERSION 6
#define FF_STATS_SIZE 1400
#define FF_STATS_LAYOUT(X)        \
  X(allocation, 8)                \
  X(segment, 104)                 \
  X(active, 200)                  \
  X(inactive_split, 296)          \
  X(allocated_bytes, 392)         \
  X(reserved_bytes, 488)          \
  X(active_bytes, 584)            \
  X(inactive_split_bytes, 680)    \
  X(requested_bytes, 776)         \
  X(oversize_allocations, 872)    \
  X(oversize_segments, 904)       \
  X(mapped_bytes, 936)            \
  X(idle_page_bytes, 968)         \
  X(num_alloc_retries, 1000)      \
  X(num_ooms, 1008)               \
  X(max_split_size, 1016)         \
  X(num_sync_all_streams, 1024)   \
  X(num_device_alloc, 1032)       \
  X(num_device_free, 1040)        \
  X(pages_mapped, 1048)           \
  X(pages_unmapped, 1056)         \
  X(pages_remapped, 1064)         \
  X(handles_created, 1072)        \
  X(handles_released, 1080)       \
  X(fences_recorded, 1088)        \
  X(fence_waits, 1096)            \
  X(num_streams, 1104)            \
  X(num_arenas, 1112)             \
  X(invalid_frees, 1120)          \
  X(cached_free_bytes, 1128)      \
  X(reclaimable_bytes, 1136)      \
  X(largest_free_block, 1144)     \
  X(total_free_va_mapped, 1152)   \
  X(device_total_bytes, 1160)     \
  X(device_free_bytes, 1168)      \
  X(memory_limit_bytes, 1176)     \
  X(page_size, 1184)              \
  X(u_alloc, 1192)                \
  X(u_active, 1200)               \
  X(external_fragmentation, 1208) \
  X(paused_tags, 1216)            \
  X(paused_bytes, 1224)           \
  X(backup_bytes, 1232)           \
  X(num_pauses, 1240)             \
  X(num_resumes, 1248)            \
  X(num_resume_failures, 1256)    \
  X(kept_backup_bytes, 1264)      \
  X(alloc_cpu_ns, 1272)           \
  X(alloc_cpu_calls, 1280)        \
  X(create_calls, 1288)           \
  X(create_ns, 1296)              \
  X(release_calls, 1304)          \
  X(release_ns, 1312)             \
  X(map_calls, 1320)              \
  X(map_ns, 1328)                 \
  X(unmap_calls, 1336)            \
  X(unmap_ns, 1344)               \
  X(set_access_calls, 1352)       \
  X(set_access_ns, 1360)          \
  X(fence_wait_ns, 1368)          \
  X(move_ns, 1376)                \
  X(move_budget_pages, 1384)      \
  X(large_page_size, 1392)

#endif /* FRAGFREE_ALLOCATOR_OBS_STAT_FIELDS_H_ */
