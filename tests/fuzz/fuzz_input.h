// fuzz_input: the byte format of engine_fuzz's inputs and its decoding into a
// device and a sequence of operations. Every byte string is a valid input;
// reads past the end give 0. tests/fuzz/make_corpus.py writes inputs in this
// format (keep its opcodes in step with kOpcodes in fuzz_input.cc).
//
// Header, 3 bytes:
//   h0: the device's granularity = 4 KiB << (h0 % 5)  (4 .. 64 KiB), the
//       engine's page (page_size) that << (h0 / 5 % 3): 1, 2 or 4 of them,
//       and the large page (large_page_mb) by h0 / 15 % 4: none, or 2, 4 or
//       8 engine pages (h0 < 15: none)
//   h1: capacity  = 4 + h1 % 61 engine pages          (4 .. 64 pages)
//   h2: bit 0 faults may be injected (backend calls and events)
//       bit 1 reclaim_before_grow:True (else False), unless bit 6
//       bits 2-3 roundup_power2_divisions 0 / 2 / 4 / 8
//       bit 4 va_factor:1 (else 2)
//       bit 5 round_buckets:[1536,8K,96K]
//       bit 6 reclaim_before_grow:auto (the default)
//       bit 7 trace_entries:64 (the trace ring buffer on)
// Then operations until the input ends (at most kMaxOps): one opcode byte
// (op = byte % 32, see kOpcodes in fuzz_input.cc: allocation takes 8 of the 32
// codes, so that random inputs allocate more than they do anything else) and
// the op's argument bytes, in the order of the Operation fields below (u8: one
// byte, u16: two, little-endian).
//
// Thread-safety: ByteReader is used by one thread; the functions are pure.
#ifndef FRAGFREE_TESTS_FUZZ_FUZZ_INPUT_H_
#define FRAGFREE_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>

#include "allocator/options.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/stream/event_source.h"

namespace fragfree::fuzz {

constexpr int kNumStreams = 16;
constexpr int kMaxOps = 4000;
constexpr int kMaxPools = 4;
// The event calls an input can make fail, after the BackendOps.
constexpr int kNumEventCalls = 3;

inline StreamHandle StreamAt(int i) { return StreamHandle(i) * 0x1000; }

// Reads the input; past the end every read is 0, so every input decodes.
class ByteReader {
 public:
  ByteReader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() {
    const uint16_t lo = U8();  // two statements: operand order is unspecified
    return uint16_t(lo | (U8() << 8));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// The device of an input (its header).
struct Device {
  size_t granularity = 0;  // the emulated device's own page, bytes
  size_t page = 0;         // the engine's page (page_size): 1, 2 or 4 of them
  size_t pages = 0;        // capacity in engine pages
  bool faults = false;     // whether inject_fault ops take effect
  Options options;         // through Options::Parse, as FRAGFREE_CONF would
};

// Decodes the header. Aborts if the configuration it builds does not parse
// (a bug of the fuzzer, not of the input).
Device DecodeDevice(ByteReader& in);

enum class Op {
  kAlloc,
  kAllocBurst,
  kFree,
  kFreeEveryOther,
  kFreeBad,
  kRecordStream,
  kRecordStreamBad,
  kCompleteEvents,
  kEmptyCache,
  kSetLimit,
  kSetFraction,
  kBeginPool,
  kEndPool,
  kReleasePool,
  kInjectFault,
  kClearFaults,
  kStats,
  kVerifyAll,
  kRetireStream,
};

const char* OpName(Op op);

// One operation and its arguments. Each op reads only the fields listed for it
// (in this order); the others stay 0.
struct Operation {
  Op op = Op::kAlloc;
  // alloc: stream u8 % 16, size_class u8, size_arg u16.
  // alloc_burst: stream u8 % 16, count 2 + u8 % 15, size_class u8 % 5,
  //   size_arg u16.
  // record_stream: pick u16, stream u8 % 16. retire_stream: stream u8 % 16.
  int stream = 0;
  uint8_t size_class = 0;  // PickSize's class (% 8)
  uint16_t size_arg = 0;   // PickSize's value
  int count = 0;
  // free: pick u16 (which live block, modulo their number).
  uint16_t pick = 0;
  // free_every_other: parity u8 % 2 (which half, in address order).
  int parity = 0;
  // free_bad, record_stream_bad: bad_kind u8, pick u16 (BadPointer's
  // arguments; record_stream_bad's stream is pick % 16).
  uint8_t bad_kind = 0;
  // set_limit: limit_arg u16 (see SetLimit in fuzz_session.cc).
  uint16_t limit_arg = 0;
  // set_fraction: u8 v, fraction = v / 128, or NaN for 255.
  double fraction = 0.0;
  // begin_pool: pool u8 % 4, stream_mask u16 (the streams captured);
  // end_pool, release_pool: pool u8 % 4.
  int pool = 0;
  uint16_t stream_mask = 0;
  // inject_fault: fault_target u8 % (BackendOp::kCount + 3) (a backend op, or
  // event Record / Query / Synchronize), fault_when u8, fault_count u8,
  // fault_kind u8.
  int fault_target = 0;
  uint8_t fault_when = 0;
  uint8_t fault_count = 0;
  uint8_t fault_kind = 0;
  // stats: what u8 (0-251 % 4: reset peak, reset accumulated, snapshot JSON,
  // stats JSON; 252: trace ring off; 253-255: ring of 8 / 16 / 32 entries).
  uint8_t stats_what = 0;
  // complete_events, empty_cache, clear_faults, verify_all: no argument.
};

// Decodes the next operation (the input must not be empty).
Operation DecodeOperation(ByteReader& in);

}  // namespace fragfree::fuzz

#endif  // FRAGFREE_TESTS_FUZZ_FUZZ_INPUT_H_
