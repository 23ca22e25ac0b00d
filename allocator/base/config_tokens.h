// The one tokenizer of PyTorch-style configuration strings
// (`key:value,key:[k:v,...]`): FRAGFREE_CONF (allocator/options.cc) and the
// replay tool's PYTORCH_CUDA_ALLOC_CONF (bench/replay/pytorch_alloc_config.cc)
// both parse its tokens. Header-only so that every layer, and code that may not
// link fragfree_base (shim/preload.cc's constructor), can use it.
// Thread-safety: pure functions.
#ifndef FRAGFREE_ALLOCATOR_BASE_CONFIG_TOKENS_H_
#define FRAGFREE_ALLOCATOR_BASE_CONFIG_TOKENS_H_

#include <string>
#include <string_view>
#include <vector>

namespace fragfree {

// Whether `c` is a token by itself: one of , : [ ].
constexpr bool IsConfigPunctuation(char c) {
  return c == ',' || c == ':' || c == '[' || c == ']';
}

// Splits `conf` into tokens: maximal runs of characters that are neither blank
// (isspace) nor punctuation, and each punctuation character on its own. Blanks
// only separate words; no token is empty.
inline std::vector<std::string> TokenizeConfig(std::string_view conf) {
  std::vector<std::string> tokens;
  std::string word;
  auto flush = [&] {
    if (!word.empty()) tokens.push_back(std::move(word));
    word.clear();
  };
  for (char c : conf) {
    if (IsConfigPunctuation(c)) {
      flush();
      tokens.emplace_back(1, c);
    } else if (c == ' ' || (c >= '\t' && c <= '\r')) {  // isspace, "C" locale
      flush();
    } else {
      word.push_back(c);
    }
  }
  flush();
  return tokens;
}

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_BASE_CONFIG_TOKENS_H_
