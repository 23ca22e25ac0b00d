// Snapshots as pickles: the bytes Python's pickle.load reads back equal the
// JSON form, and only opcodes PyTorch's MemoryViz accepts are used (checked
// with pickletools by Debian's /usr/bin/python3, which CI has).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "allocator/device_allocator.h"
#include "allocator/obs/snapshot.h"
#include "allocator/phys/host_backend.h"
#include "allocator/stream/host_event_source.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

std::string TempPath(const char* name) {
  return std::string(::testing::TempDir()) + name + std::to_string(getpid());
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(Pickle, SnapshotUsesOnlyMemoryVizOpcodesAndMatchesJson) {
  auto backend = *HostBackend::Create(64 << 16, 1 << 16);
  Options o;
  o.trace_entries = 1000;
  auto a = *DeviceAllocator::Create(0, o, std::move(backend),
                                    std::make_unique<HostEventSource>());
  void* p = *a->Malloc(100000, 0);
  void* q = *a->Malloc(3000, 0x10);
  ASSERT_TRUE(a->Free(p).ok());
  (void)q;
  const std::string pkl = TempPath("snap.pickle"), js = TempPath("snap.json");
  WriteFile(pkl, SnapshotToPickle(0, a->Arenas(), a->Trace()));
  WriteFile(js, SnapshotToJson(0, a->Arenas(), a->Trace()));
  std::string cmd =
      "/usr/bin/python3 -c \"import pickle,pickletools,json,sys;"
      "b=open(sys.argv[1],'rb').read();"
      "ok={'PROTO','EMPTY_DICT','EMPTY_LIST','MARK','APPENDS','SETITEMS',"
      "'TUPLE','BININT1','BININT2','BININT','LONG1','BINFLOAT','BINUNICODE',"
      "'NONE','NEWTRUE','NEWFALSE','STOP'};"
      "bad={op.name for op,_,_ in pickletools.genops(b)}-ok;"
      "p=pickle.loads(b);j=json.load(open(sys.argv[2]));"
      "[s.__setitem__('segment_pool_id',list(s['segment_pool_id'])) for s in "
      "p['segments']];"
      "acts=[e['action'] for e in p['device_traces'][0]];"
      "sys.exit(0 if not bad and p==j and 'alloc' in acts and "
      "'free_completed' in acts and 'segment_map' in acts else 1)\" " +
      pkl + " " + js;
  EXPECT_EQ(system(cmd.c_str()), 0) << cmd;
}

}  // namespace
}  // namespace fragfree
