// Implementation of capture_relax.h. Thread-safety: see there.
#include "allocator/phys/capture_relax.h"

namespace fragfree {
namespace {

// Trivially initialised, so that reading it needs no TLS init call.
struct RelaxState {
  int armed = 0;  // RelaxCaptureScopes open on this thread
  // Non-null while switched: the driver to restore the mode through.
  const CudaDriver* switched_by = nullptr;
  // The thread's mode before the switch.
  CUstreamCaptureMode saved = CU_STREAM_CAPTURE_MODE_GLOBAL;
};
constinit thread_local RelaxState relax;

}  // namespace

RelaxCaptureScope::RelaxCaptureScope() { ++relax.armed; }

RelaxCaptureScope::~RelaxCaptureScope() {
  if (--relax.armed > 0 || relax.switched_by == nullptr) return;
  CUstreamCaptureMode mode = relax.saved;
  relax.switched_by->cuThreadExchangeStreamCaptureMode(&mode);
  relax.switched_by = nullptr;
}

void RelaxCaptureIfArmed(const CudaDriver& cu) {
  if (relax.armed == 0 || relax.switched_by != nullptr) return;
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  if (cu.cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS) return;
  relax.saved = mode;
  relax.switched_by = &cu;
}

}  // namespace fragfree
