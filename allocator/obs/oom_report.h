// OomReport: the report fragfree writes when an allocation fails after every
// reclaim (docs/oom.md). Pure formatting and diagnosis over values the engine
// and the Python integration hand in; no allocator access. It owns:
//  - the facts (OomFacts, what the engine records: DeviceAllocator::
//    last_oom()) and the optional inputs (live allocations with stacks, the
//    four memory categories, techniques already on, a bucket advice);
//  - the diagnosis (DiagnoseOom): device picture, fragmentation verdict, memory
//    alive across steps vs within a step, and the advice in order (nearly
//    free fixes, then the branch of the cause, then the last resort);
//  - three renderings: text (starts like PyTorch's OOM message), JSON, and a
//    self-contained HTML page with an SVG memory map (oom_report.cc,
//    oom_report_json.cc, oom_report_html.cc).
// Thread-safety: pure functions over values.
#ifndef FRAGFREE_ALLOCATOR_OBS_OOM_REPORT_H_
#define FRAGFREE_ALLOCATOR_OBS_OOM_REPORT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "allocator/base/stream_handle.h"
#include "allocator/obs/allocator_view.h"
#include "allocator/obs/bucket_advisor.h"
#include "allocator/obs/stats.h"

namespace fragfree {

// What the engine knew when the request failed (DeviceAllocator::last_oom()).
struct OomFacts {
  int device = 0;
  StreamHandle stream = 0;
  size_t requested_bytes = 0;
  size_t rounded_bytes = 0;
  size_t limit_bytes = 0;
  size_t device_total_bytes = 0;
  size_t device_free_bytes = 0;
  size_t mapped_bytes = 0;  // fragfree's reserved memory
  size_t allocated_bytes = 0;
  size_t active_bytes = 0;       // allocated + freed but pending other streams
  size_t cached_bytes = 0;       // mapped but free
  size_t reclaimable_bytes = 0;  // whole free pages among the cached bytes
  size_t idle_bytes = 0;         // pages created but not mapped
  size_t pages_needed = 0;
  // The device's own granularity, which the engine's page (the stats'
  // page_size) is a multiple of with page_size_mb; 0: unknown.
  size_t device_granularity_bytes = 0;
  std::string reason;
};

// A live allocation with what the integration recorded about it.
struct LiveAllocation {
  uintptr_t addr = 0;
  size_t size = 0;
  StreamHandle stream = 0;
  uint64_t alloc_seq = 0;  // 0: unknown
  std::string stack;       // Python/C++ frames, one per line; may be empty
};

// Bytes of the state that lives across steps, from fragfree.watch(model,
// optimizer). Absent: unknown (the report estimates it from allocation age).
struct MemoryCategories {
  size_t parameters = 0;
  size_t gradients = 0;
  size_t optimizer_state = 0;
  size_t other_persistent = 0;  // buffers, EMA weights, ...
};

// Techniques the integration saw already on; advice never suggests them.
// Absent: unknown (advice says "if not already on").
struct ActiveTechniques {
  bool bf16_autocast = false;
  bool gradient_checkpointing = false;
  bool flash_attention = false;  // FlashAttention / SDPA
  bool eight_bit_optimizer = false;
  bool sharded = false;  // ZeRO / FSDP
  bool lora_peft = false;
  bool cpu_offload = false;
  bool round_buckets = false;  // FRAGFREE_CONF round_buckets is set
};

struct OomContext {
  OomFacts facts;
  DeviceStats stats;
  std::vector<ArenaView> arenas;     // memory map; live blocks; may be empty
  std::vector<LiveAllocation> live;  // with stacks, when recorded; may be empty
  std::optional<MemoryCategories> categories;
  std::optional<ActiveTechniques> techniques;
  std::optional<BucketAdvice> bucket_advice;
  size_t top_allocations = 10;  // largest live allocations to list
};

enum class OomCause {
  kTooLarge,       // one request larger than the limit / device
  kFragmentation,  // effective gap judged severe (JudgeGap)
  kPersistent,     // parameters, gradients, optimizer state dominate
  kActivations,    // memory living within a step dominates
  kUnknown,        // no categories and no clear age split: run batch=1
};
const char* OomCauseName(OomCause cause);  // "persistent", ...
// How the advice is ordered, in words, for the renderings.
const char* OomAdviceOrderText();

struct OomAdvice {
  std::string id;      // "bf16_autocast", "lora_peft", ... (docs/oom.md)
  std::string branch;  // "free", "persistent", "activations", "fragmentation",
                       // "capacity", "last_resort"
  std::string title;   // one line
  std::string how;     // what to type or set
};

struct OomDiagnosis {
  // Device picture. fragfree's pages = mapped + idle; other = device used -
  // fragfree's pages (other processes, CUDA context, other allocators).
  size_t other_bytes = 0;
  size_t pending_bytes = 0;  // active - allocated
  size_t stranded_bytes =
      0;  // cached - reclaimable: free bytes in partial pages
  size_t padding_bytes = 0;  // allocated - requested (rounding)
  // Fragmentation: the gap between allocated and reserved memory (1 -
  // allocated / reserved) and fragfree's effective one ((stranded + padding) /
  // reserved): reclaimable pages are not lost, fragfree remaps them. Both
  // verdicts are GapVerdictName(JudgeGap(...)) (obs/stats.h).
  double gap = 0.0;
  double effective_gap = 0.0;
  const char* gap_verdict = "low";
  const char* effective_verdict = "low";
  // Across steps vs within a step.
  bool categories_known = false;
  bool persistent_estimated = false;  // split from allocation age
  bool split_known = false;           // persistent_bytes is meaningful
  size_t persistent_bytes = 0;
  size_t activation_bytes = 0;
  OomCause cause = OomCause::kUnknown;
  std::string summary;               // the cause in a sentence or three
  std::vector<std::string> notes;    // capacity observations, one sentence each
  std::vector<OomAdvice> advice;     // in OomAdviceOrderText()'s order
  std::vector<std::string> skipped;  // advice ids already on
  std::vector<LiveAllocation> largest;
};

OomDiagnosis DiagnoseOom(const OomContext& context);

// PyTorch's format_size: "512 bytes", "1.50 KiB", "2.00 MiB", "3.25 GiB".
std::string PyTorchFormatSize(size_t bytes);
// The first sentences, as PyTorch writes them: "CUDA out of memory. Tried to
// allocate X. GPU d has a total capacity of T of which F is free. ..."
std::string OomHeadline(const OomFacts& facts);

std::string OomReportText(const OomContext& context);
std::string OomReportJson(const OomContext& context);
std::string OomReportHtml(const OomContext& context);

// The same renderings from a diagnosis already made (so one report can be
// written three ways with one diagnosis).
std::string OomReportText(const OomContext& context, const OomDiagnosis& d);
std::string OomReportJson(const OomContext& context, const OomDiagnosis& d);
std::string OomReportHtml(const OomContext& context, const OomDiagnosis& d);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_OOM_REPORT_H_
