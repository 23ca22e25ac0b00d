// A small JSON reader for the adapter (csrc/): parses what libfragfree's
// ff_snapshot_json writes into a Json tree, for BuildSnapshot, its only user
// (snapshot_builder.h says why snapshots, and nothing else, come as JSON).
// Thread-safety: a reader per call; Json is a value type.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace fragfree_native {

struct Json {
  enum Type { kNull, kBool, kNumber, kString, kArray, kObject };
  Type type = kNull;
  bool boolean = false;
  bool is_int = false;
  int64_t integer = 0;
  double number = 0;
  std::string str;
  std::vector<Json> array;
  std::vector<std::pair<std::string, Json>> object;

  const Json* get(std::string_view key) const {
    if (type != kObject) return nullptr;
    for (const auto& kv : object) {
      if (kv.first == key) return &kv.second;
    }
    return nullptr;
  }
  int64_t as_int(int64_t fallback = 0) const {
    if (type == kNumber) return is_int ? integer : static_cast<int64_t>(number);
    if (type == kBool) return boolean ? 1 : 0;
    return fallback;
  }
  int64_t int_at(std::string_view key, int64_t fallback = 0) const {
    const Json* v = get(key);
    return v ? v->as_int(fallback) : fallback;
  }
  std::string str_at(std::string_view key) const {
    const Json* v = get(key);
    return (v && v->type == kString) ? v->str : std::string();
  }
};

class JsonReader {
 public:
  explicit JsonReader(std::string_view text)
      : p_(text.data()), end_(text.data() + text.size()) {}

  bool Parse(Json* out) {
    if (!Value(out)) return false;
    Skip();
    return p_ == end_;
  }

 private:
  void Skip() {
    while (p_ < end_ && std::isspace(static_cast<unsigned char>(*p_))) ++p_;
  }
  bool Literal(const char* word) {
    size_t n = std::strlen(word);
    if (static_cast<size_t>(end_ - p_) < n || std::memcmp(p_, word, n) != 0)
      return false;
    p_ += n;
    return true;
  }
  static void AppendUtf8(std::string* s, unsigned cp) {
    if (cp < 0x80) {
      s->push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      s->push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      s->push_back(static_cast<char>(0xE0 | (cp >> 12)));
      s->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      s->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }
  bool String(std::string* s) {
    if (p_ >= end_ || *p_ != '"') return false;
    ++p_;
    while (p_ < end_ && *p_ != '"') {
      char c = *p_++;
      if (c != '\\') {
        s->push_back(c);
        continue;
      }
      if (p_ >= end_) return false;
      char e = *p_++;
      switch (e) {
        case '"':
          s->push_back('"');
          break;
        case '\\':
          s->push_back('\\');
          break;
        case '/':
          s->push_back('/');
          break;
        case 'b':
          s->push_back('\b');
          break;
        case 'f':
          s->push_back('\f');
          break;
        case 'n':
          s->push_back('\n');
          break;
        case 'r':
          s->push_back('\r');
          break;
        case 't':
          s->push_back('\t');
          break;
        case 'u': {
          if (end_ - p_ < 4) return false;
          unsigned cp = 0;
          for (int i = 0; i < 4; ++i) {
            char h = *p_++;
            cp <<= 4;
            if (h >= '0' && h <= '9')
              cp |= h - '0';
            else if (h >= 'a' && h <= 'f')
              cp |= h - 'a' + 10;
            else if (h >= 'A' && h <= 'F')
              cp |= h - 'A' + 10;
            else
              return false;
          }
          AppendUtf8(s, cp);
          break;
        }
        default:
          return false;
      }
    }
    if (p_ >= end_) return false;
    ++p_;  // closing quote
    return true;
  }
  bool Number(Json* out) {
    const char* start = p_;
    bool is_int = true;
    if (p_ < end_ && (*p_ == '-' || *p_ == '+')) ++p_;
    while (p_ < end_ &&
           (std::isdigit(static_cast<unsigned char>(*p_)) || *p_ == '.' ||
            *p_ == 'e' || *p_ == 'E' || *p_ == '-' || *p_ == '+')) {
      if (*p_ == '.' || *p_ == 'e' || *p_ == 'E') is_int = false;
      ++p_;
    }
    if (p_ == start) return false;
    std::string text(start, p_);
    out->type = Json::kNumber;
    out->is_int = is_int;
    if (is_int) {
      errno = 0;
      if (text[0] == '-') {
        out->integer = std::strtoll(text.c_str(), nullptr, 10);
      } else {
        out->integer =
            static_cast<int64_t>(std::strtoull(text.c_str(), nullptr, 10));
      }
      out->number = static_cast<double>(out->integer);
    } else {
      out->number = std::strtod(text.c_str(), nullptr);
      out->integer = static_cast<int64_t>(out->number);
    }
    return true;
  }
  bool Value(Json* out) {
    Skip();
    if (p_ >= end_) return false;
    char c = *p_;
    if (c == '{') {
      ++p_;
      out->type = Json::kObject;
      Skip();
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        return true;
      }
      while (true) {
        Skip();
        std::string key;
        if (!String(&key)) return false;
        Skip();
        if (p_ >= end_ || *p_ != ':') return false;
        ++p_;
        Json value;
        if (!Value(&value)) return false;
        out->object.emplace_back(std::move(key), std::move(value));
        Skip();
        if (p_ < end_ && *p_ == ',') {
          ++p_;
          continue;
        }
        if (p_ < end_ && *p_ == '}') {
          ++p_;
          return true;
        }
        return false;
      }
    }
    if (c == '[') {
      ++p_;
      out->type = Json::kArray;
      Skip();
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        return true;
      }
      while (true) {
        Json value;
        if (!Value(&value)) return false;
        out->array.push_back(std::move(value));
        Skip();
        if (p_ < end_ && *p_ == ',') {
          ++p_;
          continue;
        }
        if (p_ < end_ && *p_ == ']') {
          ++p_;
          return true;
        }
        return false;
      }
    }
    if (c == '"') {
      out->type = Json::kString;
      return String(&out->str);
    }
    if (Literal("true")) {
      out->type = Json::kBool;
      out->boolean = true;
      return true;
    }
    if (Literal("false")) {
      out->type = Json::kBool;
      return true;
    }
    if (Literal("null")) return true;
    return Number(out);
  }

  const char* p_;
  const char* end_;
};

}  // namespace fragfree_native
