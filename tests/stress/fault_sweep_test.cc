// Fault-injection sweep of DeviceAllocator: one script that reaches every kind
// of backend call (arenas on three streams, new pages, pages moving between
// streams after waiting for events, record_stream, a graph pool, a lowered
// limit, EmptyCache), run once per (backend op x call position x fault kind)
// with that call failing: once with InternalError, once with ResourceExhausted,
// and from that call on for good. Every step must succeed or fail cleanly
// (invariants hold, live data intact), and once the faults are cleared, freeing
// everything and EmptyCache must give every page back: nothing reserved,
// nothing idle, and the backend's free memory equal to its capacity. Extends
// device_allocator_test.cc's SurvivesAFaultAtEveryBackendCall (which covers
// Malloc only) to Unmap and Release inside EmptyCache and reclaim, and to
// persistent faults, and to failing event calls. Owns: the sweep script and
// its leak checks (the rig: fault_rig.h; what a failed request gives back:
// failed_request_test.cc; regression tests of the engine bugs found:
// engine_bugs_test.cc). Thread-safety: single-threaded.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/device_allocator.h"
#include "gtest/gtest.h"
#include "tests/stress/fault_rig.h"

namespace fragfree {
namespace {

using stress::FaultMode;
using stress::FaultModes;
using stress::FlakyEvents;
using stress::kPage;
using stress::kPages;
using stress::kPool;
using stress::kS1;
using stress::kS2;
using stress::kS3;
using stress::MakeRig;
using stress::OpName;
using stress::Rig;

struct Live {
  void* ptr;
  size_t size;
  uint8_t fill;
};

// Runs the script; collects live blocks; returns a description of the first
// unclean failure, or "" when every step succeeded or failed cleanly.
class Script {
 public:
  explicit Script(Rig& r) : r_(r) {}

  // On 8 pages; the comments say where the pages come from without faults.
  std::string Run() {
    void* a = Alloc(3 * kPage, kS1);  // 3 new pages, arena of kS1
    void* b = Alloc(1000, kS2);       // 1 new page, small arena of kS2
    void* c = Alloc(2 * kPage, kS3);  // 2 new pages
    Free(a);
    if (c != nullptr) {
      Check(r_.a->RecordStream(c, kS1), "RecordStream");
      Free(c);  // pending until kS1's event completes
    }
    // 2 new pages, and a's 3 after fencing kS1 and waiting (unmap, map).
    void* d = Alloc(5 * kPage, kS2);
    r_.events->CompleteAll();
    Free(d);
    // c's free completes; its pages or d's move to kS1.
    void* e = Alloc(2 * kPage, kS1);
    Check(r_.a->EmptyCache(), "EmptyCache");  // unmaps and releases 5 pages
    Check(r_.a->BeginAllocateToPool(kPool,
                                    [](StreamHandle s) { return s == kS3; }),
          "BeginAllocateToPool");
    void* f = Alloc(kPage + 512, kS3);  // 2 new pages, held by the pool
    Free(f);
    void* g = Alloc(100, kS3);  // 1 new page
    Check(r_.a->EndAllocateToPool(kPool), "EndAllocateToPool");
    Check(r_.a->ReleasePool(kPool), "ReleasePool");
    // Above the lowered limit: f's pages, released with the pool, move.
    Check(r_.a->SetMemoryLimit(6 * kPage), "SetMemoryLimit");
    void* h = Alloc(2 * kPage, kS1);
    Check(r_.a->SetMemoryLimit(0), "SetMemoryLimit");
    void* i = Alloc(2 * kPage, kS3);  // 2 new pages
    Free(b);
    Free(e);
    Check(r_.a->EmptyCache(), "EmptyCache");
    Free(g);
    Free(h);
    Free(i);
    return error_;
  }

  // Clears the faults, frees what is left and checks that every page came back.
  std::string Finish() {
    r_.faults->ClearFaults();
    r_.events->ClearFaults();
    r_.events->CompleteAll();
    for (const Live& l : live_) {
      Verify(l);
      if (absl::Status s = r_.a->Free(l.ptr); !s.ok()) {
        Note("final Free: " + s.ToString());
      }
    }
    live_.clear();
    if (absl::Status s = r_.a->EmptyCache(); !s.ok()) {
      Note("final EmptyCache: " + s.ToString());
    }
    if (absl::Status s = r_.a->CheckInvariants(); !s.ok()) {
      Note("final invariants: " + s.ToString());
    }
    DeviceStats st = r_.a->GetStats();
    if (st.reserved_bytes.pool[kPoolAll].current != 0 ||
        st.idle_page_bytes.current != 0 ||
        st.allocated_bytes.pool[kPoolAll].current != 0) {
      Note(absl::StrCat("leak: reserved ",
                        st.reserved_bytes.pool[kPoolAll].current, " idle ",
                        st.idle_page_bytes.current, " allocated ",
                        st.allocated_bytes.pool[kPoolAll].current));
    }
    if (r_.host->MemoryInfo().free_bytes != kPages * kPage) {
      Note(absl::StrCat("leak: the backend has ",
                        r_.host->MemoryInfo().free_bytes, " of ",
                        kPages * kPage, " B free"));
    }
    return error_;
  }

  int failed_steps() const { return failed_steps_; }
  const std::string& failed_log() const { return failed_log_; }

 private:
  void Note(const std::string& what) {
    if (error_.empty()) error_ = what;
  }
  void AfterStep(const char* what) {
    if (absl::Status s = r_.a->CheckInvariants(); !s.ok()) {
      Note(absl::StrCat("after ", what, ": ", s.ToString()));
    }
  }
  void Check(const absl::Status& s, const char* what) {
    if (!s.ok()) Failed(absl::StrCat(what, ": ", s.ToString()));
    AfterStep(what);
  }
  void Failed(const std::string& what) {
    ++failed_steps_;
    failed_log_ += what + "\n";
  }
  void Verify(const Live& l) {
    const auto* p = static_cast<const uint8_t*>(l.ptr);
    for (size_t off = 0; off < l.size; off += 4096) {
      if (p[off] != l.fill || p[l.size - 1] != l.fill) {
        Note(absl::StrCat("data of the block at 0x",
                          absl::Hex(reinterpret_cast<uintptr_t>(l.ptr)),
                          " changed"));
        return;
      }
    }
  }
  void* Alloc(size_t size, StreamHandle stream) {
    absl::StatusOr<void*> p = r_.a->Malloc(size, stream);
    AfterStep("Malloc");
    if (!p.ok()) {
      Failed(absl::StrCat("Malloc(", size, ", ", stream,
                          "): ", p.status().ToString()));
      return nullptr;
    }
    Live l{*p, size, uint8_t(++fills_)};
    memset(l.ptr, l.fill, size);
    live_.push_back(l);
    for (const Live& other : live_) Verify(other);
    return *p;
  }
  // A Free may fail only cleanly (an event call failed): the block is then
  // still live, and Finish frees it.
  void Free(void* p) {
    if (p == nullptr) return;
    size_t k = 0;
    while (k < live_.size() && live_[k].ptr != p) ++k;
    if (k == live_.size()) return;  // already freed by a failed step
    Verify(live_[k]);
    const size_t size = live_[k].size;
    if (absl::Status s = r_.a->Free(p); !s.ok()) {
      Failed("Free: " + s.ToString());
      if (absl::IsInvalidArgument(s) || r_.a->AllocationSize(p) != size) {
        Note("a failed Free changed the block: " + s.ToString());
      }
    } else {
      live_.erase(live_.begin() + ptrdiff_t(k));
    }
    AfterStep("Free");
  }

  Rig& r_;
  std::vector<Live> live_;
  std::string error_;
  int failed_steps_ = 0;
  std::string failed_log_;
  int fills_ = 0;
};

constexpr BackendOp kAllOps[] = {BackendOp::kReserveVa, BackendOp::kReleaseVa,
                                 BackendOp::kCreate,    BackendOp::kRelease,
                                 BackendOp::kMap,       BackendOp::kUnmap,
                                 BackendOp::kSetAccess};

TEST(FaultSweep, ScriptWithoutFaultsSucceedsAndReachesEveryCall) {
  Rig r = MakeRig();
  Script script(r);
  EXPECT_EQ(script.Run(), "");
  EXPECT_EQ(script.failed_steps(), 0) << script.failed_log();
  for (BackendOp op : kAllOps) {
    if (op == BackendOp::kReleaseVa) continue;  // only at destruction
    EXPECT_GT(r.faults->Calls(op), 0) << OpName(op);
  }
  EXPECT_GT(r.a->GetStats().pages_remapped, 0);
  EXPECT_EQ(script.Finish(), "");
}

// Every backend call of the script failing, one at a time, in three modes.
TEST(FaultSweep, EveryCallOfEveryOpFailsCleanlyAndLeaksNothing) {
  int64_t calls[int(BackendOp::kCount)] = {};
  {
    Rig dry = MakeRig();
    Script script(dry);
    ASSERT_EQ(script.Run(), "");
    for (BackendOp op : kAllOps) calls[int(op)] = dry.faults->Calls(op);
  }
  const std::vector<FaultMode> modes = FaultModes();
  int64_t runs = 0, injected = 0, failed_steps = 0;
  for (BackendOp op : kAllOps) {
    for (int64_t nth = 1; nth <= calls[int(op)]; ++nth) {
      for (const FaultMode& mode : modes) {
        SCOPED_TRACE(absl::StrCat(OpName(op), " call ", nth, " ", mode.name));
        Rig r = MakeRig();
        r.faults->FailCalls(op, nth, mode.count, mode.status);
        Script script(r);
        std::string error = script.Run();
        ASSERT_EQ(error, "");
        injected += r.faults->FaultsInjected();
        failed_steps += script.failed_steps();
        ASSERT_GT(r.faults->FaultsInjected(), 0) << "the fault was not reached";
        ASSERT_EQ(script.Finish(), "");
        ++runs;
      }
    }
  }
  printf(
      "fault sweep: %lld runs, %lld faults injected, %lld steps failed "
      "cleanly\n",
      (long long)runs, (long long)injected, (long long)failed_steps);
  RecordProperty("runs", std::to_string(runs));
  RecordProperty("faults_injected", std::to_string(injected));
  EXPECT_GT(runs, 100);
}

// The same for the event calls (Record / Query / Synchronize): a CUDA event
// call that fails must fail the request cleanly and leak nothing.
TEST(FaultSweep, EveryEventCallFailsCleanlyAndLeaksNothing) {
  int64_t calls[FlakyEvents::kNumCalls] = {};
  {
    Rig dry = MakeRig();
    Script script(dry);
    ASSERT_EQ(script.Run(), "");
    for (int c = 0; c < FlakyEvents::kNumCalls; ++c) {
      calls[c] = dry.events->Calls(FlakyEvents::Call(c));
      EXPECT_GT(calls[c], 0) << FlakyEvents::Name(FlakyEvents::Call(c));
    }
  }
  int64_t runs = 0, injected = 0, failed_steps = 0;
  for (int c = 0; c < FlakyEvents::kNumCalls; ++c) {
    const auto call = FlakyEvents::Call(c);
    for (int64_t nth = 1; nth <= calls[c]; ++nth) {
      for (int64_t count : {int64_t{1}, int64_t{-1}}) {
        SCOPED_TRACE(absl::StrCat(FlakyEvents::Name(call), " call ", nth,
                                  count < 0 ? " from then on" : " once"));
        Rig r = MakeRig();
        r.events->FailCalls(call, nth, count,
                            absl::InternalError("injected event fault"));
        Script script(r);
        std::string error = script.Run();
        ASSERT_EQ(error, "");
        injected += r.events->FaultsInjected();
        failed_steps += script.failed_steps();
        ASSERT_EQ(script.Finish(), "");
        ++runs;
      }
    }
  }
  printf(
      "event fault sweep: %lld runs, %lld faults injected, %lld steps "
      "failed cleanly\n",
      (long long)runs, (long long)injected, (long long)failed_steps);
  RecordProperty("runs", std::to_string(runs));
  RecordProperty("faults_injected", std::to_string(injected));
  EXPECT_GT(runs, 10);
}

// ReleaseVa is called when an arena of a retired stream is released (the
// script retires none) and when the allocator is destroyed: a failing
// ReleaseVa, or Release of idle pages, at destruction must not crash.
TEST(FaultSweep, DestructionWithFailingReleaseVaOrReleaseDoesNotCrash) {
  for (BackendOp op : {BackendOp::kReleaseVa, BackendOp::kRelease}) {
    Rig r = MakeRig();
    void* p = *r.a->Malloc(kPage, kS1);
    void* q = *r.a->Malloc(kPage, kS2);
    ASSERT_TRUE(r.a->Free(p).ok());
    (void)q;  // still live at destruction
    r.faults->FailNext(op, -1, absl::InternalError("injected fault"));
    r.a.reset();
  }
}

}  // namespace
}  // namespace fragfree
