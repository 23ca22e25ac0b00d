// Names shared by the native adapter's files (csrc/): the PyTorch namespaces
// they use and the device limit. Thread-safety: declarations only.
#pragma once

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>

#include <utility>

namespace fragfree_native {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::DataPtr;
using c10::DeviceIndex;
using MempoolId = c10::MempoolId_t;
using PoolPair = std::pair<unsigned long long, unsigned long long>;

constexpr int kMaxDevices = 64;

}  // namespace fragfree_native
