// allocator/phys/capture_relax.h against a stub driver whose
// cuThreadExchangeStreamCaptureMode keeps a per-thread mode: the mode call is
// made only when an armed thread reaches a driver call, once per outermost
// scope, and the thread's own mode comes back when that scope ends.
#include "allocator/phys/capture_relax.h"

#include <thread>

#include "gtest/gtest.h"

namespace fragfree {
namespace {

thread_local CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
thread_local int exchanges = 0;
thread_local bool fail_exchange = false;

CUresult StubExchange(CUstreamCaptureMode* mode) {
  ++exchanges;
  if (fail_exchange) return CUDA_ERROR_INVALID_VALUE;
  std::swap(*mode, thread_mode);
  return CUDA_SUCCESS;
}

CudaDriver StubDriver() {
  CudaDriver cu;
  cu.cuThreadExchangeStreamCaptureMode = &StubExchange;
  return cu;
}

// Every test starts on a thread in global mode with no mode call made.
class CaptureRelax : public ::testing::Test {
 protected:
  void SetUp() override {
    thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    exchanges = 0;
    fail_exchange = false;
  }
};

TEST_F(CaptureRelax, UnarmedThreadIsNeverSwitched) {
  const CudaDriver cu = StubDriver();
  RelaxCaptureIfArmed(cu);
  RelaxCaptureIfArmed(cu);
  EXPECT_EQ(exchanges, 0);
  EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

TEST_F(CaptureRelax, ScopeWithoutDriverCallsMakesNoModeCall) {
  { RelaxCaptureScope relaxed; }
  EXPECT_EQ(exchanges, 0);
}

TEST_F(CaptureRelax, SwitchesOnceAndRestoresTheThreadsMode) {
  const CudaDriver cu = StubDriver();
  thread_mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
  {
    RelaxCaptureScope relaxed;
    RelaxCaptureIfArmed(cu);
    EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    RelaxCaptureIfArmed(cu);
    EXPECT_EQ(exchanges, 1);
  }
  EXPECT_EQ(exchanges, 2);
  EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
  // Disarmed again: later driver calls leave the mode alone.
  RelaxCaptureIfArmed(cu);
  EXPECT_EQ(exchanges, 2);
}

TEST_F(CaptureRelax, NestedScopesRestoreOnlyAtTheOutermost) {
  const CudaDriver cu = StubDriver();
  {
    RelaxCaptureScope outer;
    {
      RelaxCaptureScope inner;
      RelaxCaptureIfArmed(cu);
    }
    EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_RELAXED);
    RelaxCaptureIfArmed(cu);
    EXPECT_EQ(exchanges, 1);
  }
  EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
  EXPECT_EQ(exchanges, 2);
}

TEST_F(CaptureRelax, FailedSwitchIsNotUndone) {
  const CudaDriver cu = StubDriver();
  {
    RelaxCaptureScope relaxed;
    fail_exchange = true;
    RelaxCaptureIfArmed(cu);
    fail_exchange = false;
  }
  EXPECT_EQ(exchanges, 1);  // no restore of a switch that did not happen
  EXPECT_EQ(thread_mode, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

TEST_F(CaptureRelax, ArmingIsPerThread) {
  const CudaDriver cu = StubDriver();
  RelaxCaptureScope relaxed;
  int other_exchanges = -1;
  std::thread([&] {
    RelaxCaptureIfArmed(cu);
    other_exchanges = exchanges;
  }).join();
  EXPECT_EQ(other_exchanges, 0);
}

}  // namespace
}  // namespace fragfree
