// Value: a small tree of null / bool / int / float / string / list / tuple /
// dict values, the common form of fragfree's structured output (snapshots),
// written as JSON or as a pickle that PyTorch's memory viewer reads
// (obs/pickle.h). Dict keys keep their insertion order. Thread-safety: a value
// type.
#ifndef FRAGFREE_ALLOCATOR_OBS_VALUE_H_
#define FRAGFREE_ALLOCATOR_OBS_VALUE_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace fragfree {

class Value {
 public:
  enum class Kind { kNull, kBool, kInt, kFloat, kString, kList, kTuple, kDict };

  Value() = default;
  static Value Bool(bool b) { return Value(Kind::kBool, b ? 1 : 0); }
  static Value Int(int64_t i) { return Value(Kind::kInt, i); }
  static Value Float(double d);
  static Value String(std::string s);
  static Value List() { return Value(Kind::kList, 0); }
  static Value Tuple() { return Value(Kind::kTuple, 0); }
  static Value Dict() { return Value(Kind::kDict, 0); }

  // REQUIRES: a list or tuple.
  Value& Append(Value v) {
    items_.emplace_back(std::string(), std::move(v));
    return items_.back().second;
  }
  // REQUIRES: a dict. Returns the value stored.
  Value& Set(std::string key, Value v) {
    items_.emplace_back(std::move(key), std::move(v));
    return items_.back().second;
  }

  Kind kind() const { return kind_; }
  int64_t int_value() const { return int_; }
  double float_value() const { return float_; }
  const std::string& string_value() const { return string_; }
  // (key, value) for dicts; ("", value) for lists and tuples.
  const std::vector<std::pair<std::string, Value>>& items() const {
    return items_;
  }

 private:
  Value(Kind kind, int64_t i) : kind_(kind), int_(i) {}
  Kind kind_ = Kind::kNull;
  int64_t int_ = 0;
  double float_ = 0;
  std::string string_;
  std::vector<std::pair<std::string, Value>> items_;
};

std::string ToJson(const Value& value);

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_OBS_VALUE_H_
