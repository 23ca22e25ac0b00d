// fuzz_input: decoding of engine_fuzz's inputs (the format is in fuzz_input.h).
// Thread-safety: pure functions of their arguments.
#include "tests/fuzz/fuzz_input.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace fragfree::fuzz {
namespace {

// Opcode byte % 32 -> operation.
constexpr Op kOpcodes[32] = {
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAlloc,
    Op::kAllocBurst,
    Op::kFree,
    Op::kFree,
    Op::kFree,
    Op::kFree,
    Op::kFreeEveryOther,
    Op::kFreeBad,
    Op::kRecordStream,
    Op::kRecordStream,
    Op::kRecordStreamBad,
    Op::kCompleteEvents,
    Op::kCompleteEvents,
    Op::kEmptyCache,
    Op::kSetLimit,
    Op::kSetFraction,
    Op::kBeginPool,
    Op::kEndPool,
    Op::kReleasePool,
    Op::kInjectFault,
    Op::kInjectFault,
    Op::kClearFaults,
    Op::kStats,
    Op::kVerifyAll,
    Op::kAlloc,
    Op::kRetireStream,
};

}  // namespace

Device DecodeDevice(ByteReader& in) {
  Device d;
  const uint8_t page_byte = in.U8();
  d.granularity = size_t{4096} << (page_byte % 5);
  d.page = d.granularity << (page_byte / 5 % 3);
  d.pages = 4 + in.U8() % 61;
  const uint8_t flags = in.U8();
  d.faults = flags & 1;
  std::string conf =
      absl::StrCat("roundup_power2_divisions:",
                   (flags & 12) == 0 ? 0 : 1 << ((flags >> 2) & 3),
                   ",va_factor:", (flags & 16) ? 1 : 2);
  if (!(flags & 64)) {
    absl::StrAppend(&conf,
                    ",reclaim_before_grow:", (flags & 2) ? "True" : "False");
  } else if (flags & 2) {
    // auto, growing instead of moving once any page has moved recently.
    absl::StrAppend(&conf, ",move_time_budget:0");
  }
  if (flags & 32) absl::StrAppend(&conf, ",round_buckets:[1536,8K,96K]");
  if (flags & 128) absl::StrAppend(&conf, ",trace_entries:64");
  absl::StatusOr<Options> options = Options::Parse(conf);
  if (!options.ok()) {
    fprintf(stderr, "engine_fuzz: bad conf %s: %s\n", conf.c_str(),
            options.status().ToString().c_str());
    abort();
  }
  d.options = *std::move(options);
  // Set in bytes: page_size_mb is in MiB and these devices' pages are KiB.
  d.options.page_size_bytes = d.page;
  // h0 / 15 % 4: large_page_mb of none (every h0 below 15, as in the seeds
  // made before large pages), 2, 4 or 8 engine pages. Not the default's 32
  // MiB: more than any of these devices holds.
  const int large_shift = page_byte / 15 % 4;
  d.options.large_page_bytes = large_shift == 0 ? 0 : d.page << large_shift;
  d.options.backend = "host";
  return d;
}

const char* OpName(Op op) {
  switch (op) {
    case Op::kAlloc:
      return "alloc";
    case Op::kAllocBurst:
      return "alloc_burst";
    case Op::kFree:
      return "free";
    case Op::kFreeEveryOther:
      return "free_every_other";
    case Op::kFreeBad:
      return "free_bad";
    case Op::kRecordStream:
      return "record_stream";
    case Op::kRecordStreamBad:
      return "record_stream_bad";
    case Op::kCompleteEvents:
      return "complete_events";
    case Op::kEmptyCache:
      return "empty_cache";
    case Op::kSetLimit:
      return "set_limit";
    case Op::kSetFraction:
      return "set_fraction";
    case Op::kBeginPool:
      return "begin_pool";
    case Op::kEndPool:
      return "end_pool";
    case Op::kReleasePool:
      return "release_pool";
    case Op::kInjectFault:
      return "inject_fault";
    case Op::kClearFaults:
      return "clear_faults";
    case Op::kStats:
      return "stats";
    case Op::kVerifyAll:
      return "verify_all";
    case Op::kRetireStream:
      return "retire_stream";
  }
  return "?";
}

Operation DecodeOperation(ByteReader& in) {
  Operation o;
  o.op = kOpcodes[in.U8() % 32];
  switch (o.op) {
    case Op::kAlloc:
      o.stream = in.U8() % kNumStreams;
      o.size_class = in.U8();
      o.size_arg = in.U16();
      break;
    case Op::kAllocBurst:
      o.stream = in.U8() % kNumStreams;
      o.count = 2 + in.U8() % 15;
      o.size_class = in.U8() % 5;
      o.size_arg = in.U16();
      break;
    case Op::kFree:
      o.pick = in.U16();
      break;
    case Op::kFreeEveryOther:
      o.parity = in.U8() % 2;
      break;
    case Op::kFreeBad:
    case Op::kRecordStreamBad:
      o.bad_kind = in.U8();
      o.pick = in.U16();
      break;
    case Op::kRecordStream:
      o.pick = in.U16();
      o.stream = in.U8() % kNumStreams;
      break;
    case Op::kSetLimit:
      o.limit_arg = in.U16();
      break;
    case Op::kSetFraction: {
      const uint8_t v = in.U8();
      o.fraction = v == 255 ? std::nan("") : double(v) / 128.0;
      break;
    }
    case Op::kBeginPool:
      o.pool = in.U8() % kMaxPools;
      o.stream_mask = in.U16();
      break;
    case Op::kEndPool:
    case Op::kReleasePool:
      o.pool = in.U8() % kMaxPools;
      break;
    case Op::kInjectFault:
      o.fault_target = in.U8() % (int(BackendOp::kCount) + kNumEventCalls);
      o.fault_when = in.U8();
      o.fault_count = in.U8();
      o.fault_kind = in.U8();
      break;
    case Op::kStats:
      o.stats_what = in.U8();
      break;
    case Op::kRetireStream:
      o.stream = in.U8() % kNumStreams;
      break;
    case Op::kCompleteEvents:
    case Op::kEmptyCache:
    case Op::kClearFaults:
    case Op::kVerifyAll:
      break;
  }
  return o;
}

}  // namespace fragfree::fuzz
