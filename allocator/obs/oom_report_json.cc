// OomReportJson: the OOM report as one JSON object, with the same content as
// the text (docs/oom.md lists the fields): the facts, the device picture, the
// fragmentation verdict, the diagnosis, the advice, the largest allocations,
// the bucket advice and every statistic.
// Thread-safety: pure functions over values.
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/base/json.h"
#include "allocator/obs/oom_report.h"

namespace fragfree {
namespace {

std::string Quoted(std::string_view s) {
  return absl::StrCat("\"", JsonEscape(s), "\"");
}

}  // namespace

std::string OomReportJson(const OomContext& ctx) {
  return OomReportJson(ctx, DiagnoseOom(ctx));
}

std::string OomReportJson(const OomContext& ctx, const OomDiagnosis& d) {
  const OomFacts& f = ctx.facts;
  std::string s = absl::StrCat("{\"message\":", Quoted(OomHeadline(f)));
  absl::StrAppendFormat(
      &s,
      ",\"device\":%d,\"stream\":%d,\"requested_bytes\":%d,\"rounded_bytes\":%"
      "d,\"limit_bytes\":%d,\"device_total_bytes\":%d,\"device_free_bytes\":%"
      "d,\"mapped_bytes\":%d,\"allocated_bytes\":%d,\"active_bytes\":%d,"
      "\"cached_bytes\":%d,\"reclaimable_bytes\":%d,\"idle_bytes\":%d,"
      "\"pages_needed\":%d,\"reason\":%s,\"other_bytes\":%d,"
      "\"pending_bytes\":%d,\"stranded_bytes\":%d,\"padding_bytes\":%d",
      f.device, f.stream, f.requested_bytes, f.rounded_bytes, f.limit_bytes,
      f.device_total_bytes, f.device_free_bytes, f.mapped_bytes,
      f.allocated_bytes, f.active_bytes, f.cached_bytes, f.reclaimable_bytes,
      f.idle_bytes, f.pages_needed, Quoted(f.reason), d.other_bytes,
      d.pending_bytes, d.stranded_bytes, d.padding_bytes);
  absl::StrAppendFormat(
      &s,
      ",\"fragmentation\":{\"gap\":%.6f,\"gap_verdict\":\"%s\","
      "\"effective_gap\":%.6f,\"effective_verdict\":\"%s\",\"rule\":%s}",
      d.gap, d.gap_verdict, d.effective_gap, d.effective_verdict,
      Quoted(GapRuleText()));
  absl::StrAppendFormat(
      &s,
      ",\"diagnosis\":{\"cause\":\"%s\",\"summary\":%s,\"categories_known\":%"
      "s,\"persistent_estimated\":%s,\"split_known\":%s,"
      "\"persistent_bytes\":%d,\"activation_bytes\":%d,\"categories\":",
      OomCauseName(d.cause), Quoted(d.summary),
      d.categories_known ? "true" : "false",
      d.persistent_estimated ? "true" : "false",
      d.split_known ? "true" : "false", d.persistent_bytes, d.activation_bytes);
  if (ctx.categories.has_value()) {
    const MemoryCategories& c = *ctx.categories;
    absl::StrAppendFormat(&s,
                          "{\"parameters\":%d,\"gradients\":%d,\"optimizer_"
                          "state\":%d,\"other_persistent\":%d}}",
                          c.parameters, c.gradients, c.optimizer_state,
                          c.other_persistent);
  } else {
    s += "null}";
  }
  s += ",\"notes\":[";
  for (size_t i = 0; i < d.notes.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", Quoted(d.notes[i]));
  }
  absl::StrAppend(&s, "],\"advice_order\":", Quoted(OomAdviceOrderText()),
                  ",\"advice\":[");
  for (size_t i = 0; i < d.advice.size(); ++i) {
    const OomAdvice& a = d.advice[i];
    absl::StrAppend(&s, i ? "," : "", "{\"id\":", Quoted(a.id),
                    ",\"branch\":", Quoted(a.branch),
                    ",\"title\":", Quoted(a.title), ",\"how\":", Quoted(a.how),
                    "}");
  }
  s += "],\"skipped\":[";
  for (size_t i = 0; i < d.skipped.size(); ++i) {
    absl::StrAppend(&s, i ? "," : "", Quoted(d.skipped[i]));
  }
  s += "],\"largest_allocations\":[";
  for (size_t i = 0; i < d.largest.size(); ++i) {
    const LiveAllocation& l = d.largest[i];
    absl::StrAppendFormat(&s,
                          "%s{\"addr\":%d,\"size\":%d,\"stream\":%d,\"alloc_"
                          "seq\":%d,\"stack\":%s}",
                          i ? "," : "", l.addr, l.size, l.stream, l.alloc_seq,
                          Quoted(l.stack));
  }
  s += "],\"bucket_advice\":";
  s += ctx.bucket_advice.has_value() ? BucketAdviceToJson(*ctx.bucket_advice)
                                     : "null";
  absl::StrAppend(&s, ",\"stats\":", StatsToJson(ctx.stats), "}");
  return s;
}

}  // namespace fragfree
