// MetadataArena: loads fragfree's private jemalloc once (dlsym if it is already
// in the process, else dlopen next to this library, RTLD_LOCAL), creates one
// arena for metadata, and falls back to fragfree's mmap arena when any step
// fails. Each thread gets an explicit jemalloc thread cache ("tcache.create")
// on first use, used only with fragfree's arena and destroyed at thread exit (a
// pthread key destructor): 40 ns per pair instead of 250-400 ns through the
// arena's locks, and the cache can only hold regions of fragfree's arena.
// Nothing here uses the program's heap: the state is plain data in static
// storage, built once (dlopen itself may call malloc inside glibc).
// Thread-safety: the state is built once under a function-local static's guard
// and is read-only after; the thread cache index is thread-local; counters are
// relaxed atomics; the mmap arena has its own lock.
#include "allocator/base/metadata_arena.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "allocator/base/mmap_arena.h"

namespace fragfree {
namespace {

inline constexpr const char kCompanion[] = "libff_jemalloc.so";
inline constexpr const char kMmapBackend[] = "fragfree mmap arena";

struct State {
  const ff_jemalloc_api_t* je = nullptr;
  unsigned arena = 0;
  pthread_key_t tcache_key{};  // its destructor destroys the thread's cache
  char backend[128] = {};
  char why_not[1024] = {};
};

// Appends to a fixed buffer, truncating.
template <size_t N>
void Append(char (&buf)[N], const char* text) {
  const size_t len = strnlen(buf, N - 1);
  snprintf(buf + len, N - len, "%s", text);
}

void DestroyThreadCache(void* value);  // a pthread key destructor, below

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> live_allocations{0};
std::atomic<int64_t> total_allocations{0};

// The fallback; constant-initialized and never destroyed.
constinit MmapArena mmap_arena;

#ifdef FRAGFREE_WITH_JEMALLOC
// The companion's table: already loaded (linked by the program, or
// LD_PRELOAD), else dlopen'ed from FRAGFREE_JEMALLOC (a path), from the
// directory of the object holding this code, or by the library search path.
ff_jemalloc_api_fn FindCompanion(const char* env, State* s) {
  if (auto fn = reinterpret_cast<ff_jemalloc_api_fn>(
          dlsym(RTLD_DEFAULT, FF_JEMALLOC_API_SYMBOL))) {
    return fn;
  }
  char candidates[2][PATH_MAX] = {};
  int n = 0;
  if (env != nullptr && std::strchr(env, '/') != nullptr) {
    snprintf(candidates[n++], PATH_MAX, "%s", env);
  } else {
    Dl_info info;
    if (dladdr(reinterpret_cast<void*>(&FindCompanion), &info) != 0 &&
        info.dli_fname != nullptr) {
      if (const char* slash = std::strrchr(info.dli_fname, '/')) {
        snprintf(candidates[n++], PATH_MAX, "%.*s%s",
                 int(slash - info.dli_fname + 1), info.dli_fname, kCompanion);
      }
    }
    snprintf(candidates[n++], PATH_MAX, "%s", kCompanion);
  }
  for (int i = 0; i < n; ++i) {
    const char* path = candidates[i];
    void* handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* error = dlerror();
      if (s->why_not[0] != '\0') Append(s->why_not, "; ");
      Append(s->why_not, error != nullptr ? error : path);
      continue;
    }
    if (auto fn = reinterpret_cast<ff_jemalloc_api_fn>(
            dlsym(handle, FF_JEMALLOC_API_SYMBOL))) {
      return fn;
    }
    Append(s->why_not, path);
    Append(s->why_not, " has no " FF_JEMALLOC_API_SYMBOL);
    dlclose(handle);
  }
  return nullptr;
}

// Sets s->je when the private jemalloc is usable, else says why not.
void LoadJemalloc(State* s) {
  const char* env = std::getenv("FRAGFREE_JEMALLOC");
  if (env != nullptr &&
      (std::strcmp(env, "0") == 0 || std::strcmp(env, "false") == 0 ||
       std::strcmp(env, "False") == 0)) {
    snprintf(s->why_not, sizeof(s->why_not), "disabled by FRAGFREE_JEMALLOC=0");
    return;
  }
  ff_jemalloc_api_fn fn = FindCompanion(env, s);
  if (fn == nullptr) {
    char why[sizeof(s->why_not)];
    snprintf(why, sizeof(why), "%s", s->why_not);
    snprintf(s->why_not, sizeof(s->why_not), "cannot load %s: ", kCompanion);
    Append(s->why_not, why);
    if (std::strstr(why, "static TLS") != nullptr) {
      Append(s->why_not,
             " (jemalloc needs 2.6 KiB of initial-exec TLS: load it at start "
             "with LD_PRELOAD, or set "
             "GLIBC_TUNABLES=glibc.rtld.optional_static_tls=16384)");
    }
    return;
  }
  s->why_not[0] = '\0';
  const ff_jemalloc_api_t* je = fn();
  if (je == nullptr || je->version != FF_JEMALLOC_API_VERSION) {
    snprintf(s->why_not, sizeof(s->why_not), "%s has another API version",
             kCompanion);
    return;
  }
  unsigned arena = 0;
  size_t len = sizeof(arena);
  if (int rc = je->mallctl("arenas.create", &arena, &len, nullptr, 0);
      rc != 0) {
    snprintf(s->why_not, sizeof(s->why_not),
             "jemalloc arenas.create failed: %s", strerror(rc));
    return;
  }
  if (pthread_key_create(&s->tcache_key, DestroyThreadCache) != 0) {
    snprintf(s->why_not, sizeof(s->why_not), "pthread_key_create failed");
    return;
  }
  const char* version = "?";
  len = sizeof(version);
  je->mallctl("version", &version, &len, nullptr, 0);
  s->je = je;
  s->arena = arena;
  snprintf(s->backend, sizeof(s->backend), "jemalloc %s arena %u", version,
           arena);
}
#endif

State Load() {
  State s;
#ifndef FRAGFREE_WITH_JEMALLOC
  snprintf(s.why_not, sizeof(s.why_not),
           "built without jemalloc (FRAGFREE_WITH_JEMALLOC=OFF)");
#else
  LoadJemalloc(&s);
#endif
  if (s.je == nullptr) {
    snprintf(s.backend, sizeof(s.backend), "%s", kMmapBackend);
  }
  return s;
}

// The mmap arena's lock is held across fork(), so that a child never inherits
// it held. Registered when the library (or program) is loaded, by a
// constructor that runs before fragfree's other constructors (priority 101),
// so before any handler of a layer above: prepare handlers run in reverse
// order of registration, so this lock is taken last, after the locks of
// layers that allocate metadata while holding them (docs/host.md, "Threads
// and fork").
__attribute__((constructor(101))) void RegisterMmapArenaForkHandlers() {
  pthread_atfork([] { mmap_arena.LockForFork(); },
                 [] { mmap_arena.UnlockAfterFork(); },
                 [] { mmap_arena.UnlockAfterFork(); });
}

const State& Get() {
  static const State state = Load();  // trivially destructible
  return state;
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

}  // namespace

void MetadataArena::Initialize() { Get(); }

void* MetadataArena::Allocate(size_t size, size_t alignment) noexcept {
  const State& s = Get();
  void* p = s.je != nullptr
                ? s.je->alloc(s.arena, ThreadCache(s), size, alignment)
                : mmap_arena.Allocate(size, alignment);
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
  } else {
    mmap_arena.Deallocate(ptr, size, alignment);
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
  info.mapped_bytes = int64_t(mmap_arena.mapped_bytes());
  return info;
}

bool MetadataArena::InPrivateArena(const void* ptr) {
  const State& s = Get();
  if (ptr == nullptr) return false;
  if (s.je != nullptr) return s.je->arena_of(ptr) == s.arena;
  return mmap_arena.Owns(ptr);
}

const ff_jemalloc_api_t* MetadataArena::jemalloc() { return Get().je; }

}  // namespace fragfree
