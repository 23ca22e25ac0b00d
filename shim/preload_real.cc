// Finds the CUDA runtime's and driver's functions for the LD_PRELOAD
// interposer (see preload_real.h): dlsym(RTLD_NEXT) first, then a
// libcudart.so* (libcuda.so*) already loaded in a local scope. Never loads a
// library itself.
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

struct Search {
  const char* prefix;  // "libcudart.so" or "libcuda.so"
  const char* path = nullptr;
};

// dl_iterate_phdr callback: the path of the first loaded `prefix`*.
int FindLoaded(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  Search* search = static_cast<Search*>(data);
  const char* path = info->dlpi_name;
  if (path == nullptr || path[0] == '\0') return 0;
  const char* base = strrchr(path, '/');
  base = base != nullptr ? base + 1 : path;
  if (strncmp(base, search->prefix, strlen(search->prefix)) != 0) return 0;
  search->path = path;
  return 1;
}

// A handle to the runtime (driver) library if it is loaded already
// (RTLD_NOLOAD), or nullptr.
void* Loaded(Lib lib) {
  static std::atomic<void*> handles[2] = {nullptr, nullptr};
  std::atomic<void*>& handle = handles[lib == Lib::kDriver ? 1 : 0];
  void* h = handle.load(std::memory_order_acquire);
  if (h != nullptr) return h;
  Search search{lib == Lib::kDriver ? "libcuda.so" : "libcudart.so"};
  dl_iterate_phdr(FindLoaded, &search);
  if (search.path == nullptr) return nullptr;
  h = dlopen(search.path, RTLD_LAZY | RTLD_NOLOAD);
  if (h != nullptr) handle.store(h, std::memory_order_release);
  return h;
}

}  // namespace

void* FindReal(const char* name, bool optional, Lib lib) {
  void* p = dlsym(RTLD_NEXT, name);
  if (p == nullptr) {
    if (void* loaded = Loaded(lib)) p = dlsym(loaded, name);
  }
  if (p == nullptr && !optional) {
    const bool driver = lib == Lib::kDriver;
    fprintf(
        stderr,
        "fragfree: cannot find the CUDA %s's %s (neither "
        "dlsym(RTLD_NEXT) nor a loaded %s* has it); calls that "
        "fragfree must forward to it fail with %s\n",
        driver ? "driver" : "runtime", name,
        driver ? "libcuda.so" : "libcudart.so",
        driver ? "CUDA_ERROR_NOT_INITIALIZED" : "cudaErrorInitializationError");
  }
  return p;
}

RealCuda& Real() {
  static RealCuda* const real = MetadataNew<RealCuda>();
  return *real;
}

}  // namespace fragfree::preload
