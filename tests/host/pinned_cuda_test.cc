// The pinned allocator on a real GPU (label gpu; skipped without a device):
// both CUDA pinning modes, copies to and from pool memory, and events on
// streams of the device's context gating reuse.
// Thread-safety: single-threaded.
#include <cstring>
#include <vector>

#include "allocator/host/cuda_host.h"
#include "allocator/host/pinned_allocator.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

class PinnedCudaTest
    : public ::testing::TestWithParam<CudaPinningBackend::Mode> {
 protected:
  void SetUp() override {
    absl::StatusOr<const CudaDriver*> cu = CudaDriver::Get();
    int n = 0;
    if (!cu.ok() || (*cu)->cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
    cu_ = *cu;
    CUdevice dev;
    ASSERT_EQ(cu_->cuDeviceGet(&dev, 0), CUDA_SUCCESS);
    ASSERT_EQ(cu_->cuDevicePrimaryCtxRetain(&ctx_, dev), CUDA_SUCCESS);
    ASSERT_EQ(cu_->cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    auto backend = CudaPinningBackend::Create(GetParam());
    ASSERT_TRUE(backend.ok()) << backend.status();
    auto events = CudaStreamEvents::Create();
    ASSERT_TRUE(events.ok()) << events.status();
    PinnedOptions options;
    options.chunk_bytes = 8 * kMiB;
    alloc_ = std::make_unique<PinnedHostAllocator>(std::move(*backend),
                                                   std::move(*events), options);
  }
  const CudaDriver* cu_ = nullptr;
  CUcontext ctx_ = nullptr;
  std::unique_ptr<PinnedHostAllocator> alloc_;
};

TEST_P(PinnedCudaTest, CopiesRoundTripThroughPoolMemory) {
  const size_t n = 3 * kMiB;
  auto* a = static_cast<unsigned char*>(*alloc_->Allocate(n));
  auto* b = static_cast<unsigned char*>(*alloc_->Allocate(n));
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<unsigned char>(i * 7);
  memset(b, 0, n);
  CUdeviceptr d = 0;
  ASSERT_EQ(cu_->cuMemAlloc(&d, n), CUDA_SUCCESS);
  ASSERT_EQ(cu_->cuMemcpyHtoD(d, a, n), CUDA_SUCCESS);
  ASSERT_EQ(cu_->cuMemcpyDtoH(b, d, n), CUDA_SUCCESS);
  EXPECT_EQ(memcmp(a, b, n), 0);
  EXPECT_EQ(alloc_->stats().pin_calls, 1);  // both from one 8 MiB chunk
  cu_->cuMemFree(d);
  ASSERT_TRUE(alloc_->Free(a).ok());
  ASSERT_TRUE(alloc_->Free(b).ok());
  ASSERT_TRUE(alloc_->EmptyCache().ok());
  EXPECT_EQ(alloc_->stats().pinned_bytes, 0);
}

TEST_P(PinnedCudaTest, EventsOnAStreamGateReuse) {
  CUstream stream;
  ASSERT_EQ(cu_->cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  void* p = *alloc_->Allocate(kMiB);
  ASSERT_TRUE(
      alloc_->RecordStream(p, reinterpret_cast<StreamHandle>(stream)).ok());
  ASSERT_TRUE(alloc_->Free(p).ok());
  EXPECT_EQ(alloc_->stats().events_recorded, 1);
  ASSERT_EQ(cu_->cuStreamSynchronize(stream), CUDA_SUCCESS);
  // The stream is idle: the next allocation processes the event and reuses p.
  EXPECT_EQ(*alloc_->Allocate(kMiB), p);
  EXPECT_EQ(alloc_->stats().pending_bytes, 0);
  // The legacy default stream of the current context works too.
  ASSERT_TRUE(alloc_->RecordStream(p, 0).ok());
  ASSERT_TRUE(alloc_->Free(p).ok());
  cu_->cuStreamDestroy(stream);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, PinnedCudaTest,
    ::testing::Values(CudaPinningBackend::Mode::kHostAlloc,
                      CudaPinningBackend::Mode::kRegister));

}  // namespace
}  // namespace fragfree
