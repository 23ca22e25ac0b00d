// StreamHandle: a CUDA stream (cudaStream_t / CUstream) as an integer. On the
// host backend it is an opaque tag chosen by the caller. 0 is the default
// (legacy) stream. Thread-safety: a value type.
#ifndef FRAGFREE_ALLOCATOR_BASE_STREAM_HANDLE_H_
#define FRAGFREE_ALLOCATOR_BASE_STREAM_HANDLE_H_

#include <cstdint>

namespace fragfree {
using StreamHandle = uintptr_t;
}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_STREAM_HANDLE_H_
