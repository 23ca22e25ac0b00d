// Test controls of the fake CUDA runtime (fake_cudart.cc), a stand-in for
// libcudart with which the LD_PRELOAD interposer is tested on machines without
// a GPU: it implements the runtime functions libfragfree.so forwards to or
// calls, on host memory, and counts every call.
// Thread-safety: every function is thread-safe (one mutex inside).
#ifndef FRAGFREE_TESTS_PRELOAD_FAKE_CUDART_H_
#define FRAGFREE_TESTS_PRELOAD_FAKE_CUDART_H_

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// How many times the fake's function `name` ran (e.g. "cudaMalloc").
int fake_calls(const char* name);
// A device allocation made by "the driver", unknown to fragfree; the fake's
// cudaFree/cudaFreeAsync accept it.
void* fake_device_alloc(size_t size);
// A stream on `device`; cudaStreamGetDevice answers `device` for it.
cudaStream_t fake_stream_create(int device);
void fake_set_capturing(cudaStream_t stream, int capturing);
// While set, cudaStreamQuery(stream) answers cudaErrorNotReady (work in
// flight); otherwise cudaSuccess (idle). cudaStreamSynchronize(stream) clears
// it.
void fake_set_busy(cudaStream_t stream, int busy);
// While set, cudaStreamIsCapturing(0) fails with
// cudaErrorStreamCaptureImplicit.
void fake_set_implicit_capture(int on);
void fake_set_device(int device);
// While set, cudaGetDevice fails with cudaErrorNoDevice.
void fake_set_no_device(int on);
// A pool that is not a device's default pool.
cudaMemPool_t fake_pool_create(void);
// What every pool reports for the reserved/used size attributes.
#define FAKE_POOL_BYTES 1000

#ifdef __cplusplus
}
#endif

#endif  // FRAGFREE_TESTS_PRELOAD_FAKE_CUDART_H_
