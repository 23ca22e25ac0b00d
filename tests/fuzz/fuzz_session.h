// fuzz_session: runs one engine_fuzz input. Decodes its device (fuzz_input.h),
// builds a DeviceAllocator over a FaultInjectingBackend(HostBackend) and a
// fault-injecting ManualEventSource, runs the input's operations one by one,
// checking every step against the reference model (fuzz_model.h) and the status
// codes of every call, then frees everything and checks that nothing leaked.
//
// Thread-safety: single-threaded; each input builds its own allocator.
#ifndef FRAGFREE_TESTS_FUZZ_FUZZ_SESSION_H_
#define FRAGFREE_TESTS_FUZZ_FUZZ_SESSION_H_

#include <cstddef>
#include <cstdint>

namespace fragfree::fuzz {

// Runs one input; aborts on the first violation (after printing it).
// Environment: FRAGFREE_FUZZ_TRACE=1 prints every operation.
void RunInput(const uint8_t* data, size_t size);

}  // namespace fragfree::fuzz

#endif  // FRAGFREE_TESTS_FUZZ_FUZZ_SESSION_H_
