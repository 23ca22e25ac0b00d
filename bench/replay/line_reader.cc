// Implementation of line_reader.h on zlib's gzread, which reads plain files
// transparently.
// Thread-safety: see line_reader.h.
#include "bench/replay/line_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace fragfree::replay {
namespace {

constexpr size_t kChunkBytes = size_t{1} << 20;

}  // namespace

absl::StatusOr<std::unique_ptr<LineReader>> LineReader::OpenFile(
    const std::string& path) {
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) {
    const int err = errno;
    return absl::NotFoundError(absl::StrCat(
        path,
        ": cannot open: ", err != 0 ? std::strerror(err) : "out of memory"));
  }
  gzbuffer(gz, 256 * 1024);
  std::unique_ptr<LineReader> reader(new LineReader(path));
  reader->gz_ = gz;
  reader->buf_.resize(kChunkBytes);
  return reader;
}

std::unique_ptr<LineReader> LineReader::FromString(std::string name,
                                                   std::string content) {
  std::unique_ptr<LineReader> reader(new LineReader(std::move(name)));
  reader->end_ = content.size();
  reader->buf_ = std::move(content);
  reader->eof_ = true;
  return reader;
}

LineReader::~LineReader() {
  if (gz_ != nullptr) gzclose(static_cast<gzFile>(gz_));
}

bool LineReader::Fill() {
  if (eof_ || !status_.ok()) return false;
  // Compact: move the unread tail to the front.
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  if (end_ == buf_.size()) {
    if (buf_.size() >= kMaxLineBytes + kChunkBytes) {
      status_ = absl::InvalidArgumentError(
          absl::StrCat(name_, ":", line_number_ + 1, ": line longer than ",
                       kMaxLineBytes, " bytes (not a text trace?)"));
      return false;
    }
    buf_.resize(buf_.size() + kChunkBytes);
  }
  gzFile gz = static_cast<gzFile>(gz_);
  const int n =
      gzread(gz, buf_.data() + end_, static_cast<unsigned>(buf_.size() - end_));
  int errnum = Z_OK;
  const char* message = gzerror(gz, &errnum);
  // On a truncated stream zlib still returns what it could decompress (with
  // Z_BUF_ERROR pending), then 0: report the error once that data is used up,
  // so the line number points at the cut.
  if (n < 0 || (n == 0 && errnum != Z_OK && errnum != Z_STREAM_END)) {
    const char* what =
        errnum == Z_BUF_ERROR
            ? "unexpected end of compressed data (truncated .gz?)"
            : message;
    if (errnum == Z_ERRNO) what = std::strerror(errno);
    status_ = absl::DataLossError(
        absl::StrCat(name_, ":", line_number_ + 1, ": read error: ", what));
    return false;
  }
  if (n == 0) {
    eof_ = true;
    return false;
  }
  end_ += static_cast<size_t>(n);
  return true;
}

bool LineReader::Next(std::string_view* line) {
  if (!status_.ok()) return false;
  size_t scan_from = begin_;
  while (true) {
    const void* nl =
        std::memchr(buf_.data() + scan_from, '\n', end_ - scan_from);
    if (nl != nullptr) {
      const size_t pos = static_cast<const char*>(nl) - buf_.data();
      size_t stop = pos;
      if (stop > begin_ && buf_[stop - 1] == '\r') --stop;
      *line = std::string_view(buf_.data() + begin_, stop - begin_);
      begin_ = pos + 1;
      ++line_number_;
      unterminated_ = false;
      return true;
    }
    const size_t scanned = end_ - begin_;
    if (!Fill()) {
      if (!status_.ok()) return false;
      if (begin_ == end_) return false;  // clean end of input
      size_t stop = end_;
      if (buf_[stop - 1] == '\r') --stop;
      *line = std::string_view(buf_.data() + begin_, stop - begin_);
      begin_ = end_;
      ++line_number_;
      unterminated_ = true;
      return true;
    }
    scan_from = begin_ + scanned;  // Fill moved the unread data to the front
  }
}

}  // namespace fragfree::replay
