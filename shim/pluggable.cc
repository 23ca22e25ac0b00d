// PyTorch's CUDAPluggableAllocator entry points, with the exact ABI PyTorch
// calls (torch/csrc/cuda/CUDAPluggableAllocator.h): alloc(size, device,
// stream) and free(ptr, size, device, stream) where stream is the allocation
// stream.
// Thread-safety: as the C API.
#include <stdexcept>
#include <string>

#include "fragfree/fragfree.h"
#include "shim/call_entry.h"

extern "C" {

// PyTorch stores this in a std::function and never checks for NULL: a NULL
// data pointer would fault later, far from the cause. So on failure this throws
// (the exception crosses into PyTorch's C++, which raises it in Python as a
// RuntimeError carrying fragfree's message), as RMM's PyTorch allocator does.
void* fragfree_malloc(size_t size, int device, void* stream) {
  void* p = fragfree::MallocCall(size, device, stream);
  if (p == nullptr && size > 0) {
    throw std::runtime_error(ff_last_error());
  }
  return p;
}

void fragfree_free(void* ptr, size_t /*size*/, int device, void* /*stream*/) {
  fragfree::FreeCall(ptr, device);
}

void fragfree_empty_cache(void) { ff_empty_cache(FF_DEVICE_ALL); }

void fragfree_set_memory_fraction(double fraction, int device) {
  ff_set_memory_fraction(fraction, device);
}

// PyTorch passes no device: the pointer's owner is found (on any device).
void fragfree_record_stream(void* ptr, void* stream) {
  ff_record_stream(ptr, FF_DEVICE_OWNER, stream);
}

}  // extern "C"
