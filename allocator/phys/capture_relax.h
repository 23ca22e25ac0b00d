// Relaxed stream-capture mode for the engine's own driver calls, paid for only
// when the engine makes one. While another thread captures a CUDA graph in
// global mode, a "potentially unsafe" driver call (an event query, a mapping)
// from any thread invalidates that capture unless the calling thread is in
// relaxed mode. A caller that cannot know whether a capture is under way (the
// LD_PRELOAD interposer: PyTorch's cudaMallocAsync backend does not tell it)
// arms a RelaxCaptureScope around its engine call; the CUDA layer calls
// RelaxCaptureIfArmed before each of its driver calls (CudaContextScope and
// the event queries in stream/cuda_events.cc do), which switches the thread
// to relaxed mode once per armed scope; the scope puts the thread's mode back
// when it ends. An engine call that makes no driver call (the steady-state
// allocation and free: docs/design.md, Note [Hot path]) makes no mode call at
// all. Unarmed threads (the Python adapters, the C API) are never switched.
// Thread-safety: the state is per thread; nothing is shared.
#ifndef FRAGFREE_ALLOCATOR_PHYS_CAPTURE_RELAX_H_
#define FRAGFREE_ALLOCATOR_PHYS_CAPTURE_RELAX_H_

#include "allocator/phys/cuda_driver.h"

namespace fragfree {

// Arms relaxed mode for the engine's driver calls on this thread until the
// outermost scope ends, which restores the mode the thread had if a driver
// call switched it. Scopes nest.
class RelaxCaptureScope {
 public:
  RelaxCaptureScope();
  ~RelaxCaptureScope();
  RelaxCaptureScope(const RelaxCaptureScope&) = delete;
  RelaxCaptureScope& operator=(const RelaxCaptureScope&) = delete;

  struct State;  // a thread's state (opaque: capture_relax.cc)

 private:
  // This thread's state, looked up once (in libfragfree.so a thread-local's
  // address is a call into the dynamic linker).
  State* const state_;
};

// Before a driver call: switches this thread to relaxed capture mode if a
// RelaxCaptureScope is armed and the thread is not switched yet.
void RelaxCaptureIfArmed(const CudaDriver& cu);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_CAPTURE_RELAX_H_
