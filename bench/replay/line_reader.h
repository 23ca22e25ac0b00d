// LineReader: reads a text file line by line, gzip'd or not (zlib detects
// which), or lines from a string (for tests). Reports I/O and decompression
// errors (a truncated .gz) through status() with the file name and the line
// reached. Thread-safety: not thread-safe; one reader per thread.
#ifndef FRAGFREE_BENCH_REPLAY_LINE_READER_H_
#define FRAGFREE_BENCH_REPLAY_LINE_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace fragfree::replay {

class LineReader {
 public:
  // The longest line accepted; a longer one (a binary file, say) is an error.
  static constexpr size_t kMaxLineBytes = size_t{1} << 20;

  static absl::StatusOr<std::unique_ptr<LineReader>> OpenFile(
      const std::string& path);
  static std::unique_ptr<LineReader> FromString(std::string name,
                                                std::string content);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Stores the next line (without its '\n' or "\r\n") and returns true; returns
  // false at the end of the input or on an error (then status() says which).
  // The view is valid until the next call.
  bool Next(std::string_view* line);

  // 1-based number of the line last returned by Next.
  uint64_t line_number() const { return line_number_; }
  const std::string& name() const { return name_; }
  absl::Status status() const { return status_; }
  // True when the last line returned had no terminating newline.
  bool last_line_unterminated() const { return unterminated_; }

 private:
  explicit LineReader(std::string name) : name_(std::move(name)) {}
  // Reads more input into buf_; false at end of input or on error.
  bool Fill();

  std::string name_;
  void* gz_ = nullptr;  // gzFile, kept opaque to keep zlib.h out of this header
  std::string buf_;
  size_t begin_ = 0;  // start of unread data in buf_
  size_t end_ = 0;    // end of valid data in buf_
  bool eof_ = false;
  bool unterminated_ = false;
  uint64_t line_number_ = 0;
  absl::Status status_;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_LINE_READER_H_
