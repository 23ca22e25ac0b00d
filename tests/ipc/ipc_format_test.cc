// The IPC handle's wire format (PyTorch's expandable-segment handle plus
// fragfree's trailer), the 64-byte compact handle and its handle file, and the
// lease table's open/close/death rules.
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "allocator/ipc/compact_handle.h"
#include "allocator/ipc/ipc_handle.h"
#include "allocator/ipc/lease_table.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

IpcHandle Sample() {
  IpcHandle h;
  h.pid = 1234;
  h.page_size = 2 << 20;
  h.pages = {{7, 0}, {9, 2 << 20}, {11, 4 << 20}};
  h.has_trailer = true;
  h.producer_start_time = 987654;
  h.device = 3;
  h.export_id = 42;
  h.block_offset = 4096;
  h.block_size = (4 << 20) + 512;
  h.lease_fd = 5;
  h.lease_slot = 17;
  h.lease_bytes = 1 << 21;
  return h;
}

TEST(IpcHandleTest, RoundTrips) {
  const std::string bytes = EncodeIpcHandle(Sample());
  absl::StatusOr<IpcHandle> d = DecodeIpcHandle(bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_TRUE(d->has_trailer);
  EXPECT_EQ(d->pid, 1234);
  ASSERT_EQ(d->pages.size(), 3u);
  EXPECT_EQ(d->pages[1].fd, 9);
  EXPECT_EQ(d->pages[2].offset, uint64_t{4 << 20});
  EXPECT_EQ(d->device, 3);
  EXPECT_EQ(d->export_id, 42u);
  EXPECT_EQ(d->block_offset, 4096u);
  EXPECT_EQ(d->block_size, uint64_t{(4 << 20) + 512});
  EXPECT_EQ(d->lease_slot, 17u);
}

// What PyTorch's ExpandableSegment::fromShared reads: version 2, 'e', its
// ShareHeader, then one int per page; it ignores what follows.
TEST(IpcHandleTest, StartsWithPyTorchsExpandableSegmentHandle) {
  const std::string bytes = EncodeIpcHandle(Sample());
  ASSERT_GE(bytes.size(), 2u + 24 + 3 * 4);
  EXPECT_EQ(bytes[0], 2);
  EXPECT_EQ(bytes[1], 'e');
  int32_t pid;
  uint64_t segment_size, num_handles;
  memcpy(&pid, bytes.data() + 2, 4);
  memcpy(&segment_size, bytes.data() + 2 + 8, 8);
  memcpy(&num_handles, bytes.data() + 2 + 16, 8);
  EXPECT_EQ(pid, 1234);
  EXPECT_EQ(segment_size, uint64_t{2 << 20});
  EXPECT_EQ(num_handles, 3u);
  int32_t fd;
  memcpy(&fd, bytes.data() + 2 + 24 + 4, 4);
  EXPECT_EQ(fd, 9);
  // A stock PyTorch handle (no trailer) decodes as the whole run of pages.
  absl::StatusOr<IpcHandle> stock =
      DecodeIpcHandle(bytes.substr(0, 2 + 24 + 3 * 4));
  ASSERT_TRUE(stock.ok()) << stock.status();
  EXPECT_FALSE(stock->has_trailer);
  EXPECT_EQ(stock->block_size, uint64_t{6 << 20});
}

TEST(IpcHandleTest, RejectsMalformedHandles) {
  const std::string good = EncodeIpcHandle(Sample());
  EXPECT_FALSE(DecodeIpcHandle("").ok());
  EXPECT_FALSE(DecodeIpcHandle(good.substr(0, 10)).ok());
  EXPECT_FALSE(DecodeIpcHandle(good.substr(0, good.size() - 1)).ok());
  std::string c = good;
  c[1] = 'c';
  absl::StatusOr<IpcHandle> cm = DecodeIpcHandle(c);
  ASSERT_FALSE(cm.ok());
  EXPECT_NE(cm.status().message().find("cudaIpcOpenMemHandle"),
            std::string::npos);
  std::string v = good;
  v[0] = 9;
  EXPECT_FALSE(DecodeIpcHandle(v).ok());
  std::string junk = good;
  junk[2 + 24 + 12] = 'X';  // the trailer's magic
  EXPECT_FALSE(DecodeIpcHandle(junk).ok());
  IpcHandle outside = Sample();
  outside.block_size = 7 << 20;  // beyond its pages
  EXPECT_FALSE(DecodeIpcHandle(EncodeIpcHandle(outside)).ok());
  IpcHandle loose = Sample();
  loose.block_size = 512;  // the last page would not be under the block
  EXPECT_FALSE(DecodeIpcHandle(EncodeIpcHandle(loose)).ok());
}

TEST(CompactHandleTest, RoundTripsAndRejectsBadFields) {
  CompactHandle c;
  c.pid = 4321;
  c.handle_fd = 17;
  c.start_time = 99;
  c.export_id = 5;
  c.device = 1;
  c.handle_bytes = 300;
  c.block_size = 10 << 20;
  char bytes[kCompactHandleBytes];
  EncodeCompactHandle(c, bytes);
  ASSERT_TRUE(IsCompactHandle(bytes));
  absl::StatusOr<CompactHandle> d = DecodeCompactHandle(bytes);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->pid, 4321);
  EXPECT_EQ(d->handle_fd, 17);
  EXPECT_EQ(d->start_time, 99u);
  EXPECT_EQ(d->export_id, 5u);
  EXPECT_EQ(d->device, 1);
  EXPECT_EQ(d->handle_bytes, 300u);
  EXPECT_EQ(d->block_size, uint64_t{10} << 20);
  // Each field out of range, and the reserved tail, is refused by name.
  const struct {
    size_t at;
    int32_t value;
    const char* what;
  } bad[] = {{8, 0, "pid"},
             {12, -1, "descriptor"},
             {32, -1, "device"},
             {36, 0, "handle size"},
             {56, 1, "reserved"}};
  for (const auto& b : bad) {
    char copy[kCompactHandleBytes];
    memcpy(copy, bytes, sizeof(copy));
    memcpy(copy + b.at, &b.value, sizeof(b.value));
    absl::StatusOr<CompactHandle> r = DecodeCompactHandle(copy);
    EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << b.what;
    EXPECT_NE(r.status().message().find(b.what), std::string::npos)
        << r.status();
  }
  char other[kCompactHandleBytes] = {};  // e.g. CUDA's own handle
  EXPECT_FALSE(IsCompactHandle(other));
  EXPECT_FALSE(DecodeCompactHandle(other).ok());
}

TEST(CompactHandleTest, HandleFileIsSealedAndFetchedFromTheProducer) {
  IpcHandle full = Sample();
  full.pid = getpid();
  full.has_trailer = true;
  full.producer_start_time = SelfStartTime();
  full.export_id = 42;
  const std::string bytes = EncodeIpcHandle(full);
  absl::StatusOr<int> fd = MakeHandleFile(bytes);
  ASSERT_TRUE(fd.ok()) << fd.status();
  EXPECT_LT(write(*fd, "x", 1), 0);  // sealed
  CompactHandle c;
  c.pid = getpid();
  c.handle_fd = *fd;
  c.start_time = SelfStartTime();
  c.export_id = 42;
  c.device = 0;
  c.handle_bytes = uint32_t(bytes.size());
  // A child takes the file from its parent (the producer) and reads it.
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<std::string> got = FetchFullHandle(c);
    CompactHandle wrong_id = c;
    wrong_id.export_id = 43;
    CompactHandle wrong_start = c;
    wrong_start.start_time += 1;
    const bool ok =
        got.ok() && *got == bytes &&
        absl::IsFailedPrecondition(FetchFullHandle(wrong_id).status()) &&
        absl::IsFailedPrecondition(FetchFullHandle(wrong_start).status());
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  // Once the file is closed (the export released), the handle is stale.
  close(*fd);
  EXPECT_TRUE(absl::IsFailedPrecondition(FetchFullHandle(c).status()));
}

TEST(LeaseTableTest, ClaimsHoldUntilDroppedAndReleasedExportsRefuse) {
  absl::StatusOr<std::unique_ptr<LeaseTable>> t = LeaseTable::Create();
  ASSERT_TRUE(t.ok()) << t.status();
  LeaseTable& table = **t;
  absl::StatusOr<uint32_t> slot = table.Acquire(7);
  ASSERT_TRUE(slot.ok());
  EXPECT_FALSE(table.HasLiveOpeners(*slot));
  {
    absl::StatusOr<std::unique_ptr<LeaseClaim>> c =
        LeaseClaim::Claim(table.fd(), table.bytes(), *slot, 7);
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_TRUE(table.HasLiveOpeners(*slot));
    // Another export's id does not open this slot.
    EXPECT_FALSE(LeaseClaim::Claim(table.fd(), table.bytes(), *slot, 8).ok());
  }
  EXPECT_FALSE(table.HasLiveOpeners(*slot));
  table.StopAccepting(*slot);
  absl::StatusOr<std::unique_ptr<LeaseClaim>> late =
      LeaseClaim::Claim(table.fd(), table.bytes(), *slot, 7);
  ASSERT_FALSE(late.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(late.status()));
  table.Release(*slot);
  EXPECT_EQ(table.live_slots(), 0u);
}

TEST(LeaseTableTest, DeadOpenerIsNoticed) {
  absl::StatusOr<std::unique_ptr<LeaseTable>> t = LeaseTable::Create();
  ASSERT_TRUE(t.ok());
  LeaseTable& table = **t;
  const uint32_t slot = *table.Acquire(3);
  const pid_t child = fork();
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<LeaseClaim>> c =
        LeaseClaim::Claim(table.fd(), table.bytes(), slot, 3);
    if (!c.ok()) _exit(1);
    c->release();  // dies holding the claim
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(table.HasLiveOpeners(slot));
  EXPECT_NE(SelfStartTime(), 0u);
  EXPECT_EQ(ProcessStartTime(child), 0u);
}

}  // namespace
}  // namespace fragfree
