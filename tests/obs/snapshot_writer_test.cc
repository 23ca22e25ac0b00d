// The streaming snapshot writer on random states: Python's pickle.load reads
// the pickle back equal to the JSON, with only the opcodes MemoryViz accepts,
// keys in PyTorch's order, blocks tiling their segments, sums that add up and
// the trace as given (checked with Debian's /usr/bin/python3, which CI has).
// Until the commit that removed them, these states were also written byte for
// byte as the former Value-tree writers wrote them.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/obs/snapshot.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

// Values at the edges of each pickle integer encoding, and random ones.
uint64_t Number(std::mt19937_64& rng) {
  static constexpr uint64_t kEdges[] = {0,
                                        1,
                                        255,
                                        256,
                                        65535,
                                        65536,
                                        0x7fffffff,
                                        0x80000000,
                                        0xffffffff,
                                        uint64_t{1} << 40,
                                        0x7f12345678900,
                                        uint64_t(INT64_MAX),
                                        uint64_t(INT64_MAX) + 1,
                                        UINT64_MAX};
  switch (rng() % 4) {
    case 0:
      return kEdges[rng() % std::size(kEdges)];
    case 1:
      return rng() % 300;
    case 2:
      return rng() % 100000;
    default:
      return rng() >> (rng() % 64);
  }
}

// Arenas at disjoint, shuffled addresses, blocks tiling each in address order,
// pages mapped in runs.
std::vector<ArenaView> RandomArenas(std::mt19937_64& rng) {
  std::vector<ArenaView> arenas(rng() % 5);
  uintptr_t base = 0x7f0000000000;
  for (ArenaView& a : arenas) {
    a.page_size = size_t{1} << (12 + rng() % 10);
    const size_t pages = 1 + rng() % 40;
    a.base = base;
    a.va_size = pages * a.page_size;
    base += a.va_size + a.page_size * (rng() % 3);
    a.stream = rng() % 3 == 0 ? Number(rng) : rng() % 2;
    a.small = rng() % 2;
    a.pool_id[0] = rng() % 3 == 0 ? Number(rng) : 0;
    a.pool_id[1] = rng() % 3 == 0 ? Number(rng) : 0;
    uintptr_t at = a.base, end = a.base + a.va_size;
    while (at < end) {
      size_t size = std::min<size_t>(end - at, 512 * (1 + rng() % 4096));
      const BlockState s = BlockState(rng() % 4);
      size_t requested = rng() % 3 == 0 ? size + rng() % 1000 : rng() % size;
      a.blocks.push_back({at, size, requested, s, rng()});
      at += size;
    }
    const size_t mapped_end = rng() % (pages + 1);
    for (size_t p = 0; p < mapped_end; ++p) {
      a.page_mapped.push_back(rng() % 4 != 0);
    }
    a.mapped_pages =
        size_t(std::count(a.page_mapped.begin(), a.page_mapped.end(), true));
  }
  std::shuffle(arenas.begin(), arenas.end(), rng);
  return arenas;
}

// `n` events on a 2 GHz clock (0.5 ns a tick), with `expected` the events
// worked out here: times from the ticks, never decreasing when a tick goes
// back (as counters read on two cores can).
TraceLog RandomTrace(std::mt19937_64& rng, size_t n,
                     std::vector<TraceEvent>* expected) {
  TraceLog log;
  const uint64_t t0 = (rng() % (uint64_t{1} << 40)) * 256;
  const int64_t ns0 = 1700000000000000000 + int64_t(rng() % 1000000000000000);
  int64_t k = 0, last_us = 0;
  for (size_t i = 0; i < n; ++i) {
    k = rng() % 8 == 0 && k > 0 ? k - 1 : k + int64_t(rng() % 40);
    TraceEntry e;
    const TraceAction action = TraceAction(rng() % 6);
    e.stamp = TraceEntry::Stamp(t0 + 256 * uint64_t(k), action);
    e.addr = Number(rng);
    e.size = Number(rng);
    e.stream = rng() % 2 == 0 ? Number(rng) : 0;
    log.entries.push_back(e);
    last_us = std::max(last_us, (ns0 + 128 * k) / 1000);
    expected->push_back({action, e.addr, e.size, e.stream, last_us, 0});
  }
  k += 1 + int64_t(rng() % 1000);
  log.readings = {{t0, ns0}, {t0 + 256 * uint64_t(k), ns0 + 128 * k}};
  return log;
}

TraceLog RandomTrace(std::mt19937_64& rng, std::vector<TraceEvent>* expected) {
  return RandomTrace(rng, rng() % 3 == 0 ? 0 : rng() % 500, expected);
}

constexpr char kCheck[] = R"py(
import json, pickle, pickletools, sys
OK = {'PROTO', 'EMPTY_DICT', 'EMPTY_LIST', 'MARK', 'APPENDS', 'SETITEMS',
      'TUPLE', 'BININT1', 'BININT2', 'BININT', 'LONG1', 'BINUNICODE',
      'NEWTRUE', 'NEWFALSE', 'STOP'}
SEGMENT = ['device', 'address', 'total_size', 'allocated_size', 'active_size',
           'requested_size', 'stream', 'segment_type', 'segment_pool_id',
           'is_expandable', 'frames', 'blocks']
BLOCK = ['address', 'size', 'requested_size', 'state', 'frames']
def check(pkl, js, device, events):
    b = open(pkl, 'rb').read()
    bad = {op.name for op, _, _ in pickletools.genops(b)} - OK
    assert not bad, bad
    p, j = pickle.loads(b), json.load(open(js))
    assert list(p) == ['segments', 'device_traces'], list(p)
    for s in p['segments']:
        assert list(s) == SEGMENT, list(s)
        assert type(s['segment_pool_id']) is tuple
        s['segment_pool_id'] = list(s['segment_pool_id'])
        assert s['device'] == device and s['is_expandable'] is True
        at, alloc, active, req = s['address'], 0, 0, 0
        for blk in s['blocks']:
            assert list(blk) == BLOCK, list(blk)
            assert blk['address'] == at and blk['size'] > 0
            assert blk['requested_size'] <= blk['size']
            at += blk['size']
            if blk['state'] == 'active_allocated': alloc += blk['size']
            if blk['state'] != 'inactive':
                active += blk['size']; req += blk['requested_size']
        assert at == s['address'] + s['total_size']
        assert (alloc, active, req) == (s['allocated_size'], s['active_size'],
                                        s['requested_size'])
    addrs = [s['address'] for s in p['segments']]
    assert addrs == sorted(addrs)
    assert p == j
    t = p['device_traces']
    assert len(t) == device + 1 and not any(t[:-1]) and len(t[-1]) == events
    for e in t[-1]:
        k = 'device_free' if e['action'] == 'oom' else 'addr'
        assert list(e) == ['action', k, 'size', 'stream', 'time_us', 'frames']
    times = [e['time_us'] for e in t[-1]]
    assert times == sorted(times)
a = sys.argv[1:]
for i in range(0, len(a), 4):
    check(a[i], a[i + 1], int(a[i + 2]), int(a[i + 3]))
)py";

// The trace's events in the JSON the writer should produce.
std::string ExpectedTraceJson(const std::vector<TraceEvent>& trace) {
  std::string out = "[";
  for (const TraceEvent& e : trace) {
    absl::StrAppend(&out, out.size() > 1 ? "," : "", "{\"action\":\"",
                    TraceActionName(e.action), "\",\"",
                    e.action == TraceAction::kOom ? "device_free" : "addr",
                    "\":", int64_t(e.addr), ",\"size\":", int64_t(e.size),
                    ",\"stream\":", int64_t(e.stream),
                    ",\"time_us\":", int64_t(e.time_us), ",\"frames\":[]}");
  }
  return out + "]]}";
}

TEST(SnapshotWriter, RandomStatesReadBackInPython) {
  std::mt19937_64 rng(2026);
  const std::string dir = ::testing::TempDir() + "snapshot_writer_" +
                          std::to_string(getpid()) + "_";
  std::string args;
  std::vector<std::string> files;
  for (int i = 0; i < 200; ++i) {
    const int device = int(rng() % 4);
    const std::vector<ArenaView> arenas = RandomArenas(rng);
    std::vector<TraceEvent> events;
    const TraceLog trace = RandomTrace(rng, &events);
    const std::string json = SnapshotToJson(device, arenas, trace);
    const std::string expected = ExpectedTraceJson(events);
    ASSERT_GE(json.size(), expected.size());
    ASSERT_EQ(json.substr(json.size() - expected.size()), expected)
        << "state " << i;
    const std::string pkl = absl::StrCat(dir, i, ".pickle"),
                      js = absl::StrCat(dir, i, ".json");
    std::ofstream(pkl, std::ios::binary)
        << SnapshotToPickle(device, arenas, trace);
    std::ofstream(js, std::ios::binary) << json;
    absl::StrAppend(&args, " ", pkl, " ", js, " ", device, " ", trace.size());
    files.push_back(pkl);
    files.push_back(js);
  }
  const std::string script = dir + "check.py";
  std::ofstream(script) << kCheck;
  files.push_back(script);
  const std::string cmd = "/usr/bin/python3 " + script + args;
  EXPECT_EQ(system(cmd.c_str()), 0);
  for (const std::string& f : files) std::remove(f.c_str());
}

TEST(SnapshotWriter, TheSameBytesInPiecesOfAtMost64KiB) {
  std::mt19937_64 rng(7);
  std::vector<TraceEvent> events;
  const TraceLog trace = RandomTrace(rng, 5000, &events);
  const std::vector<ArenaView> arenas = RandomArenas(rng);
  for (SnapshotFormat format :
       {SnapshotFormat::kPickle, SnapshotFormat::kJson}) {
    std::string pieces;
    size_t calls = 0;
    EXPECT_TRUE(
        WriteSnapshot(format, 1, arenas, trace, [&](std::string_view s) {
          EXPECT_LE(s.size(), size_t{1} << 16);
          pieces.append(s);
          ++calls;
          return true;
        }));
    EXPECT_GT(calls, 1u);
    EXPECT_EQ(pieces, format == SnapshotFormat::kPickle
                          ? SnapshotToPickle(1, arenas, trace)
                          : SnapshotToJson(1, arenas, trace));
  }
}

TEST(SnapshotWriter, StopsAtAFailedWrite) {
  std::mt19937_64 rng(3);
  std::vector<TraceEvent> events;
  const TraceLog trace = RandomTrace(rng, 5000, &events);
  size_t calls = 0;
  EXPECT_FALSE(WriteSnapshot(SnapshotFormat::kJson, 0, {}, trace,
                             [&](std::string_view) { return ++calls > 1; }));
  EXPECT_EQ(calls, 1u);
}

}  // namespace
}  // namespace fragfree
