// Sharing a block between processes whose pages differ in size (page_size_mb
// is each process's own option): a consumer needs only the device's own
// granularity of the producer's pages, so either side may have the larger
// pages, and the bytes arrive both ways. Engine-level, on the host backend,
// the consumer a forked child with an engine of its own.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <memory>

#include "allocator/device_allocator.h"
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

}  // namespace
}  // namespace fragfree
