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
 * them, then the time spent waiting for fences. Appended last in ff_stats_t
 * (version 4). */
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
  X(fence_wait_ns)

#endif /* FRAGFREE_ALLOCATOR_OBS_STAT_FIELDS_H_ */
