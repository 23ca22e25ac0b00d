// engine_fuzz: a coverage-guided fuzzer of DeviceAllocator. Owns only the
// libFuzzer entry point; the same function is linked into a plain replay
// driver that CI runs with any compiler (fuzz_replay_main.cc). The parts:
//   fuzz_input.h    the input format and its decoding (device, operations)
//   fuzz_model.h    the reference model every step is checked against
//   fuzz_session.h  the operations on the engine, and the driver of an input
// docs/reliability.md has the commands.
//
// Thread-safety: single-threaded; each input builds its own allocator.
#include <cstddef>
#include <cstdint>

#include "tests/fuzz/fuzz_session.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fragfree::fuzz::RunInput(data, size);
  return 0;
}
