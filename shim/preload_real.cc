// Finds the CUDA runtime's functions for the LD_PRELOAD interposer (see
// preload_real.h): dlsym(RTLD_NEXT) first, then a libcudart.so* already loaded
// in a local scope. Never loads a library itself.
// Thread-safety: FindReal may run on many threads at once (dlsym and
// dl_iterate_phdr are thread-safe; the cached handle is an atomic).
#include "shim/preload_real.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdio>
#include <cstring>

#include "allocator/base/metadata_arena.h"

namespace fragfree::preload {
namespace {

// dl_iterate_phdr callback: the path of the first loaded libcudart.so*.
int FindCudart(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  const char* path = info->dlpi_name;
  if (path == nullptr || path[0] == '\0') return 0;
  const char* base = strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  if (strncmp(base, "libcudart.so", strlen("libcudart.so")) != 0) return 0;
  *static_cast<const char**>(data) = path;
  return 1;
}

// A handle to a libcudart that is loaded already (RTLD_NOLOAD), or nullptr.
void* LoadedCudart() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  const char* path = nullptr;
  dl_iterate_phdr(FindCudart, &path);
  if (path == nullptr) return nullptr;
  h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
  if (h != nullptr) handle.store(h, std::memory_order_release);
  return h;
}

}  // namespace

void* FindReal(const char* name, bool optional) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    if (void* cudart = LoadedCudart()) p = dlsym(cudart, name);
  }
  if (p == nullptr && !optional) {
    fprintf(stderr,
            "fragfree: cannot find the CUDA runtime's %s (neither "
            "dlsym(RTLD_NEXT) nor a loaded libcudart.so* has it); calls that "
            "fragfree must forward to it fail with "
            "cudaErrorInitializationError\n",
            name);
  }
  return p;
}

RealCuda& Real() {
  static RealCuda* const real = MetadataNew<RealCuda>();
  return *real;
}

}  // namespace fragfree::preload
