// Reader for the CSV of data/traces/ (format "csv"): header
// `action,addr,size,stream,time_us`, one PyTorch trace entry per line, as
// written by workloads/train.py or bench/replay/snapshot_to_csv.py. `alloc`
// opens an allocation, `free_completed` (when the memory really became
// reusable) closes the latest one at that address; `free_requested` and
// PyTorch's other actions (segment_*, snapshot, oom) are valid but carry no
// event; anything else is an error. Thread-safety: not thread-safe (one reader,
// one trace).
#ifndef FRAGFREE_BENCH_REPLAY_PYTORCH_CSV_READER_H_
#define FRAGFREE_BENCH_REPLAY_PYTORCH_CSV_READER_H_

#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "bench/replay/line_reader.h"
#include "bench/replay/row_reader.h"
#include "bench/replay/trace_event.h"

namespace fragfree::replay {

// The header's column names, in the order the row reader wants them.
const std::vector<std::string_view>& PytorchCsvColumns();

// Reads the rows after the header into `trace` (columns from MapColumns).
absl::Status ReadPytorchCsvRows(LineReader& reader,
                                const std::vector<size_t>& columns,
                                const ReadOptions& options, Trace* trace);

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_PYTORCH_CSV_READER_H_
