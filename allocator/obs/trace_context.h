// The calling thread's trace context: a caller-chosen 32-bit id (e.g. the
// PyTorch adapter's handle for a captured Python stack) that the allocator
// stores in the trace entries of the calls this thread makes (alloc,
// free_requested, segment_map, oom) and that snapshots return as "context",
// so the caller can attach its stacks to them. 0 = none. Set through
// ff_set_trace_context. Thread-safety: thread-local.
#ifndef FRAGFREE_ALLOCATOR_OBS_TRACE_CONTEXT_H_
#define FRAGFREE_ALLOCATOR_OBS_TRACE_CONTEXT_H_

#include <cstdint>

namespace fragfree {

inline thread_local uint32_t current_trace_context = 0;

// Returns the previous context.
inline uint32_t SetTraceContext(uint32_t context) {
  const uint32_t previous = current_trace_context;
  current_trace_context = context;
  return previous;
}
inline uint32_t CurrentTraceContext() { return current_trace_context; }

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_TRACE_CONTEXT_H_
