#include "allocator/base/check.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace fragfree::internal {
namespace {
void WriteString(const char* s) {
  ssize_t ignored = write(STDERR_FILENO, s, strlen(s));
  (void)ignored;
}
}  // namespace

void CheckFailed(const char* file, int line, const char* condition,
                 const char* message) {
  char line_text[16];
  int n = 0;
  char digits[16];
  do {
    digits[n++] = char('0' + line % 10);
    line /= 10;
  } while (line > 0 && n < 15);
  for (int i = 0; i < n; ++i) line_text[i] = digits[n - 1 - i];
  line_text[n] = '\0';
  WriteString("fragfree: internal check failed at ");
  WriteString(file);
  WriteString(":");
  WriteString(line_text);
  WriteString(": ");
  WriteString(condition);
  WriteString(": ");
  WriteString(message);
  WriteString("\n");
  abort();
}

}  // namespace fragfree::internal
