// Unit tests of ReclaimQueue and RemainderBins (allocator/va/reclaim_queue.h):
// holes come out oldest free_seq first whatever order they went in, removal
// from anywhere keeps the links, and remainders are visited largest bin first,
// newest first within a bin, until the visitor stops.
#include "allocator/va/reclaim_queue.h"

#include <vector>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

std::vector<uint64_t> SeqsInOrder(const ReclaimQueue& q) {
  std::vector<uint64_t> seqs;
  for (Block* b = q.front(); b != nullptr; b = ReclaimQueue::next(b)) {
    seqs.push_back(b->free_seq);
  }
  return seqs;
}

TEST(ReclaimQueue, OldestFreeSeqFirst) {
  Block blocks[5];
  const uint64_t seqs[5] = {5, 1, 9, 3, 7};
  ReclaimQueue q;
  for (int i = 0; i < 5; ++i) {
    blocks[i].free_seq = seqs[i];
    q.Add(&blocks[i]);
    EXPECT_TRUE(blocks[i].queued);
  }
  EXPECT_EQ(q.size(), 5u);
  EXPECT_EQ(SeqsInOrder(q), (std::vector<uint64_t>{1, 3, 5, 7, 9}));
}

TEST(ReclaimQueue, RemoveFromFrontMiddleAndBack) {
  Block blocks[4];
  ReclaimQueue q;
  for (int i = 0; i < 4; ++i) {
    blocks[i].free_seq = uint64_t(i + 1);
    q.Add(&blocks[i]);
  }
  q.Remove(&blocks[1]);  // middle
  EXPECT_FALSE(blocks[1].queued);
  EXPECT_EQ(SeqsInOrder(q), (std::vector<uint64_t>{1, 3, 4}));
  q.Remove(&blocks[0]);  // front
  q.Remove(&blocks[3]);  // back
  EXPECT_EQ(SeqsInOrder(q), (std::vector<uint64_t>{3}));
  EXPECT_EQ(q.size(), 1u);
  // A block going back (a failed request's) finds its place again.
  q.Add(&blocks[0]);
  q.Add(&blocks[3]);
  q.Add(&blocks[1]);
  EXPECT_EQ(SeqsInOrder(q), (std::vector<uint64_t>{1, 2, 3, 4}));
  for (Block& b : blocks) q.Remove(&b);
  EXPECT_EQ(q.front(), nullptr);
  EXPECT_EQ(q.size(), 0u);
}

TEST(RemainderBins, LargestBinFirstNewestFirstWithinABin) {
  Block small_old, small_new, large, middle;
  small_old.size = small_new.size = 4 << 20;
  middle.size = 64 << 20;
  large.size = 1 << 30;
  RemainderBins bins;
  bins.Insert(&small_old);
  bins.Insert(&large);
  bins.Insert(&small_new);
  bins.Insert(&middle);
  EXPECT_EQ(bins.size(), 4u);
  std::vector<const Block*> order;
  bins.ForEachLargestFirst([&](Block* b) {
    order.push_back(b);
    return true;
  });
  EXPECT_EQ(order, (std::vector<const Block*>{&large, &middle, &small_new,
                                              &small_old}));
  // The visitor may remove the block it is given, and stop early.
  order.clear();
  bins.ForEachLargestFirst([&](Block* b) {
    order.push_back(b);
    bins.Remove(b);
    return order.size() < 2;
  });
  EXPECT_EQ(order, (std::vector<const Block*>{&large, &middle}));
  EXPECT_FALSE(large.queued);
  EXPECT_EQ(bins.size(), 2u);
  bins.Remove(&small_old);
  bins.Remove(&small_new);
  EXPECT_EQ(bins.size(), 0u);
  bins.ForEachLargestFirst([&](Block*) -> bool {
    ADD_FAILURE() << "empty bins visited a block";
    return false;
  });
}

}  // namespace
}  // namespace fragfree
