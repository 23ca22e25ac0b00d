// Tests for bench/replay/csv_fields.h and line_reader.h.
// Thread-safety: single-threaded tests.
#include "bench/replay/csv_fields.h"

#include <string>

#include "bench/replay/line_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

TEST(CsvFieldsTest, SplitsAndTrims) {
  std::string_view f[4];
  EXPECT_EQ(SplitCsv(" a , b,c ", f, 4), 3u);
  EXPECT_EQ(f[0], "a");
  EXPECT_EQ(f[1], "b");
  EXPECT_EQ(f[2], "c");
  EXPECT_EQ(SplitCsv("", f, 4), 1u);
  EXPECT_EQ(f[0], "");
  EXPECT_EQ(SplitCsv("1,2,3,4,5,6", f, 4), 6u);  // counts beyond capacity
  EXPECT_EQ(f[3], "4");
}

TEST(CsvFieldsTest, ParsesNumbersStrictly) {
  uint64_t u = 0;
  int64_t i = 0;
  EXPECT_TRUE(ParseDecimalU64("18446744073709551615", &u));
  EXPECT_EQ(u, UINT64_MAX);
  EXPECT_FALSE(ParseDecimalU64("18446744073709551616", &u));  // overflow
  EXPECT_FALSE(ParseDecimalU64("-1", &u));
  EXPECT_FALSE(ParseDecimalU64("+1", &u));
  EXPECT_FALSE(ParseDecimalU64("12a", &u));
  EXPECT_FALSE(ParseDecimalU64("", &u));
  EXPECT_TRUE(ParseDecimalI64("-5", &i));
  EXPECT_EQ(i, -5);
  EXPECT_TRUE(ParseHexU64("0x7F", &u));
  EXPECT_EQ(u, 0x7fu);
  EXPECT_TRUE(ParseHexU64("ff", &u));
  EXPECT_EQ(u, 0xffu);
  EXPECT_FALSE(ParseHexU64("0x", &u));
  EXPECT_FALSE(ParseHexU64("0xg", &u));
}

TEST(CsvFieldsTest, MapsColumns) {
  absl::StatusOr<std::vector<size_t>> m = MapColumns({"b", "a"}, {"a", "b"});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(*m, (std::vector<size_t>{1, 0}));
  EXPECT_FALSE(MapColumns({"a"}, {"a", "b"}).ok());
  EXPECT_FALSE(MapColumns({"a", "b", "c"}, {"a", "b"}).ok());
  EXPECT_FALSE(MapColumns({"a", "a", "b"}, {"a", "b"}).ok());
}

TEST(LineReaderTest, SplitsLinesAndCountsThem) {
  auto r = LineReader::FromString("x", "one\r\ntwo\n\nthree");
  std::string_view line;
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "one");
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "two");
  EXPECT_FALSE(r->last_line_unterminated());
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(r->Next(&line));
  EXPECT_EQ(line, "three");
  EXPECT_EQ(r->line_number(), 4u);
  EXPECT_TRUE(r->last_line_unterminated());
  EXPECT_FALSE(r->Next(&line));
  EXPECT_TRUE(r->status().ok());
}

TEST(LineReaderTest, ReadsLinesAcrossBufferBoundaries) {
  std::string text;
  for (int i = 0; i < 300000; ++i) text += std::to_string(i) + "\n";
  const std::string path = ::testing::TempDir() + "/lines.txt";
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
  absl::StatusOr<std::unique_ptr<LineReader>> r = LineReader::OpenFile(path);
  ASSERT_TRUE(r.ok());
  std::string_view line;
  int expected = 0;
  while ((*r)->Next(&line)) {
    ASSERT_EQ(line, std::to_string(expected)) << "line " << expected + 1;
    ++expected;
  }
  EXPECT_EQ(expected, 300000);
  EXPECT_TRUE((*r)->status().ok());
}

TEST(LineReaderTest, RejectsEndlessLines) {
  const std::string path = ::testing::TempDir() + "/endless.txt";
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string chunk(1 << 20, 'x');
  for (int i = 0; i < 3; ++i) fwrite(chunk.data(), 1, chunk.size(), f);
  fclose(f);
  absl::StatusOr<std::unique_ptr<LineReader>> r = LineReader::OpenFile(path);
  ASSERT_TRUE(r.ok());
  std::string_view line;
  EXPECT_FALSE((*r)->Next(&line));
  EXPECT_THAT(std::string((*r)->status().message()),
              ::testing::HasSubstr("endless.txt:1: line longer than"));
}

}  // namespace
}  // namespace fragfree::replay
