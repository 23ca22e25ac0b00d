// MetadataArena: loads fragfree's private jemalloc once (dlsym if it is already
// in the process, else dlopen next to this library, RTLD_LOCAL), creates one
// arena for metadata, and falls back to operator new when any step fails.
// Each thread gets an explicit jemalloc thread cache ("tcache.create") on first
// use, used only with fragfree's arena and destroyed at thread exit (a pthread
// key destructor): 40 ns per pair instead of 250-400 ns through the arena's
// locks, and the cache can only hold regions of fragfree's arena.
// Thread-safety: the state is built once under a function-local static's guard
// and is read-only after; the thread cache index is thread-local; counters are
// relaxed atomics.
#include "allocator/host/metadata_arena.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>

namespace fragfree {
namespace {

inline constexpr const char kCompanion[] = "libff_jemalloc.so";

struct State {
  const ff_jemalloc_api_t* je = nullptr;
  unsigned arena = 0;
  pthread_key_t tcache_key;  // its destructor destroys the thread's cache
  std::string backend = "operator new";
  std::string why_not;
};

void DestroyThreadCache(void* value);  // a pthread key destructor, below

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> live_allocations{0};
std::atomic<int64_t> total_allocations{0};

#ifdef FRAGFREE_WITH_JEMALLOC
// The companion's table: already loaded (linked by the program, or
// LD_PRELOAD), else dlopen'ed from FRAGFREE_JEMALLOC (a path), from the
// directory of the object holding this code, or by the library search path.
ff_jemalloc_api_fn FindCompanion(const char* env, std::string* why) {
  if (auto fn = reinterpret_cast<ff_jemalloc_api_fn>(
          dlsym(RTLD_DEFAULT, FF_JEMALLOC_API_SYMBOL))) {
    return fn;
  }
  std::vector<std::string> candidates;
  if (env != nullptr && std::strchr(env, '/') != nullptr) {
    candidates.push_back(env);
  } else {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&FindCompanion), &info) != 0 &&
        info.dli_fname != nullptr) {
      std::string self = info.dli_fname;
      size_t slash = self.rfind('/');
      if (slash != std::string::npos) {
        candidates.push_back(self.substr(0, slash + 1) + kCompanion);
      }
    }
    candidates.push_back(kCompanion);
  }
  for (const std::string& path : candidates) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      if (!why->empty()) *why += "; ";
      *why += error != nullptr ? error : path;
      continue;
    }
    if (auto fn = reinterpret_cast<ff_jemalloc_api_fn>(
            dlsym(handle, FF_JEMALLOC_API_SYMBOL))) {
      return fn;
    }
    *why += path + " has no " FF_JEMALLOC_API_SYMBOL;
    dlclose(handle);
  }
  return nullptr;
}
#endif

State Load() {
  State s;
#ifndef FRAGFREE_WITH_JEMALLOC
  s.why_not = "built without jemalloc (FRAGFREE_WITH_JEMALLOC=OFF)";
#else
  const char* env = std::getenv("FRAGFREE_JEMALLOC");
  if (env != nullptr &&
      (std::strcmp(env, "0") == 0 || std::strcmp(env, "false") == 0 ||
       std::strcmp(env, "False") == 0)) {
    s.why_not = "disabled by FRAGFREE_JEMALLOC=0";
    return s;
  }
  std::string why;
  ff_jemalloc_api_fn fn = FindCompanion(env, &why);
  if (fn == nullptr) {
    s.why_not = "cannot load " + std::string(kCompanion) + ": " + why;
    if (why.find("static TLS") != std::string::npos) {
      s.why_not +=
          " (jemalloc needs 2.6 KiB of initial-exec TLS: load it at start "
          "with LD_PRELOAD, or set "
          "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384)";
    }
    return s;
  }
  const ff_jemalloc_api_t* je = fn();
  if (je == nullptr || je->version != FF_JEMALLOC_API_VERSION) {
    s.why_not = std::string(kCompanion) + " has another API version";
    return s;
  }
  unsigned arena = 0;
  size_t len = sizeof(arena);
  if (int rc = je->mallctl("arenas.create", &arena, &len, nullptr, 0);
      rc != 0) {
    s.why_not = "jemalloc arenas.create failed: " + std::string(strerror(rc));
    return s;
  }
  if (pthread_key_create(&s.tcache_key, DestroyThreadCache) != 0) {
    s.why_not = "pthread_key_create failed";
    return s;
  }
  const char* version = "?";
  len = sizeof(version);
  je->mallctl("version", &version, &len, nullptr, 0);
  s.je = je;
  s.arena = arena;
  s.backend =
      "jemalloc " + std::string(version) + " arena " + std::to_string(arena);
#endif
  return s;
}

const State& Get() {
  static const State* const state = new State(Load());
  return *state;
}

// The calling thread's explicit cache: an index, or one of these.
constexpr unsigned kUnset = UINT_MAX;        // not created yet
constexpr unsigned kNoCache = UINT_MAX - 1;  // none: use the arena directly
thread_local unsigned thread_tcache = kUnset;

void DestroyThreadCache(void* value) {
  unsigned index = unsigned(reinterpret_cast<uintptr_t>(value) - 1);
  thread_tcache = kNoCache;  // later frees on this thread bypass caches
  Get().je->mallctl("tcache.destroy", nullptr, nullptr, &index, sizeof(index));
}

int ThreadCache(const State& s) {
  unsigned t = thread_tcache;
  if (t < kNoCache) return int(t);
  if (t == kNoCache) return -1;
  unsigned index = 0;
  size_t len = sizeof(index);
  thread_tcache = kNoCache;
  if (s.je->mallctl("tcache.create", &index, &len, nullptr, 0) != 0) return -1;
  if (pthread_setspecific(s.tcache_key,
                          reinterpret_cast<void*>(uintptr_t(index) + 1)) != 0) {
    s.je->mallctl("tcache.destroy", nullptr, nullptr, &index, sizeof(index));
    return -1;
  }
  thread_tcache = index;
  return int(index);
}

inline bool OverAligned(size_t alignment) {
  return alignment > __STDCPP_DEFAULT_NEW_ALIGNMENT__;
}

}  // namespace

void* MetadataArena::Allocate(size_t size, size_t alignment) noexcept {
  const State& s = Get();
  void* p;
  if (s.je != nullptr) {
    p = s.je->alloc(s.arena, ThreadCache(s), size, alignment);
  } else if (OverAligned(alignment)) {
    p = ::operator new(size, std::align_val_t(alignment), std::nothrow);
  } else {
    p = ::operator new(size, std::nothrow);
  }
  if (p != nullptr) {
    live_bytes.fetch_add(int64_t(size), std::memory_order_relaxed);
    live_allocations.fetch_add(1, std::memory_order_relaxed);
    total_allocations.fetch_add(1, std::memory_order_relaxed);
  }
  return p;
}

void MetadataArena::Deallocate(void* ptr, size_t size,
                               size_t alignment) noexcept {
  if (ptr == nullptr) return;
  live_bytes.fetch_sub(int64_t(size), std::memory_order_relaxed);
  live_allocations.fetch_sub(1, std::memory_order_relaxed);
  const State& s = Get();
  if (s.je != nullptr) {
    s.je->dealloc(s.arena, ThreadCache(s), ptr, size == 0 ? 1 : size,
                  alignment);
  } else if (OverAligned(alignment)) {
    ::operator delete(ptr, std::align_val_t(alignment));
  } else {
    ::operator delete(ptr);  // (unsized: clang lacks sized delete by default)
  }
}

MetadataArenaInfo MetadataArena::Info() {
  const State& s = Get();
  MetadataArenaInfo info;
  info.jemalloc = s.je != nullptr;
  info.arena = s.arena;
  info.backend = s.backend;
  info.why_not = s.why_not;
  info.live_bytes = live_bytes.load(std::memory_order_relaxed);
  info.live_allocations = live_allocations.load(std::memory_order_relaxed);
  info.total_allocations = total_allocations.load(std::memory_order_relaxed);
  return info;
}

bool MetadataArena::InPrivateArena(const void* ptr) {
  const State& s = Get();
  return s.je != nullptr && ptr != nullptr && s.je->arena_of(ptr) == s.arena;
}

const ff_jemalloc_api_t* MetadataArena::jemalloc() { return Get().je; }

}  // namespace fragfree
