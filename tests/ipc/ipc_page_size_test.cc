// Sharing a block between processes whose pages differ in size (page_size_mb
// is each process's own option): a consumer needs only the device's own
// granularity of the producer's pages, so either side may have the larger
// pages, and the bytes arrive both ways. Engine-level, on the host backend,
// the consumer a forked child with an engine of its own. A block of the
// producer's large pages (large_page_mb) opens the same way, in a consumer
// with or without large pages of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "allocator/device_allocator.h"
#include "allocator/ipc/ipc_handle.h"
#include "gtest/gtest.h"
#include "tests/testing/backends.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;  // the host device's granularity

std::unique_ptr<DeviceAllocator> MakeEngine(size_t page_size) {
  Options o;
  o.page_size_bytes = page_size;
  return testing::MakeHostDevice(64 * kPage, kPage, o).allocator;
}

// The producer (this process) exports a block of `producer_page` pages; a
// child with `consumer_page` pages opens it, checks and rewrites its bytes.
void ShareAcross(size_t producer_page, size_t consumer_page) {
  std::unique_ptr<DeviceAllocator> producer = MakeEngine(producer_page);
  ASSERT_NE(producer, nullptr);
  const size_t size = 5 * kPage + 123;
  char* p = static_cast<char*>(*producer->Malloc(size, 0));
  for (size_t i = 0; i < size; ++i) p[i] = char(i * 7);
  absl::StatusOr<DeviceAllocator::IpcExport> e =
      producer->IpcExportBlock(p, /*release_on_free=*/false);
  ASSERT_TRUE(e.ok()) << e.status();
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<DeviceAllocator> consumer = MakeEngine(consumer_page);
    if (consumer == nullptr) _exit(1);
    absl::StatusOr<DeviceAllocator::IpcMapping> m =
        consumer->IpcOpen(e->handle);
    if (!m.ok()) {
      fprintf(stderr, "%s\n", m.status().ToString().c_str());
      _exit(2);
    }
    char* q = reinterpret_cast<char*>(m->ptr);
    if (m->size < size) _exit(3);
    for (size_t i = 0; i < size; ++i) {
      if (q[i] != char(i * 7)) _exit(4);
    }
    for (size_t i = 0; i < size; ++i) q[i] = char(i * 3 + 1);
    if (!consumer->IpcClose(q).ok()) _exit(5);
    if (!consumer->CheckInvariants().ok()) _exit(6);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(p[i], char(i * 3 + 1)) << i;
  ASSERT_TRUE(producer->IpcRelease(e->id).ok());
  ASSERT_TRUE(producer->Free(p).ok());
  ASSERT_TRUE(producer->IpcSweep().ok());
  EXPECT_TRUE(producer->CheckInvariants().ok()) << producer->CheckInvariants();
}

TEST(IpcPageSize, ConsumerWithLargerPagesOpensSmallerOnes) {
  ShareAcross(kPage, 4 * kPage);
}

TEST(IpcPageSize, ConsumerWithSmallerPagesOpensLargerOnes) {
  ShareAcross(4 * kPage, kPage);
}

constexpr size_t kLarge = 8 * kPage;  // the producer's large page (512 KiB)

std::unique_ptr<DeviceAllocator> MakeLargePageEngine(size_t large_page) {
  Options o;
  o.large_page_bytes = large_page;
  return testing::MakeHostDevice(128 * kPage, kPage, o).allocator;
}

// The page size of the arena holding `p` (0 if none does).
size_t ArenaPageSize(DeviceAllocator& a, const void* p) {
  const uintptr_t addr = reinterpret_cast<uintptr_t>(p);
  for (const ArenaView& v : a.Arenas()) {
    if (addr >= v.base && addr < v.base + v.va_size) return v.page_size;
  }
  return 0;
}

char PatternAt(size_t i, int seed) { return char(i * 7 + seed); }

// The producer exports a block of 4 large pages and, beside it, a large block
// that is not a whole number of them (base pages); a child whose engine has
// large pages of `consumer_large_page` (0: none) opens both, checks and
// rewrites their bytes.
void ShareLargePages(size_t consumer_large_page) {
  std::unique_ptr<DeviceAllocator> producer = MakeLargePageEngine(kLarge);
  ASSERT_NE(producer, nullptr);
  const size_t sizes[2] = {4 * kLarge, 4 * kLarge + kPage};
  const size_t page_sizes[2] = {kLarge, kPage};
  const size_t page_counts[2] = {4, 33};
  char* blocks[2];
  DeviceAllocator::IpcExport exports[2];
  for (int b = 0; b < 2; ++b) {
    blocks[b] = static_cast<char*>(*producer->Malloc(sizes[b], 0));
    for (size_t i = 0; i < sizes[b]; ++i) blocks[b][i] = PatternAt(i, b);
    // Placed in pages of the expected size, and exported in them.
    ASSERT_EQ(ArenaPageSize(*producer, blocks[b]), page_sizes[b]) << b;
    absl::StatusOr<DeviceAllocator::IpcExport> e =
        producer->IpcExportBlock(blocks[b], /*release_on_free=*/false);
    ASSERT_TRUE(e.ok()) << e.status();
    absl::StatusOr<IpcHandle> h = DecodeIpcHandle(e->handle);
    ASSERT_TRUE(h.ok()) << h.status();
    EXPECT_EQ(h->page_size, page_sizes[b]) << b;
    EXPECT_EQ(h->pages.size(), page_counts[b]) << b;
    exports[b] = *std::move(e);
  }
  const pid_t child = fork();
  if (child == 0) {
    std::unique_ptr<DeviceAllocator> consumer =
        MakeLargePageEngine(consumer_large_page);
    if (consumer == nullptr) _exit(1);
    for (int b = 0; b < 2; ++b) {
      absl::StatusOr<DeviceAllocator::IpcMapping> m =
          consumer->IpcOpen(exports[b].handle);
      if (!m.ok()) {
        fprintf(stderr, "%s\n", m.status().ToString().c_str());
        _exit(2);
      }
      char* q = reinterpret_cast<char*>(m->ptr);
      if (m->size < sizes[b]) _exit(3);
      for (size_t i = 0; i < sizes[b]; ++i) {
        if (q[i] != PatternAt(i, b)) _exit(4);
      }
      for (size_t i = 0; i < sizes[b]; ++i) q[i] = PatternAt(i, b + 10);
      if (!consumer->IpcClose(q).ok()) _exit(5);
    }
    // The consumer's own block of that size takes its own page size.
    absl::StatusOr<void*> own = consumer->Malloc(4 * kLarge, 0);
    if (!own.ok()) _exit(6);
    const size_t own_page = consumer_large_page ? consumer_large_page : kPage;
    if (ArenaPageSize(*consumer, *own) != own_page) _exit(7);
    if (!consumer->Free(*own).ok()) _exit(8);
    if (!consumer->CheckInvariants().ok()) _exit(9);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (int b = 0; b < 2; ++b) {
    for (size_t i = 0; i < sizes[b]; ++i) {
      ASSERT_EQ(blocks[b][i], PatternAt(i, b + 10)) << b << " " << i;
    }
    ASSERT_TRUE(producer->IpcRelease(exports[b].id).ok());
    ASSERT_TRUE(producer->Free(blocks[b]).ok());
  }
  ASSERT_TRUE(producer->IpcSweep().ok());
  EXPECT_TRUE(producer->CheckInvariants().ok()) << producer->CheckInvariants();
}

TEST(IpcPageSize, ConsumerWithoutLargePagesOpensProducersLargePages) {
  ShareLargePages(0);
}

TEST(IpcPageSize, ConsumerWithLargePagesOpensProducersLargePages) {
  ShareLargePages(kLarge);
}

}  // namespace
}  // namespace fragfree
