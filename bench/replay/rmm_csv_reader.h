// Reader for RMM's logging_resource_adaptor CSV (format "rmm"): header
// `Thread,Time,Action,Pointer,Size,Stream`. Actions `allocate` and `free` (also
// `deallocate`, as RMM's user guide spells it); `allocate failure` lines (an
// allocation that failed in the recorded run) are valid but carry no event.
// Pointer and Stream are hexadecimal with or without 0x. Time is
// HH:MM:SS.ffffff, HH:MM:SS:ffffff (older RMM) or seconds since the epoch with
// a fraction. Thread-safety: not thread-safe (one reader, one trace).
#ifndef FRAGFREE_BENCH_REPLAY_RMM_CSV_READER_H_
#define FRAGFREE_BENCH_REPLAY_RMM_CSV_READER_H_

#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "bench/replay/line_reader.h"
#include "bench/replay/row_reader.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

const std::vector<std::string_view>& RmmCsvColumns();

// Reads the rows after the header into `trace` (columns from MapColumns).
absl::Status ReadRmmCsvRows(LineReader& reader,
                            const std::vector<size_t>& columns,
                            const ReadOptions& options, Trace* trace);

// Parses one Time field into microseconds; false if malformed.
bool ParseRmmTime(std::string_view s, int64_t* time_us);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_RMM_CSV_READER_H_
