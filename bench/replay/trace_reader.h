// ReadTrace: opens a trace file (gzip'd or not), recognises its format from the
// header line (or takes the one the user named) and returns the normalised
// Trace. Every problem is an error naming the file (and the line, for line
// problems). Thread-safety: pure functions; independent calls may run
// concurrently.
#ifndef FRAGFREE_BENCH_REPLAY_TRACE_READER_H_
#define FRAGFREE_BENCH_REPLAY_TRACE_READER_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "bench/replay/line_reader.h"
#include "bench/replay/row_reader.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

enum class TraceFormat {
  kAuto,  // decide from the header
  kCsv,   // action,addr,size,stream,time_us (data/traces, snapshot_to_csv.py)
  kRmm,   // Thread,Time,Action,Pointer,Size,Stream (RMM logging adaptor)
};

// "auto", "csv" or "rmm".
absl::StatusOr<TraceFormat> ParseTraceFormat(std::string_view name);

absl::StatusOr<Trace> ReadTrace(const std::string& path, TraceFormat format,
                                const ReadOptions& options);

// Same, from an open reader (tests use LineReader::FromString).
absl::StatusOr<Trace> ReadTraceFrom(LineReader& reader, TraceFormat format,
                                    const ReadOptions& options);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_TRACE_READER_H_
