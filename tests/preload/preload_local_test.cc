// Loads fake_ext (which links the fake CUDA runtime) with RTLD_LOCAL, as
// Python imports extension modules, and runs its checks under
// LD_PRELOAD=libfragfree.so: the interposer must find the runtime's functions
// even though dlsym(RTLD_NEXT) cannot.
// Thread-safety: single-threaded.
#include <dlfcn.h>

#include <cstdio>

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s path/to/libpreload_fake_ext.so\n", argv[0]);
    return 2;
  }
  void* ext = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (ext == nullptr) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  auto run = reinterpret_cast<int (*)()>(dlsym(ext, "fake_ext_run"));
  if (run == nullptr) return 2;
  const int rc = run();
  if (rc != 0)
    fprintf(stderr, "fake_ext_run failed at step %d\n", rc);
  else
    printf("local-scope runtime: ok\n");
  return rc;
}
