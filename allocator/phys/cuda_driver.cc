#include "allocator/phys/cuda_driver.h"

#include <dlfcn.h>

#include <string_view>

#include "absl/strings/str_format.h"
#include "allocator/base/metadata_arena.h"
#include "allocator/phys/capture_relax.h"

namespace fragfree {
namespace {

using GetProcAddressFn = CUresult (*)(const char*, void**, int, cuuint64_t,
                                      CUdriverProcAddressQueryResult*);

// The CUDA version to ask cuGetProcAddress for `name`: CUDA_VERSION, except for
// the functions whose newest ABI changed the signature under the same name
// while cuda.h still declares the old one (asking for CUDA_VERSION would hand
// back a function that takes one argument more than we pass).
// tests/allocator/cuda_abi_versions_test.py checks this list against cuda.h.
int AbiVersionOf(std::string_view name) {
  if (name == "cuStreamGetCtx") return 9020;  // v12050 adds a CUgreenCtx*
  if (name == "cuCtxGetDevice") return 2000;  // v13000 adds a CUcontext
  return CUDA_VERSION;
}

absl::StatusOr<CudaDriver> Load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    return absl::UnavailableError(absl::StrFormat(
        "fragfree: cannot open the CUDA driver (libcuda.so.1): %s. Use "
        "FRAGFREE_CONF=backend:host on machines without a GPU.",
        dlerror()));
  }
  auto get_proc =
      reinterpret_cast<GetProcAddressFn>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get_proc == nullptr) {
    return absl::UnavailableError(
        "fragfree: the CUDA driver is too old (no cuGetProcAddress_v2; CUDA "
        "12 or newer is required)");
  }
  CudaDriver driver;
  CUdriverProcAddressQueryResult found;
#define FF_RESOLVE(name)                                                     \
  if (get_proc(#name, reinterpret_cast<void**>(&driver.name),                \
               AbiVersionOf(#name), CU_GET_PROC_ADDRESS_DEFAULT,             \
               &found) != CUDA_SUCCESS ||                                    \
      driver.name == nullptr) {                                              \
    return absl::UnavailableError("fragfree: the CUDA driver lacks " #name); \
  }
  FF_CUDA_DRIVER_FUNCTIONS(FF_RESOLVE)
#undef FF_RESOLVE
  CUresult init = driver.cuInit(0);
  if (init != CUDA_SUCCESS) {
    return driver.ToStatus(init, "cuInit(0)", __FILE__, __LINE__);
  }
  return driver;
}

}  // namespace

absl::StatusOr<const CudaDriver*> CudaDriver::Get() {
  // On the metadata arena (its error message, if any, on the heap).
  static const absl::StatusOr<CudaDriver>* const loaded =
      MetadataNew<absl::StatusOr<CudaDriver>>(Load());
  if (!loaded->ok()) return loaded->status();
  return &**loaded;
}

absl::StatusOr<CUcontext> CudaDriver::RetainPrimaryContext(int device) const {
  CUdevice dev;
  FF_CU_RETURN_IF_ERROR(*this, cuDeviceGet(&dev, device));
  CUcontext context;
  FF_CU_RETURN_IF_ERROR(*this, cuDevicePrimaryCtxRetain(&context, dev));
  return context;
}

absl::Status CudaDriver::ToStatus(CUresult result, const char* call,
                                  const char* file, int line) const {
  const char* name = "unknown CUresult";
  const char* text = "";
  if (cuGetErrorName != nullptr) cuGetErrorName(result, &name);
  if (cuGetErrorString != nullptr) cuGetErrorString(result, &text);
  std::string message = absl::StrFormat("%s failed at %s:%d: %s (%s)", call,
                                        file, line, name, text);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    return absl::ResourceExhaustedError(message);
  }
  return absl::InternalError(message);
}

CudaContextScope::CudaContextScope(const CudaDriver& cu, CUcontext context)
    : cu_(cu) {
  RelaxCaptureIfArmed(cu_);
  CUresult r = cu_.cuCtxGetCurrent(&previous_);
  if (r != CUDA_SUCCESS) {
    status_ = cu_.ToStatus(r, "cuCtxGetCurrent", __FILE__, __LINE__);
    return;
  }
  if (previous_ == context) return;
  r = cu_.cuCtxSetCurrent(context);
  if (r != CUDA_SUCCESS) {
    status_ = cu_.ToStatus(r, "cuCtxSetCurrent", __FILE__, __LINE__);
    return;
  }
  switched_ = true;
}

CudaContextScope::~CudaContextScope() {
  if (switched_) cu_.cuCtxSetCurrent(previous_);
}

}  // namespace fragfree
