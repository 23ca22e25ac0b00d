// HTML text helpers shared by the HTML writers (the OOM report's page and the
// replay tool's report). Header-only. Thread-safety: pure functions.
#ifndef FRAGFREE_ALLOCATOR_BASE_HTML_H_
#define FRAGFREE_ALLOCATOR_BASE_HTML_H_

#include <string>
#include <string_view>

namespace fragfree {

// `s` safe as HTML text and inside a quoted attribute value: & < > " and '
// become character references; everything else is unchanged.
inline std::string HtmlEscape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_HTML_H_
