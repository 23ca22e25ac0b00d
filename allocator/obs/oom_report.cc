// The OOM diagnosis (DiagnoseOom), PyTorch's headline and the text report;
// JSON is in oom_report_json.cc, the HTML page in oom_report_html.cc.
// docs/oom.md explains each figure. Thread-safety: pure functions over values.
#include "allocator/obs/oom_report.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "allocator/base/units.h"

namespace fragfree {
namespace {

// Memory outside fragfree worth a note: this share of the device or more.
constexpr double kOtherShare = 0.20;
// Without categories, the largest gap in allocation order among live blocks
// splits old (persistent) from new (this step) when it spans this much of the
// order: a training step's churn separates them from the second step on.
constexpr double kAgeGapShare = 0.25;

size_t Sub(size_t a, size_t b) { return a > b ? a - b : 0; }

double Share(size_t part, size_t whole) {
  return whole == 0 ? 0.0 : double(part) / double(whole);
}

// Splits live allocations by age: returns true and the persistent bytes when
// the largest gap between consecutive allocation numbers is a clear one.
bool EstimatePersistent(std::vector<std::pair<uint64_t, size_t>> seq_size,
                        size_t* persistent) {
  if (seq_size.size() < 2) return false;
  std::sort(seq_size.begin(), seq_size.end());
  const uint64_t span = seq_size.back().first - seq_size.front().first;
  uint64_t best_gap = 0;
  size_t best_index = 0;
  for (size_t i = 0; i + 1 < seq_size.size(); ++i) {
    uint64_t gap = seq_size[i + 1].first - seq_size[i].first;
    if (gap > best_gap) best_gap = gap, best_index = i;
  }
  if (span == 0 || double(best_gap) < kAgeGapShare * double(span)) return false;
  size_t bytes = 0;
  for (size_t i = 0; i <= best_index; ++i) bytes += seq_size[i].second;
  *persistent = bytes;
  return true;
}

// Adds the advice to `d` in the order OomAdviceOrderText() states, skipping
// what is already on.
class AdviceBuilder {
 public:
  AdviceBuilder(const OomContext& ctx, OomDiagnosis* d)
      : techniques_(ctx.techniques), d_(d) {}

  // `on` points into the techniques (nullptr: not a flag the integration
  // knows about).
  void Add(const char* id, const char* branch, std::string title,
           std::string how, bool ActiveTechniques::*on = nullptr) {
    for (const OomAdvice& a : d_->advice) {
      if (a.id == id) return;
    }
    if (std::find(d_->skipped.begin(), d_->skipped.end(), id) !=
        d_->skipped.end()) {
      return;
    }
    if (on != nullptr && techniques_.has_value() && (*techniques_).*on) {
      d_->skipped.push_back(id);
      return;
    }
    if (on != nullptr && !techniques_.has_value())
      title += " (if not already on)";
    d_->advice.push_back(
        OomAdvice{id, branch, std::move(title), std::move(how)});
  }

  void Free() {
    Add("bf16_autocast", "free", "Use bf16 mixed precision (autocast)",
        "with torch.autocast(\"cuda\", dtype=torch.bfloat16): ... -- nearly "
        "free; activations and temporaries take half the bytes",
        &ActiveTechniques::bf16_autocast);
    Add("flash_attention", "free", "Use FlashAttention / SDPA",
        "F.scaled_dot_product_attention, or attn_implementation=\"sdpa\" "
        "(HuggingFace) -- nearly free; attention memory grows with the "
        "sequence,"
        " not its square",
        &ActiveTechniques::flash_attention);
  }

  void Persistent() {
    Add("lora_peft", "persistent",
        "Fine-tune with LoRA / PEFT instead of all weights",
        "peft.get_peft_model(model, LoraConfig(...)) -- trainable parameters "
        "drop to ~1%, and their gradients and optimizer state with them",
        &ActiveTechniques::lora_peft);
    Add("eight_bit_optimizer", "persistent", "Use an 8-bit optimizer",
        "bnb.optim.AdamW8bit(model.parameters(), lr=...) -- one line; Adam "
        "state from 8 to 2 bytes per parameter, little quality loss",
        &ActiveTechniques::eight_bit_optimizer);
    Add("zero_fsdp", "persistent",
        "Shard optimizer state, gradients and parameters (ZeRO / FSDP)",
        "FSDP / DeepSpeed ZeRO stage 1 -> 2 -> 3: each stage shards one more "
        "of "
        "optimizer state, gradients, parameters across the GPUs",
        &ActiveTechniques::sharded);
    Add("more_parallelism", "persistent",
        "Spread the model over more GPUs (tensor / pipeline parallelism)",
        "tensor parallelism splits each layer's weights; pipeline parallelism "
        "splits the layers");
    Add("cpu_offload", "persistent",
        "Offload optimizer state / parameters to the CPU",
        "FSDP CPUOffload or ZeRO-Offload -- the last resort of this branch: "
        "over PCIe, an order of magnitude slower",
        &ActiveTechniques::cpu_offload);
  }

  void Activations() {
    Add("gradient_checkpointing", "activations",
        "Gradient checkpointing, selective first",
        "create_selective_checkpoint_contexts (recompute cheap ops, keep "
        "matmuls: 5-10% time), then model.gradient_checkpointing_enable() / "
        "checkpoint_sequential (full: ~30% time, activations drop ~10x)",
        &ActiveTechniques::gradient_checkpointing);
    Add("flash_attention", "activations", "Use FlashAttention / SDPA",
        "F.scaled_dot_product_attention, or attn_implementation=\"sdpa\"",
        &ActiveTechniques::flash_attention);
    Add("shorter_sequences", "activations",
        "Shorter sequences (truncate, or bucket lengths instead of padding to "
        "the longest)",
        "activations grow with batch x sequence length; fragfree's sequence "
        "bucketing helper picks a few lengths with the least padding");
    Add("sequence_parallelism", "activations", "Sequence / context parallelism",
        "split each sequence's activations across GPUs (Megatron sequence "
        "parallelism, ring attention)");
  }

  void Fragmentation(const OomContext& ctx) {
    const size_t page = size_t(ctx.stats.page_size);
    const size_t granularity = ctx.facts.device_granularity_bytes;
    if (granularity != 0 && page > granularity) {
      Add("smaller_pages", "fragmentation", "Use the device's own page size",
          absl::StrFormat(
              "FRAGFREE_CONF=page_size_mb:0 (pages of %s instead of %s: a "
              "free range gives back only the whole pages inside it, and %s "
              "lies free in partially used pages now)",
              FormatBytes(page), FormatBytes(granularity),
              FormatBytes(d_->stranded_bytes)));
    }
    Add("fixed_shapes", "fragmentation",
        "Make shapes fixed: pad variable-length batches to a few lengths",
        "bucket sequence lengths in the data loader (fragfree's sequence "
        "bucketing helper) so that freed blocks fit the next step's requests");
    std::string how =
        "FRAGFREE_CONF=round_buckets:[...] rounds requests to a few sizes";
    if (ctx.bucket_advice.has_value() && !ctx.bucket_advice->conf.empty()) {
      const BucketAdvice& b = *ctx.bucket_advice;
      how = absl::StrFormat(
          "FRAGFREE_CONF=%s (advised from %d observed requests: %d block "
          "sizes instead of %d, padding %s)",
          b.conf, b.requests, b.advised_distinct_sizes,
          b.default_distinct_sizes, FormatBytes(b.padding_bytes));
    }
    Add("round_buckets", "fragmentation",
        "Round allocation sizes to a few buckets", how,
        &ActiveTechniques::round_buckets);
  }

 private:
  const std::optional<ActiveTechniques>& techniques_;
  OomDiagnosis* d_;
};

std::string CauseSentence(const OomContext& ctx, const OomDiagnosis& d) {
  const OomFacts& f = ctx.facts;
  const double p = Share(d.persistent_bytes, f.allocated_bytes);
  switch (d.cause) {
    case OomCause::kTooLarge:
      return absl::StrFormat(
          "One request (%s) is larger than %s (%s): no allocator can serve it.",
          FormatBytes(f.rounded_bytes),
          f.limit_bytes != 0 && f.limit_bytes < f.device_total_bytes
              ? "fragfree's memory limit"
              : "the device",
          FormatBytes(f.limit_bytes != 0 ? f.limit_bytes
                                         : f.device_total_bytes));
    case OomCause::kFragmentation:
      return absl::StrFormat(
          "Fragmentation: %s (%.1f%% of reserved) is mapped but unusable: %s "
          "free in partially used pages and %s of rounding padding.",
          FormatBytes(d.stranded_bytes + d.padding_bytes),
          100 * d.effective_gap, FormatBytes(d.stranded_bytes),
          FormatBytes(d.padding_bytes));
    case OomCause::kPersistent:
      return absl::StrFormat(
          "Memory alive across steps dominates (%s, %.0f%% of allocated): a "
          "batch of 1 would likely still run out, so the batch size is not the "
          "lever. Follow the persistent-state branch.",
          FormatBytes(d.persistent_bytes), 100 * p);
    case OomCause::kActivations:
      return absl::StrFormat(
          "Memory living within a step (activations) dominates (%s, %.0f%% of "
          "allocated): a batch of 1 would fit. Follow the activation branch.",
          FormatBytes(d.activation_bytes), 100 * (1 - p));
    case OomCause::kUnknown:
      break;
  }
  return "Cannot tell persistent state from activations: no categories were "
         "given and live allocations show no clear age gap. To find out, run "
         "one step with batch size 1: if it still runs out of memory, "
         "persistent state (parameters, gradients, optimizer state) is the "
         "cause; if it fits, activations are. fragfree.watch(model, optimizer) "
         "lets this report name "
         "the four categories.";
}

// A live allocation that may be among the largest (from the blocks or from
// ctx.live).
struct Candidate {
  size_t size;
  uintptr_t addr;
  StreamHandle stream;
  uint64_t seq;
};

// Live blocks: the rounding padding, the allocation numbers and sizes (ages)
// and the candidates for the largest allocations.
void ScanLiveBlocks(const OomContext& ctx, OomDiagnosis* d,
                    std::vector<std::pair<uint64_t, size_t>>* seq_size,
                    std::vector<Candidate>* candidates) {
  size_t padding = 0;
  bool have_blocks = false;
  for (const ArenaView& a : ctx.arenas) {
    for (const BlockView& b : a.blocks) {
      if (b.state != BlockState::kAllocated) continue;
      have_blocks = true;
      padding += Sub(b.size, b.requested);
      if (b.alloc_seq != 0) seq_size->emplace_back(b.alloc_seq, b.size);
      if (ctx.live.empty()) {
        candidates->push_back({b.size, b.addr, a.stream, b.alloc_seq});
      }
    }
  }
  if (have_blocks) {
    d->padding_bytes = padding;
  } else {
    const Stat alloc = ctx.stats.allocated_bytes.All();
    const Stat req = ctx.stats.requested_bytes.All();
    if (req.current > 0 && alloc.current >= req.current) {
      d->padding_bytes = size_t(alloc.current - req.current);
    }
  }
  if (seq_size->empty()) {
    for (const LiveAllocation& l : ctx.live) {
      if (l.alloc_seq != 0) seq_size->emplace_back(l.alloc_seq, l.size);
    }
  }
  for (const LiveAllocation& l : ctx.live) {
    candidates->push_back({l.size, l.addr, l.stream, l.alloc_seq});
  }
}

// Which candidates are the ctx.top_allocations largest (ties: lower address);
// the stacks come from ctx.live.
void PickLargest(const OomContext& ctx,
                 const std::vector<Candidate>& candidates, OomDiagnosis* d) {
  const size_t top = std::min(ctx.top_allocations, candidates.size());
  std::vector<uint32_t> order(candidates.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
  std::partial_sort(order.begin(), order.begin() + top, order.end(),
                    [&](uint32_t x, uint32_t y) {
                      const Candidate &p = candidates[x], &q = candidates[y];
                      return p.size != q.size ? p.size > q.size
                                              : p.addr < q.addr;
                    });
  for (size_t i = 0; i < top; ++i) {
    if (!ctx.live.empty()) {
      d->largest.push_back(ctx.live[order[i]]);
    } else {
      const Candidate& c = candidates[order[i]];
      d->largest.push_back(
          LiveAllocation{c.addr, c.size, c.stream, c.seq, std::string()});
    }
  }
}

// Fragmentation: the gap and the effective gap, and their verdicts.
void JudgeFragmentation(const OomFacts& f, OomDiagnosis* d) {
  if (f.mapped_bytes > 0) {
    d->gap = 1.0 - Share(f.allocated_bytes, f.mapped_bytes);
    d->effective_gap =
        Share(d->stranded_bytes + d->padding_bytes, f.mapped_bytes);
  }
  d->gap_verdict = GapVerdictName(JudgeGap(d->gap));
  d->effective_verdict = GapVerdictName(JudgeGap(d->effective_gap));
}

// Across steps vs within a step: the persistent bytes from the categories, or
// estimated from the ages; the activations are the rest.
void SplitPersistent(const OomContext& ctx,
                     std::vector<std::pair<uint64_t, size_t>> seq_size,
                     OomDiagnosis* d) {
  if (ctx.categories.has_value()) {
    const MemoryCategories& c = *ctx.categories;
    d->categories_known = d->split_known = true;
    d->persistent_bytes =
        c.parameters + c.gradients + c.optimizer_state + c.other_persistent;
  } else if (EstimatePersistent(std::move(seq_size), &d->persistent_bytes)) {
    d->persistent_estimated = d->split_known = true;
  }
  if (d->split_known)
    d->activation_bytes = Sub(ctx.facts.allocated_bytes, d->persistent_bytes);
}

// The cause, most specific first.
void PickCause(const OomFacts& f, OomDiagnosis* d) {
  const size_t cap = f.limit_bytes != 0 ? f.limit_bytes : f.device_total_bytes;
  if (cap != 0 && f.rounded_bytes > cap) {
    d->cause = OomCause::kTooLarge;
  } else if (JudgeGap(d->effective_gap) == GapVerdict::kSevere) {
    d->cause = OomCause::kFragmentation;
  } else if (d->split_known) {
    d->cause = d->persistent_bytes >= d->activation_bytes
                   ? OomCause::kPersistent
                   : OomCause::kActivations;
  }
}

// Capacity notes: memory outside fragfree, a low limit, pending frees.
void AddCapacityNotes(const OomFacts& f, OomDiagnosis* d) {
  if (f.device_total_bytes > 0 &&
      Share(d->other_bytes, f.device_total_bytes) >= kOtherShare) {
    d->notes.push_back(absl::StrFormat(
        "%s (%.0f%% of the device) is in use outside fragfree: other "
        "processes, the CUDA context, or allocations that bypass fragfree. "
        "nvidia-smi shows who holds it.",
        FormatBytes(d->other_bytes),
        100 * Share(d->other_bytes, f.device_total_bytes)));
  }
  if (f.limit_bytes != 0 && f.device_total_bytes != 0 &&
      f.limit_bytes < f.device_total_bytes - f.device_total_bytes / 50) {
    d->notes.push_back(absl::StrFormat(
        "fragfree's memory limit is %s of the device's %s "
        "(per_process_memory_fraction / memory_limit_mb); raise it if the "
        "device has room.",
        FormatBytes(f.limit_bytes), FormatBytes(f.device_total_bytes)));
  }
  if (f.mapped_bytes > 0 && Share(d->pending_bytes, f.mapped_bytes) >= 0.05) {
    d->notes.push_back(absl::StrFormat(
        "%s is freed but still in use by other streams (record_stream / "
        "in-flight work); it returns when that work completes.",
        FormatBytes(d->pending_bytes)));
  }
}

// Notes that correct a misreading: a large gap that is not fragmentation,
// empty_cache, categories larger than this device's memory.
void AddMisreadingNotes(const OomFacts& f, OomDiagnosis* d) {
  if (JudgeGap(d->gap) == GapVerdict::kSevere &&
      JudgeGap(d->effective_gap) != GapVerdict::kSevere) {
    d->notes.push_back(absl::StrFormat(
        "The gap between allocated and reserved memory is %.1f%%, above the "
        "%.0f%% that usually means severe fragmentation, but for fragfree %s "
        "of the %s cached is whole free pages, which it remaps wherever a "
        "request needs them: not lost to fragmentation.",
        100 * d->gap, 100 * kGapSevere, FormatBytes(f.reclaimable_bytes),
        FormatBytes(f.cached_bytes)));
  }
  if (d->cause == OomCause::kFragmentation) {
    d->notes.push_back(
        "torch.cuda.empty_cache() will not help: fragfree already reclaimed "
        "every whole free page before failing; stranded bytes share pages "
        "with live blocks.");
  }
  if (d->categories_known && d->persistent_bytes > f.allocated_bytes) {
    d->notes.push_back(absl::StrFormat(
        "The categories given (%s) exceed the memory allocated on this device "
        "(%s): part of the state lives elsewhere (other devices, CPU).",
        FormatBytes(d->persistent_bytes), FormatBytes(f.allocated_bytes)));
  }
}

// Advice, in the order OomAdviceOrderText() states: the nearly free ones, then
// the branch of the cause (capacity, fragmentation, persistent state or
// activations; both when the split is unknown), each cheapest first, then the
// last resort.
void AddAdvice(const OomContext& ctx, OomDiagnosis* d) {
  AdviceBuilder advice(ctx, d);
  if (d->cause == OomCause::kTooLarge) {
    advice.Add("split_tensor", "capacity",
               absl::StrFormat("Split the %s tensor or shard it",
                               FormatBytes(ctx.facts.rounded_bytes)),
               "chunk the computation (e.g. the loss over the vocabulary in "
               "pieces) or shard the tensor across GPUs");
  }
  advice.Free();
  if (d->cause == OomCause::kFragmentation) advice.Fragmentation(ctx);
  if (!d->split_known) {
    advice.Add("batch1_experiment", "diagnose",
               "Run one step with batch size 1 to find the branch",
               "still out of memory: the persistent branch below; fits: the "
               "activation branch. Or fragfree.watch(model, optimizer).");
  }
  if (!d->split_known) {
    advice.Persistent();
    advice.Activations();
  } else if (d->persistent_bytes >= d->activation_bytes) {
    advice.Persistent();
  } else {
    advice.Activations();
  }
  if (d->cause != OomCause::kFragmentation &&
      JudgeGap(d->effective_gap) != GapVerdict::kLow) {
    advice.Fragmentation(ctx);
  }
  advice.Add("micro_batch", "last_resort",
             "Smaller micro-batch with gradient accumulation (last resort)",
             "loss = model(batch) / accum_steps; step every accum_steps -- "
             "small batches leave the GPU underused (lower MFU)");
}
}  // namespace

const char* OomAdviceOrderText() {
  return "nearly free fixes first, then the fixes for the cause, cheapest "
         "first, and a smaller batch last";
}

const char* OomCauseName(OomCause cause) {
  switch (cause) {
    case OomCause::kTooLarge:
      return "too_large";
    case OomCause::kFragmentation:
      return "fragmentation";
    case OomCause::kPersistent:
      return "persistent";
    case OomCause::kActivations:
      return "activations";
    case OomCause::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::string PyTorchFormatSize(size_t bytes) {
  if (bytes <= 1024) return absl::StrCat(bytes, " bytes");
  if (bytes <= kMiB) return absl::StrFormat("%.2f KiB", double(bytes) / kKiB);
  if (bytes <= kGiB) return absl::StrFormat("%.2f MiB", double(bytes) / kMiB);
  return absl::StrFormat("%.2f GiB", double(bytes) / kGiB);
}

std::string OomHeadline(const OomFacts& f) {
  std::string s =
      absl::StrCat("CUDA out of memory. Tried to allocate ",
                   PyTorchFormatSize(f.rounded_bytes != 0 ? f.rounded_bytes
                                                          : f.requested_bytes),
                   ". GPU ", f.device, " has a total capacity of ",
                   PyTorchFormatSize(f.device_total_bytes), " of which ",
                   PyTorchFormatSize(f.device_free_bytes), " is free. ");
  if (f.limit_bytes != 0 && f.limit_bytes < f.device_total_bytes) {
    absl::StrAppend(&s, PyTorchFormatSize(f.limit_bytes), " allowed; ");
  }
  absl::StrAppend(&s, "Of the allocated memory ",
                  PyTorchFormatSize(f.allocated_bytes),
                  " is allocated by fragfree, and ",
                  PyTorchFormatSize(Sub(f.mapped_bytes, f.allocated_bytes)),
                  " is reserved by fragfree but unallocated.");
  return s;
}

OomDiagnosis DiagnoseOom(const OomContext& ctx) {
  const OomFacts& f = ctx.facts;
  OomDiagnosis d;
  const size_t fragfree_pages = f.mapped_bytes + f.idle_bytes;
  d.other_bytes =
      Sub(Sub(f.device_total_bytes, f.device_free_bytes), fragfree_pages);
  d.pending_bytes = Sub(f.active_bytes, f.allocated_bytes);
  d.stranded_bytes = Sub(f.cached_bytes, f.reclaimable_bytes);
  std::vector<std::pair<uint64_t, size_t>> seq_size;
  std::vector<Candidate> candidates;
  ScanLiveBlocks(ctx, &d, &seq_size, &candidates);
  PickLargest(ctx, candidates, &d);
  JudgeFragmentation(f, &d);
  SplitPersistent(ctx, std::move(seq_size), &d);
  PickCause(f, &d);
  AddCapacityNotes(f, &d);
  AddMisreadingNotes(f, &d);
  AddAdvice(ctx, &d);
  d.summary = CauseSentence(ctx, d);
  return d;
}

std::string OomReportText(const OomContext& ctx) {
  return OomReportText(ctx, DiagnoseOom(ctx));
}

namespace {

// --- OomReportText's sections, in the order they are printed. ---

// The request, the device and where fragfree's memory is.
void AppendTextFigures(const OomContext& ctx, const OomDiagnosis& d,
                       std::string& s) {
  const OomFacts& f = ctx.facts;
  absl::StrAppendFormat(&s, "\n\nfragfree OOM report: device %d, stream %#x\n",
                        f.device, f.stream);
  if (!f.reason.empty()) absl::StrAppend(&s, "  why       ", f.reason, "\n");
  absl::StrAppendFormat(&s, "  request   %s requested, %s after rounding",
                        FormatBytes(f.requested_bytes),
                        FormatBytes(f.rounded_bytes));
  if (f.pages_needed != 0) {
    absl::StrAppendFormat(&s, "; %d more pages needed", f.pages_needed);
  }
  absl::StrAppendFormat(
      &s,
      "\n  device    %s total, %s free; fragfree limit %s\n"
      "  fragfree  %s mapped (reserved) = %s allocated + %s pending other "
      "streams + %s cached free\n"
      "            cached free: %s reclaimable (whole free pages), %s stranded "
      "in partial pages; %s idle pages\n"
      "            rounding padding %s (allocated - requested)\n"
      "  other     %s in use outside fragfree (other processes, CUDA context, "
      "other allocators)\n\n",
      FormatBytes(f.device_total_bytes), FormatBytes(f.device_free_bytes),
      FormatBytes(f.limit_bytes), FormatBytes(f.mapped_bytes),
      FormatBytes(f.allocated_bytes), FormatBytes(d.pending_bytes),
      FormatBytes(f.cached_bytes), FormatBytes(f.reclaimable_bytes),
      FormatBytes(d.stranded_bytes), FormatBytes(f.idle_bytes),
      FormatBytes(d.padding_bytes), FormatBytes(d.other_bytes));
}

// The gap and fragfree's effective gap, with their verdicts.
void AppendTextFragmentation(const OomDiagnosis& d, std::string& s) {
  absl::StrAppendFormat(
      &s,
      "Fragmentation: gap %.1f%% (1 - allocated / reserved): %s (%s)\n"
      "  fragfree's effective gap %.1f%% ((stranded + padding) / reserved): "
      "%s; reclaimable pages are not lost, fragfree remaps them\n\n",
      100 * d.gap, d.gap_verdict, GapRuleText(), 100 * d.effective_gap,
      d.effective_verdict);
}

// The cause, and what live memory is made of when that is known.
void AppendTextDiagnosis(const OomContext& ctx, const OomDiagnosis& d,
                         std::string& s) {
  const OomFacts& f = ctx.facts;
  absl::StrAppend(&s, "Diagnosis (", OomCauseName(d.cause), "): ", d.summary,
                  "\n");
  if (d.split_known) {
    absl::StrAppendFormat(
        &s,
        "  alive across steps (parameters, gradients, optimizer state): %s "
        "(%.0f%% of allocated)%s\n",
        FormatBytes(d.persistent_bytes),
        100 * Share(d.persistent_bytes, f.allocated_bytes),
        d.persistent_estimated ? " [estimate]" : "");
    if (d.categories_known) {
      const MemoryCategories& c = *ctx.categories;
      absl::StrAppendFormat(
          &s,
          "    parameters %s, gradients %s, optimizer state %s, other "
          "persistent %s\n",
          FormatBytes(c.parameters), FormatBytes(c.gradients),
          FormatBytes(c.optimizer_state), FormatBytes(c.other_persistent));
    }
    absl::StrAppendFormat(
        &s,
        "  living within a step (activations ~ allocated - persistent): %s "
        "(%.0f%%)\n",
        FormatBytes(d.activation_bytes),
        100 * Share(d.activation_bytes, f.allocated_bytes));
    if (d.persistent_estimated) {
      absl::StrAppend(
          &s,
          "  [estimate] no categories were given: the oldest live allocations "
          "(before the largest gap in allocation order) count as persistent, "
          "the newest as this step's. fragfree.watch(model, optimizer) gives "
          "exact figures.\n");
    }
  }
}

// The notes and the advice, in order.
void AppendTextAdvice(const OomDiagnosis& d, std::string& s) {
  if (!d.notes.empty()) {
    absl::StrAppend(&s, "\nNotes:\n");
    for (const std::string& n : d.notes) absl::StrAppend(&s, "  - ", n, "\n");
  }
  absl::StrAppend(&s, "\nWhat to try, in order (", OomAdviceOrderText(),
                  "):\n");
  for (size_t i = 0; i < d.advice.size(); ++i) {
    const OomAdvice& a = d.advice[i];
    absl::StrAppendFormat(&s, "  %d. [%s] %s\n       %s\n", i + 1, a.branch,
                          a.title, a.how);
  }
  if (!d.skipped.empty()) {
    absl::StrAppend(&s, "  Already on, not suggested: ",
                    absl::StrJoin(d.skipped, ", "), "\n");
  }
}

// The largest live allocations, with their stacks.
void AppendTextLargest(const OomDiagnosis& d, std::string& s) {
  if (!d.largest.empty()) {
    absl::StrAppend(&s, "\nLargest live allocations:\n");
    for (size_t i = 0; i < d.largest.size(); ++i) {
      const LiveAllocation& l = d.largest[i];
      absl::StrAppendFormat(&s, "  %2d. %10s at %#x, stream %#x", i + 1,
                            FormatBytes(l.size), l.addr, l.stream);
      if (l.alloc_seq != 0) absl::StrAppendFormat(&s, ", seq %d", l.alloc_seq);
      absl::StrAppend(&s, "\n");
      for (absl::string_view line : absl::StrSplit(l.stack, '\n')) {
        if (!line.empty()) absl::StrAppend(&s, "        ", line, "\n");
      }
    }
  }
}

}  // namespace

std::string OomReportText(const OomContext& ctx, const OomDiagnosis& d) {
  std::string s = OomHeadline(ctx.facts);
  AppendTextFigures(ctx, d, s);
  AppendTextFragmentation(d, s);
  AppendTextDiagnosis(ctx, d, s);
  AppendTextAdvice(d, s);
  AppendTextLargest(d, s);
  return s;
}

}  // namespace fragfree
