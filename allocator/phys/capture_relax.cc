// Implementation of capture_relax.h. Thread-safety: see there.
#include "allocator/phys/capture_relax.h"

namespace fragfree {

struct RelaxCaptureScope::State {
  int armed = 0;  // RelaxCaptureScopes open on this thread
  // Non-null while switched: the driver to restore the mode through.
  const CudaDriver* switched_by = nullptr;
  // The thread's mode before the switch.
  CUstreamCaptureMode saved = CU_STREAM_CAPTURE_MODE_GLOBAL;
};

namespace {
// Constant-initialised, so that reading it needs no TLS init call.
constinit thread_local RelaxCaptureScope::State relax;
}  // namespace

RelaxCaptureScope::RelaxCaptureScope() : state_(&relax) { ++state_->armed; }

RelaxCaptureScope::~RelaxCaptureScope() {
  if (--state_->armed > 0 || state_->switched_by == nullptr) return;
  CUstreamCaptureMode mode = state_->saved;
  state_->switched_by->cuThreadExchangeStreamCaptureMode(&mode);
  state_->switched_by = nullptr;
}

void RelaxCaptureIfArmed(const CudaDriver& cu) {
  if (relax.armed == 0 || relax.switched_by != nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (cu.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS) return;
  relax.saved = mode;
  relax.switched_by = &cu;
}

}  // namespace fragfree
