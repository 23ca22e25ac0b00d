#include "allocator/obs/value.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/base/json.h"

namespace fragfree {

Value Value::Float(double d) {
  Value v(Kind::kFloat, 0);
  v.float_ = d;
  return v;
}

Value Value::String(std::string s) {
  Value v(Kind::kString, 0);
  v.string_ = std::move(s);
  return v;
}

namespace {
void AppendJson(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNull:
      *out += "null";
      return;
    case Value::Kind::kBool:
      *out += v.int_value() ? "true" : "false";
      return;
    case Value::Kind::kInt:
      absl::StrAppend(out, v.int_value());
      return;
    case Value::Kind::kFloat:
      absl::StrAppendFormat(out, "%.17g", v.float_value());
      return;
    case Value::Kind::kString:
      *out += JsonQuote(v.string_value());
      return;
    case Value::Kind::kList:
    case Value::Kind::kTuple:
    case Value::Kind::kDict: {
      const bool dict = v.kind() == Value::Kind::kDict;
      *out += dict ? '{' : '[';
      bool first = true;
      for (const auto& [key, item] : v.items()) {
        if (!first) *out += ',';
        first = false;
        if (dict) absl::StrAppend(out, JsonQuote(key), ":");
        AppendJson(item, out);
      }
      *out += dict ? '}' : ']';
      return;
    }
  }
}
}  // namespace

std::string ToJson(const Value& value) {
  std::string out;
  AppendJson(value, &out);
  return out;
}

}  // namespace fragfree
