// Backup and the host and simulated backends' copiers (backup.h); the CUDA
// copier is in backup_cuda.cc. Thread-safety: see backup.h.
#include "allocator/sleep/backup.h"

#include <pthread.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {

// The host backend: device memory is host memory, so a copy is a memcpy,
// complete when issued. Backups live in anonymous mappings (never the
// program's heap).
class HostMemcpyCopier final : public BackupCopier {
 public:
  absl::StatusOr<void*> AllocateHost(size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      return absl::ResourceExhaustedError(
          absl::StrFormat("cannot map %s of host memory for a backup: %s",
                          FormatBytes(bytes), strerror(errno)));
    }
    return p;
  }
  void FreeHost(void* host, size_t bytes) override { munmap(host, bytes); }
  absl::StatusOr<uint64_t> CopyToHost(void* dst, uintptr_t src,
                                      size_t bytes) override {
    memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return ++ticket_;
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t dst, const void* src,
                                        size_t bytes) override {
    memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return ++ticket_;
  }
  absl::Status WaitFor(uint64_t) override { return absl::OkStatus(); }
  bool copies_contents() const override { return true; }
  // Two, so that the helper threads' code runs (and is checked by TSan) in
  // the host tests.
  int host_threads() const override { return 2; }

 private:
  uint64_t ticket_ = 0;
};

// The simulated backend has no memory behind its addresses: a backup is
// bookkeeping only.
class NullCopier final : public BackupCopier {
 public:
  absl::StatusOr<void*> AllocateHost(size_t) override { return nullptr; }
  void FreeHost(void*, size_t) override {}
  absl::StatusOr<uint64_t> CopyToHost(void*, uintptr_t, size_t) override {
    return ++ticket_;
  }
  absl::StatusOr<uint64_t> CopyToDevice(uintptr_t, const void*,
                                        size_t) override {
    return ++ticket_;
  }
  absl::Status WaitFor(uint64_t) override { return absl::OkStatus(); }
  bool copies_contents() const override { return false; }

 private:
  uint64_t ticket_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<BackupCopier>> MakeBackupCopier(
    const std::string& backend_name, int device) {
  if (absl::StartsWith(backend_name, "host")) {
    return std::unique_ptr<BackupCopier>(new HostMemcpyCopier());
  }
  if (absl::StartsWith(backend_name, "cuda")) {
#ifdef FRAGFREE_WITH_CUDA
    return MakeCudaBackupCopier(device);
#else
    return absl::UnimplementedError(
        "this fragfree was built without CUDA: no CPU backup on the cuda "
        "backend");
#endif
  }
  (void)device;
  return std::unique_ptr<BackupCopier>(new NullCopier());
}

namespace {

// Runs fn(i) for i in [0, n) on up to `threads` threads (the caller's among
// them); returns when every call has returned. Helper threads that cannot be
// started leave their share to the others.
template <typename Fn>
void ParallelFor(int threads, size_t n, Fn fn) {
  struct Shared {
    Fn* fn;
    size_t n;
    std::atomic<size_t> next{0};
    static void Run(Shared* s) {
      for (size_t i; (i = s->next.fetch_add(1)) < s->n;) (*s->fn)(i);
    }
  } shared;
  shared.fn = &fn;
  shared.n = n;
  const int helpers =
      int(std::min<size_t>(size_t(std::max(threads, 1)), n)) - 1;
  pthread_t ids[16];
  int started = 0;
  for (int t = 0; t < std::min(helpers, 16); ++t) {
    if (pthread_create(
            &ids[started], nullptr,
            [](void* arg) -> void* {
              Shared::Run(static_cast<Shared*>(arg));
              return nullptr;
            },
            &shared) == 0) {
      ++started;
    }
  }
  Shared::Run(&shared);
  for (int t = 0; t < started; ++t) pthread_join(ids[t], nullptr);
}

// Chunk sizes are multiples of this (a 2 MiB huge page: THP-friendly).
constexpr size_t kChunkGranule = size_t{2} << 20;

}  // namespace

void FreeHostChunks(BackupCopier* copier, const HostChunk* chunks, size_t n) {
  if (n == 0) return;
  ParallelFor(copier->host_threads(), n, [&](size_t i) {
    copier->FreeHost(chunks[i].base, chunks[i].size);
  });
}

// --- BackupPool --------------------------------------------------------------

void BackupPool::Put(HostChunk c) {
  if (c.base == nullptr) return;
  chunks_.push_back(c);
  bytes_ += c.size;
}

bool BackupPool::Take(size_t need, HostChunk* out) {
  if (chunks_.empty()) return false;
  size_t best = chunks_.size(), largest = 0;
  for (size_t i = 0; i < chunks_.size(); ++i) {
    const size_t s = chunks_[i].size;
    if (s >= need && (best == chunks_.size() || s < chunks_[best].size)) {
      best = i;
    }
    if (s > chunks_[largest].size) largest = i;
  }
  const size_t i = best != chunks_.size() ? best : largest;
  *out = chunks_[i];
  chunks_[i] = chunks_.back();
  chunks_.pop_back();
  bytes_ -= out->size;
  return true;
}

size_t BackupPool::Release() {
  const size_t freed = bytes_;
  if (copier_ != nullptr)
    FreeHostChunks(copier_, chunks_.data(), chunks_.size());
  chunks_.clear();
  bytes_ = 0;
  return freed;
}

// --- Backup ------------------------------------------------------------------

// New chunks being got, in order, by helper threads (or, with one host
// thread, by the caller when it needs each).
struct Backup::Pipeline {
  struct Slot {
    void* host = nullptr;
    bool done = false;
    bool taken = false;
  };
  BackupCopier* copier;
  MetadataVector<size_t> sizes;
  MetadataVector<Slot> slots;
  std::mutex mu;
  std::condition_variable cv;
  size_t next = 0;        // the next slot a helper starts (guarded by mu)
  size_t next_taken = 0;  // the next slot the owner takes (owner only)
  bool stop = false;      // guarded by mu
  absl::Status error;     // the first failure, guarded by mu
  pthread_t ids[16];
  int threads = 0;

  static void* Work(void* arg) {
    auto* p = static_cast<Pipeline*>(arg);
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(p->mu);
        if (p->stop || p->next >= p->slots.size()) return nullptr;
        i = p->next++;
      }
      absl::StatusOr<void*> host = p->copier->AllocateHost(p->sizes[i]);
      std::lock_guard<std::mutex> lock(p->mu);
      p->slots[i].done = true;
      if (host.ok()) {
        p->slots[i].host = *host;
      } else {
        if (p->error.ok()) p->error = host.status();
        p->stop = true;
      }
      p->cv.notify_all();
    }
  }

  void Start(int wanted) {
    wanted = std::min(std::min(wanted, 16), int(slots.size()));
    if (wanted <= 1) return;  // the owner gets each chunk itself
    for (int t = 0; t < wanted; ++t) {
      if (pthread_create(&ids[threads], nullptr, &Work, this) == 0) ++threads;
    }
  }

  // Slot `i`'s chunk, waiting for it; the first failure when it cannot come.
  absl::StatusOr<void*> Take(size_t i) {
    if (threads == 0) {
      absl::StatusOr<void*> host = copier->AllocateHost(sizes[i]);
      if (!host.ok()) return host.status();
      slots[i] = {*host, true, true};
      return *host;
    }
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return slots[i].done || (stop && i >= next); });
    if (!slots[i].done || slots[i].host == nullptr) {
      return error.ok() ? absl::CancelledError("backup chunk not got") : error;
    }
    slots[i].taken = true;
    return slots[i].host;
  }

  // Stops the helpers and joins them; the chunks got but not taken.
  void Stop(MetadataVector<HostChunk>* untaken) {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
    }
    for (int t = 0; t < threads; ++t) pthread_join(ids[t], nullptr);
    threads = 0;
    for (size_t i = 0; i < slots.size(); ++i) {
      if (slots[i].done && !slots[i].taken && slots[i].host != nullptr) {
        untaken->push_back({static_cast<char*>(slots[i].host), sizes[i]});
        slots[i].taken = true;
      }
    }
  }
};

Backup::Backup(BackupCopier* copier, BackupPool* pool, size_t expected_bytes)
    : copier_(copier), pool_(pool), expected_(expected_bytes) {}

Backup::~Backup() {
  MetadataVector<HostChunk> untaken;
  if (pipeline_ != nullptr) {
    pipeline_->Stop(&untaken);
    MetadataDelete(pipeline_);
    pipeline_ = nullptr;
  }
  for (size_t i = next_planned_; i < planned_pool_.size(); ++i) {
    if (pool_ != nullptr) {
      pool_->Put(planned_pool_[i]);
    } else {
      untaken.push_back(planned_pool_[i]);
    }
  }
  untaken.insert(untaken.end(), chunks_.begin(), chunks_.end());
  FreeHostChunks(copier_, untaken.data(), untaken.size());
}

void Backup::Start() {
  if (started_) return;
  started_ = true;
  if (!copier_->copies_contents()) return;
  size_t need = expected_;
  HostChunk c;
  while (need > 0 && pool_ != nullptr && pool_->Take(need, &c)) {
    planned_pool_.push_back(c);
    need -= std::min(need, c.size);
  }
  if (need == 0) return;
  pipeline_ = MetadataNew<Pipeline>();
  pipeline_->copier = copier_;
  while (need > 0) {
    const size_t n = std::min(kChunkBytes, AlignUp(need, kChunkGranule));
    pipeline_->sizes.push_back(n);
    need -= std::min(need, n);
  }
  pipeline_->slots.resize(pipeline_->sizes.size());
  pipeline_->Start(copier_->host_threads());
}

absl::Status Backup::NextChunk(size_t bytes) {
  HostChunk c{nullptr, 0};
  if (next_planned_ < planned_pool_.size()) {
    c = planned_pool_[next_planned_++];
    ++from_pool_;
  } else if (pipeline_ != nullptr &&
             pipeline_->next_taken < pipeline_->slots.size()) {
    const size_t i = pipeline_->next_taken++;
    absl::StatusOr<void*> host = pipeline_->Take(i);
    if (!host.ok()) return host.status();
    c = {static_cast<char*>(*host), pipeline_->sizes[i]};
    new_bytes_ += c.size;
  } else {
    // More than planned (should not happen: expected_bytes was short).
    const size_t n = AlignUp(std::min(bytes, kChunkBytes), kChunkGranule);
    absl::StatusOr<void*> host = copier_->AllocateHost(n);
    if (!host.ok()) return host.status();
    c = {static_cast<char*>(*host), n};
    new_bytes_ += c.size;
  }
  chunks_.push_back(c);
  host_bytes_ += c.size;
  used_in_last_ = 0;
  return absl::OkStatus();
}

absl::StatusOr<std::pair<char*, size_t>> Backup::Reserve(size_t bytes) {
  if (!copier_->copies_contents()) return std::make_pair(nullptr, bytes);
  if (!started_) Start();
  if (chunks_.empty() || chunks_.back().size == used_in_last_) {
    if (absl::Status s = NextChunk(bytes); !s.ok()) return s;
  }
  const size_t n = std::min(bytes, chunks_.back().size - used_in_last_);
  char* p = chunks_.back().base + used_in_last_;
  last_starts_chunk_ = used_in_last_ == 0;
  used_in_last_ =
      std::min(chunks_.back().size, used_in_last_ + AlignUp(n, kAlign));
  return std::make_pair(p, n);
}

void Backup::StopHelpers() {
  if (pipeline_ == nullptr) return;
  MetadataVector<HostChunk> untaken;
  pipeline_->Stop(&untaken);
  MetadataDelete(pipeline_);
  pipeline_ = nullptr;
  // Got ahead and not needed: held like the others (kept or freed with them).
  for (const HostChunk& c : untaken) {
    chunks_.push_back(c);  // Reserve is over: the last chunk's use is done
    host_bytes_ += c.size;
    new_bytes_ += c.size;
  }
}

void Backup::FinishReserving() {
  StopHelpers();
  for (size_t i = next_planned_; i < planned_pool_.size(); ++i) {
    pool_->Put(planned_pool_[i]);  // planned only when there is a pool
  }
  planned_pool_.clear();
  next_planned_ = 0;
}

void Backup::GiveChunksTo(BackupPool* pool) {
  FinishReserving();
  for (const HostChunk& c : chunks_) pool->Put(c);
  chunks_.clear();
  from_pool_ = 0;
  host_bytes_ = 0;
  used_in_last_ = 0;
  entries_.clear();
}

void Backup::Abandon() {
  MetadataVector<HostChunk> untaken;
  if (pipeline_ != nullptr) {
    pipeline_->Stop(&untaken);
    MetadataDelete(pipeline_);
    pipeline_ = nullptr;
  }
  for (size_t i = 0; i < chunks_.size(); ++i) {
    if (i < from_pool_) {
      if (pool_ != nullptr) {
        pool_->Put(chunks_[i]);
      } else {
        untaken.push_back(chunks_[i]);
      }
    } else {
      untaken.push_back(chunks_[i]);
    }
  }
  for (size_t i = next_planned_; i < planned_pool_.size(); ++i) {
    if (pool_ != nullptr) {
      pool_->Put(planned_pool_[i]);
    } else {
      untaken.push_back(planned_pool_[i]);
    }
  }
  planned_pool_.clear();
  next_planned_ = 0;
  chunks_.clear();
  from_pool_ = 0;
  host_bytes_ = 0;
  used_in_last_ = 0;
  entries_.clear();
  FreeHostChunks(copier_, untaken.data(), untaken.size());
}

}  // namespace fragfree
