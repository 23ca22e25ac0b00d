#include "allocator/obs/pickle.h"

#include <cstring>

namespace fragfree {
namespace {

void AppendLittleEndian(uint64_t v, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(char((v >> (8 * i)) & 0xff));
}

void AppendInt(int64_t i, std::string* out) {
  if (i >= 0 && i < 256) {
    out->push_back('K');  // BININT1
    out->push_back(char(i));
  } else if (i >= 0 && i < 65536) {
    out->push_back('M');  // BININT2
    AppendLittleEndian(uint64_t(i), 2, out);
  } else if (i >= INT32_MIN && i <= INT32_MAX) {
    out->push_back('J');  // BININT
    AppendLittleEndian(uint64_t(uint32_t(int32_t(i))), 4, out);
  } else {
    out->push_back('\x8a');  // LONG1: little-endian two's complement
    out->push_back(8);
    AppendLittleEndian(uint64_t(i), 8, out);
  }
}

void Append(const Value& v, std::string* out) {
  switch (v.kind()) {
    case Value::Kind::kNull:
      out->push_back('N');
      return;
    case Value::Kind::kBool:
      out->push_back(v.int_value() ? '\x88' : '\x89');
      return;
    case Value::Kind::kInt:
      AppendInt(v.int_value(), out);
      return;
    case Value::Kind::kFloat: {
      out->push_back('G');  // BINFLOAT, big-endian
      uint64_t bits;
      double d = v.float_value();
      memcpy(&bits, &d, 8);
      for (int i = 7; i >= 0; --i)
        out->push_back(char((bits >> (8 * i)) & 0xff));
      return;
    }
    case Value::Kind::kString:
      out->push_back('X');  // BINUNICODE
      AppendLittleEndian(v.string_value().size(), 4, out);
      *out += v.string_value();
      return;
    case Value::Kind::kTuple:
      out->push_back('(');  // MARK
      for (const auto& item : v.items()) Append(item.second, out);
      out->push_back('t');  // TUPLE
      return;
    case Value::Kind::kList:
      out->push_back(']');  // EMPTY_LIST
      if (v.items().empty()) return;
      out->push_back('(');
      for (const auto& item : v.items()) Append(item.second, out);
      out->push_back('e');  // APPENDS
      return;
    case Value::Kind::kDict:
      out->push_back('}');  // EMPTY_DICT
      if (v.items().empty()) return;
      out->push_back('(');
      for (const auto& [key, item] : v.items()) {
        Append(Value::String(key), out);
        Append(item, out);
      }
      out->push_back('u');  // SETITEMS
      return;
  }
}

}  // namespace

std::string ToPickle(const Value& value) {
  std::string out = "\x80\x02";  // PROTO 2
  Append(value, &out);
  out.push_back('.');  // STOP
  return out;
}

}  // namespace fragfree
