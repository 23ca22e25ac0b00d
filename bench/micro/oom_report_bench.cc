// What an OOM costs, from the failing ff_malloc to the finished report (target:
// under 100 ms at 10,000 live allocations): the engine's reclaim attempts, the
// views of every arena and block, the diagnosis, the bucket advice, and the
// text; with oom_report_path (FF_BENCH_OOM_REPORT_PATH) also the text, JSON
// and HTML page written to files and their stderr line. The state holds `live`
// allocations of mixed sizes (and as many freed between them), so the report
// has that many blocks to walk. Runs on the simulated backend through the C
// API, as a program would. docs/oom.md has the figures and the command.
// Thread-safety: single-threaded.
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fragfree/fragfree.h"

namespace {

// One state for the process (the C API's runtime is process-wide, and cannot
// be made again after ff_shutdown): it grows to `live` allocations under a
// 48 GiB limit (a simulated 64 GiB device), with as many freed between them,
// so each argument's report walks that many blocks.
void Prepare(int live) {
  static int prepared = -1;
  if (prepared < 0) {
    const char* report_dir = getenv("FF_BENCH_OOM_REPORT_PATH");
    std::string conf =
        "backend:simulated,host_capacity_mb:65536,memory_limit_mb:49152,"
        "trace_entries:100000";
    if (report_dir != nullptr) {
      conf += std::string(",oom_report_path:") + report_dir;
    }
    if (ff_init(conf.c_str()) != FF_OK) {
      fprintf(stderr, "ff_init: %s\n", ff_last_error());
      abort();
    }
    ff_set_error_handler([](ff_status_t, const char*, void*) {}, nullptr);
    prepared = 0;
  }
  std::vector<void*> freed;
  for (int i = prepared; i < live; ++i) {
    const size_t size = size_t(512) << (i % 11);  // 512 B .. 512 KiB
    void* p = ff_malloc(size + 136 * (i % 7), 0, nullptr);
    void* q = ff_malloc(size, 0, nullptr);
    if (p == nullptr || q == nullptr) {
      fprintf(stderr, "setup allocation %d failed: %s\n", i, ff_last_error());
      abort();
    }
    freed.push_back(q);
  }
  for (void* q : freed) ff_free(q, 0);
  if (live > prepared) prepared = live;
}

void BM_OomReport(benchmark::State& state) {
  Prepare(int(state.range(0)));
  for (auto _ : state) {
    void* p = ff_malloc(size_t(100) << 30, 0, nullptr);  // over the limit
    if (p != nullptr) {
      fprintf(stderr,
              "a 100 GiB request succeeded: the memory limit must be "
              "below it for this benchmark\n");
      abort();
    }
    benchmark::DoNotOptimize(ff_last_error());
  }
  state.counters["report_chars"] = double(std::string(ff_last_error()).size());
}
BENCHMARK(BM_OomReport)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
