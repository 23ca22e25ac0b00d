// Sharing fragfree memory between processes through the C API, on the host
// backend (memfd pages): a forked child opens what the parent exported, reads
// and writes it; the block's memory is kept while anyone holds it and given
// back once the producer freed it, released its exports and every consumer
// closed or died; bad input is refused and changes nothing.
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fragfree/fragfree.h"
#include "gtest/gtest.h"

namespace {

constexpr size_t kPage = 64 << 10;  // host_granularity_kb:64

class IpcTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ff_set_error_handler([](ff_status_t, const char*, void*) {}, nullptr);
    ASSERT_EQ(
        ff_init("backend:host,host_capacity_mb:64,host_granularity_kb:64"),
        FF_OK);
  }
  void TearDown() override {
    ASSERT_EQ(ff_ipc_sweep(-1), FF_OK);
    EXPECT_EQ(ff_check_invariants(0), FF_OK) << ff_last_error();
  }
  static int64_t Allocated() {
    ff_stats_t s{};
    s.size = sizeof(s);
    EXPECT_EQ(ff_get_stats(0, &s), FF_OK);
    return s.allocated_bytes[0].current;
  }
  // A block over several pages that starts inside a page (a smaller large
  // block sits before it).
  static void* SpanningBlock(void** before, size_t size = 3 * kPage + 1000) {
    *before = ff_malloc(kPage + kPage / 2, 0, nullptr);
    return ff_malloc(size, 0, nullptr);
  }
  static std::vector<char> Export(void* p, unsigned flags,
                                  ff_ipc_export_info_t* info) {
    std::vector<char> h(1 << 16);
    EXPECT_EQ(ff_ipc_export(p, flags, h.data(), h.size(), info), FF_OK)
        << ff_last_error();
    h.resize(info->handle_size);
    return h;
  }
  static int Wait(pid_t child) {
    int status = 0;
    EXPECT_EQ(waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
  }
};

int OpenFds() {
  int n = 0;
  DIR* d = opendir("/proc/self/fd");
  while (readdir(d) != nullptr) ++n;
  closedir(d);
  return n;
}

TEST_F(IpcTest, ChildReadsAndWritesABlockOfSeveralPages) {
  void* before;
  char* p = static_cast<char*>(SpanningBlock(&before));
  ASSERT_NE(p, nullptr);
  const size_t size = 3 * kPage + 1000;
  for (size_t i = 0; i < size; ++i) p[i] = char(i * 7);
  ff_ipc_export_info_t info{};
  std::vector<char> h = Export(p, 0, &info);
  EXPECT_EQ(info.block, p);
  EXPECT_GE(info.block_size, size);
  EXPECT_EQ(info.page_offset, uintptr_t(p) % kPage);
  EXPECT_NE(info.page_offset, 0u);  // the block starts inside a page
  const pid_t child = fork();
  if (child == 0) {
    ff_ipc_mapping_t m{};
    if (ff_ipc_open(h.data(), h.size(), 0, &m) != FF_OK) _exit(1);
    if (m.size != info.block_size || m.ptr == p) _exit(2);
    if (uintptr_t(m.ptr) - uintptr_t(m.base) != info.page_offset) _exit(3);
    if (m.mapped != 4 * kPage) _exit(4);  // the block spans four pages
    char* q = static_cast<char*>(m.ptr);
    for (size_t i = 0; i < size; ++i) {
      if (q[i] != char(i * 7)) _exit(5);
    }
    void* base = nullptr;
    size_t range = 0;
    if (ff_get_address_range(q + 5000, &base, &range) != FF_OK || base != q ||
        range != m.size) {
      _exit(6);
    }
    for (size_t i = 0; i < size; ++i) q[i] = char(i * 3 + 1);
    if (ff_ipc_close(q + 100) != FF_OK) _exit(7);
    if (ff_ipc_close(q) != FF_ERR_INVALID_ARGUMENT) _exit(8);  // twice
    _exit(0);
  }
  ASSERT_EQ(Wait(child), 0);
  for (size_t i = 0; i < size; ++i) ASSERT_EQ(p[i], char(i * 3 + 1)) << i;
  EXPECT_EQ(ff_ipc_release(info.export_id), FF_OK);
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_free(before, 0), FF_OK);
}

TEST_F(IpcTest, ProducerFreeWaitsForTheConsumer) {
  const int64_t start = Allocated();
  void* before;
  char* p = static_cast<char*>(SpanningBlock(&before));
  ff_ipc_export_info_t info{};
  std::vector<char> h = Export(p, 0, &info);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  const pid_t child = fork();
  if (child == 0) {
    ff_ipc_mapping_t m{};
    char c = ff_ipc_open(h.data(), h.size(), 0, &m) == FF_OK ? 'o' : 'x';
    if (write(to_parent[1], &c, 1) != 1 || c != 'o') _exit(1);
    if (read(to_child[0], &c, 1) != 1) _exit(2);
    // The producer freed and released: the memory is still this block's.
    static_cast<char*>(m.ptr)[10] = 'Z';
    if (ff_ipc_close(m.ptr) != FF_OK) _exit(3);
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(to_parent[0], &c, 1), 1);
  ASSERT_EQ(c, 'o');
  const int64_t held = Allocated();
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_free(p, 0), FF_ERR_INVALID_ARGUMENT);  // double free
  EXPECT_EQ(ff_ipc_release(info.export_id), FF_OK);
  EXPECT_EQ(ff_ipc_release(info.export_id), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(Allocated(), held);  // kept: the child has it open
  // New allocations never land on it.
  void* other = ff_malloc(3 * kPage + 1000, 0, nullptr);
  EXPECT_TRUE(static_cast<char*>(other) >= p + info.block_size ||
              static_cast<char*>(other) + 3 * kPage + 1000 <= p);
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  ASSERT_EQ(Wait(child), 0);
  EXPECT_EQ(p[10], 'Z');  // the consumer's write landed in the kept block
  EXPECT_EQ(ff_ipc_sweep(0), FF_OK);
  EXPECT_EQ(ff_free(other, 0), FF_OK);
  EXPECT_EQ(ff_free(before, 0), FF_OK);
  EXPECT_EQ(Allocated(), start);
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) {
    close(fd);
  }
}

TEST_F(IpcTest, ConsumerThatDiesWithoutClosingIsNoticed) {
  const int64_t start = Allocated();
  void* before;
  void* p = SpanningBlock(&before);
  ff_ipc_export_info_t info{};
  std::vector<char> h = Export(p, FF_IPC_RELEASE_ON_FREE, &info);
  const pid_t child = fork();
  if (child == 0) {
    ff_ipc_mapping_t m{};
    _exit(ff_ipc_open(h.data(), h.size(), 0, &m) == FF_OK ? 0 : 1);
  }
  ASSERT_EQ(Wait(child), 0);
  // The free releases the export (FF_IPC_RELEASE_ON_FREE) and finds the only
  // opener dead: the block goes at once.
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_EQ(ff_free(before, 0), FF_OK);
  EXPECT_EQ(Allocated(), start);
  EXPECT_EQ(ff_ipc_release(info.export_id), FF_ERR_INVALID_ARGUMENT);
}

TEST_F(IpcTest, ReleaseOnFreeReusesTheExport) {
  void* p = ff_malloc(2 * kPage, 0, nullptr);
  ff_ipc_export_info_t a{}, b{};
  std::vector<char> ha = Export(p, FF_IPC_RELEASE_ON_FREE, &a);
  std::vector<char> hb = Export(p, FF_IPC_RELEASE_ON_FREE, &b);
  EXPECT_EQ(a.export_id, b.export_id);
  EXPECT_EQ(ha, hb);
  EXPECT_EQ(ff_free(p, 0), FF_OK);
}

TEST_F(IpcTest, ThousandCyclesGiveEverythingBack) {
  const int64_t start = Allocated();
  const int fds = OpenFds();
  for (int i = 0; i < 1000; ++i) {
    void* p = ff_malloc(size_t(1 + i % 5) * kPage + 512 * (i % 3), 0, nullptr);
    ASSERT_NE(p, nullptr);
    ff_ipc_export_info_t info{};
    std::vector<char> h = Export(p, i % 2 ? FF_IPC_RELEASE_ON_FREE : 0, &info);
    ff_ipc_mapping_t m{};  // this process may open its own exports too
    ASSERT_EQ(ff_ipc_open(h.data(), h.size(), 0, &m), FF_OK) << ff_last_error();
    static_cast<char*>(m.ptr)[0] = 1;
    if (i % 3 == 0) {
      ASSERT_EQ(ff_ipc_close(m.ptr), FF_OK);
    }
    ASSERT_EQ(ff_free(p, 0), FF_OK);
    if (i % 2 == 0) {
      ASSERT_EQ(ff_ipc_release(info.export_id), FF_OK);
    }
    if (i % 3 != 0) {
      ASSERT_EQ(ff_ipc_close(m.ptr), FF_OK);
    }
    ASSERT_EQ(ff_ipc_sweep(0), FF_OK);
  }
  EXPECT_EQ(Allocated(), start);
  EXPECT_EQ(OpenFds(), fds);
  ASSERT_EQ(ff_empty_cache(0), FF_OK);
}

TEST_F(IpcTest, BadInputIsRefused) {
  int local = 0;
  ff_ipc_export_info_t info{};
  char buf[4096];
  EXPECT_EQ(ff_ipc_export(&local, 0, buf, sizeof(buf), &info),
            FF_ERR_INVALID_ARGUMENT);  // not fragfree's
  EXPECT_EQ(ff_ipc_export(nullptr, 0, buf, sizeof(buf), &info),
            FF_ERR_INVALID_ARGUMENT);
  void* p = ff_malloc(kPage, 0, nullptr);
  EXPECT_EQ(ff_ipc_export(p, 0x80, buf, sizeof(buf), &info),
            FF_ERR_INVALID_ARGUMENT);  // unknown flag
  info = {};
  EXPECT_EQ(ff_ipc_export(p, 0, buf, 8, &info), FF_ERR_INVALID_ARGUMENT);
  EXPECT_GT(info.handle_size, 8u);  // says what it needs
  std::vector<char> h = Export(p, 0, &info);

  ff_ipc_mapping_t m{};
  EXPECT_EQ(ff_ipc_open(h.data(), 5, 0, &m), FF_ERR_INVALID_ARGUMENT);
  std::vector<char> junk(h.size(), 'j');
  EXPECT_EQ(ff_ipc_open(junk.data(), junk.size(), 0, &m),
            FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_ipc_open(h.data(), h.size(), 1, &m),
            FF_ERR_INVALID_ARGUMENT);  // wrong device
  EXPECT_EQ(ff_ipc_close(&local), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_ipc_release(uint64_t{1} << 60), FF_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(ff_get_address_range(&local, nullptr, nullptr),
            FF_ERR_INVALID_ARGUMENT);
  void* base = nullptr;
  size_t size = 0;
  EXPECT_EQ(ff_get_address_range(static_cast<char*>(p) + 100, &base, &size),
            FF_OK);
  EXPECT_EQ(base, p);
  EXPECT_GE(size, kPage);

  // After release and free, the handle no longer opens.
  EXPECT_EQ(ff_ipc_release(info.export_id), FF_OK);
  EXPECT_EQ(ff_free(p, 0), FF_OK);
  EXPECT_NE(ff_ipc_open(h.data(), h.size(), 0, &m), FF_OK);
  EXPECT_EQ(ff_get_address_range(p, nullptr, nullptr), FF_ERR_INVALID_ARGUMENT);
}

TEST_F(IpcTest, ProducerGoneIsAStateError) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  if (child == 0) {  // a producer that exports and exits
    void* p = ff_malloc(2 * kPage, 0, nullptr);
    ff_ipc_export_info_t info{};
    char h[4096];
    if (ff_ipc_export(p, 0, h, sizeof(h), &info) != FF_OK) _exit(1);
    const uint32_t n = uint32_t(info.handle_size);
    if (write(fds[1], &n, 4) != 4 || write(fds[1], h, n) != ssize_t(n)) {
      _exit(2);
    }
    _exit(0);
  }
  uint32_t n = 0;
  ASSERT_EQ(read(fds[0], &n, 4), 4);
  std::vector<char> h(n);
  ASSERT_EQ(read(fds[0], h.data(), n), ssize_t(n));
  ASSERT_EQ(Wait(child), 0);
  ff_ipc_mapping_t m{};
  EXPECT_EQ(ff_ipc_open(h.data(), h.size(), 0, &m), FF_ERR_STATE);
  EXPECT_NE(std::string(ff_last_error()).find("gone"), std::string::npos)
      << ff_last_error();
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
