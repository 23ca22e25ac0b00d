// Tests for the trace readers (bench/replay/trace_reader.h and the format
// readers): good input in both formats, gzip, and every kind of bad input,
// strict and --lenient.
// Thread-safety: single-threaded tests.
#include "bench/replay/trace_reader.h"

#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "bench/replay/rmm_csv_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace fragfree::replay {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Trace> ReadString(const std::string& text, bool lenient = false,
                                 TraceFormat format = TraceFormat::kAuto) {
  auto reader = LineReader::FromString("t.csv", text);
  ReadOptions options;
  options.lenient = lenient;
  return ReadTraceFrom(*reader, format, options);
}

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/" + name;
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << text;
}

void WriteGzip(const std::string& path, const std::string& text) {
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  gzclose(gz);
}

constexpr char kHeader[] = "action,addr,size,stream,time_us\n";

TEST(PytorchCsvTest, PairsFreesWithLatestAllocAtAddress) {
  absl::StatusOr<Trace> t = ReadString(std::string(kHeader) +
                                       "alloc,100,4096,0,10\n"
                                       "alloc,200,512,7,11\n"
                                       "free_requested,100,4096,0,12\n"
                                       "free_completed,100,4096,0,13\n"
                                       "alloc,100,999,0,14\n"  // address reused
                                       "free_completed,100,999,0,15\n"
                                       "free_completed,200,512,7,16\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "csv");
  ASSERT_EQ(t->events.size(), 6u);
  EXPECT_EQ(t->num_ids, 3u);
  EXPECT_EQ(t->ignored_lines, 1u);  // free_requested
  EXPECT_EQ(t->never_freed, 0u);
  const Event& free1 = t->events[2];
  EXPECT_EQ(free1.op, Op::kFree);
  EXPECT_EQ(free1.id, 0u);
  EXPECT_EQ(free1.size, 4096u);
  EXPECT_EQ(free1.line, 5u);
  EXPECT_EQ(free1.time_us, 13);
  EXPECT_EQ(t->events[3].id, 2u);  // the second alloc at 100
  EXPECT_EQ(t->events[4].id, 2u);
  EXPECT_EQ(t->events[5].id, 1u);
  EXPECT_EQ(t->events[5].stream, 7u);  // a free carries its alloc's stream
}

TEST(PytorchCsvTest, AcceptsColumnsInAnyOrderCrlfAndPyTorchExtras) {
  absl::StatusOr<Trace> t = ReadString(
      "time_us,stream,size,addr,action\r\n"
      "1,0,100,5,alloc\r\n"
      "2,0,2097152,77,segment_alloc\r\n"
      "3,0,100,5,free_completed\r\n"
      "4,0,100,6,alloc");  // last line without newline
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->events.size(), 3u);
  EXPECT_EQ(t->ignored_lines, 1u);
  EXPECT_EQ(t->never_freed, 1u);
  ASSERT_EQ(t->warnings.size(), 1u);
  EXPECT_THAT(t->warnings[0], HasSubstr("no newline"));
}

TEST(PytorchCsvTest, ReadsGzipAndPlainFiles) {
  const std::string text =
      std::string(kHeader) + "alloc,1,10,0,1\nfree_completed,1,10,0,2\n";
  WriteGzip(TempPath("t.csv.gz"), text);
  WriteFile(TempPath("t.csv"), text);
  for (const char* name : {"t.csv.gz", "t.csv"}) {
    absl::StatusOr<Trace> t =
        ReadTrace(TempPath(name), TraceFormat::kAuto, ReadOptions{});
    ASSERT_TRUE(t.ok()) << name << ": " << t.status();
    EXPECT_EQ(t->events.size(), 2u);
    EXPECT_EQ(t->path, TempPath(name));
  }
}

struct BadCase {
  const char* name;
  std::string body;     // after the header
  const char* message;  // expected in the error
  int line;             // expected line in "t.csv:<line>:"
};

class BadLineTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadLineTest, StrictFailsNamingFileAndLine) {
  const BadCase& c = GetParam();
  absl::StatusOr<Trace> t = ReadString(
      std::string(kHeader) + "alloc,1,10,0,1\n" + c.body + "alloc,2,10,0,9\n");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(t.status().message(),
              HasSubstr("t.csv:" + std::to_string(c.line) + ": "));
  EXPECT_THAT(t.status().message(), HasSubstr(c.message));
}

TEST_P(BadLineTest, LenientSkipsAndCounts) {
  const BadCase& c = GetParam();
  absl::StatusOr<Trace> t = ReadString(
      std::string(kHeader) + "alloc,1,10,0,1\n" + c.body + "alloc,2,10,0,9\n",
      /*lenient=*/true);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->skipped_lines, 1u);
  EXPECT_EQ(t->events.size(), 2u);
  ASSERT_FALSE(t->warnings.empty());
  EXPECT_THAT(t->warnings[0], HasSubstr(c.message));
}

INSTANTIATE_TEST_SUITE_P(
    AllKinds, BadLineTest,
    ::testing::Values(
        BadCase{"Truncated", "alloc,3,10\n", "truncated line", 3},
        BadCase{"TooManyFields", "alloc,3,10,0,1,9\n", "found 6", 3},
        BadCase{"BadNumber", "alloc,3,1O,0,1\n", "bad size '1O'", 3},
        BadCase{"NegativeSize", "alloc,3,-10,0,1\n", "bad size", 3},
        BadCase{"BadAddr", "alloc,zz,10,0,1\n", "bad addr", 3},
        BadCase{"BadTime", "alloc,3,10,0,\n", "bad time_us", 3},
        BadCase{"UnknownFree", "free_completed,42,10,0,1\n",
                "free of unknown address 0x2a", 3},
        BadCase{"AllocAtLiveAddress", "alloc,1,10,0,2\n",
                "still live (allocated at line 2", 3},
        BadCase{"UnknownAction", "malloc,3,10,0,1\n", "unknown action 'malloc'",
                3},
        BadCase{"Binary", std::string("\x01\x02\x00\x7f", 4) + "\n", "fields",
                3}),
    [](const ::testing::TestParamInfo<BadCase>& info) {
      return info.param.name;
    });

TEST(TraceReaderTest, DoubleFreeIsAnError) {
  absl::StatusOr<Trace> t = ReadString(std::string(kHeader) +
                                       "alloc,1,10,0,1\n"
                                       "free_completed,1,10,0,2\n"
                                       "free_completed,1,10,0,3\n");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(),
              HasSubstr("t.csv:4: free of unknown address 0x1"));
}

TEST(TraceReaderTest, EmptyFileIsAnError) {
  absl::StatusOr<Trace> t = ReadString("");
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("t.csv: empty file"));
  WriteFile(TempPath("empty.csv"), "");
  t = ReadTrace(TempPath("empty.csv"), TraceFormat::kAuto, ReadOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("empty.csv: empty file"));
}

TEST(TraceReaderTest, HeaderWithoutEventsIsAnError) {
  absl::StatusOr<Trace> t = ReadString(kHeader);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("no alloc/free events"));
  // Lenient does not make an all-bad file good.
  t = ReadString(std::string(kHeader) + "junk\n", /*lenient=*/true);
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(t.status().message(), HasSubstr("1 bad lines skipped"));
}

TEST(TraceReaderTest, WrongHeadersAreErrors) {
  struct Case {
    std::string header;
    TraceFormat format;
    const char* message;
  };
  const Case cases[] = {
      {"a,b,c\n", TraceFormat::kAuto, "unrecognised header 'a,b,c'"},
      {"action,addr,size,stream\n", TraceFormat::kCsv,
       "missing column(s) 'time_us'"},
      {"action,addr,size,stream,time_us,extra\n", TraceFormat::kCsv,
       "unexpected column(s) 'extra'"},
      {"action,addr,size,stream,time_us,addr\n", TraceFormat::kCsv,
       "repeated column(s) 'addr'"},
      {"action,addr,size,stream,time_us\n", TraceFormat::kRmm,
       "missing column(s) 'Thread'"},
      {"alloc,1,10,0,1\n", TraceFormat::kAuto, "unrecognised header"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<Trace> t =
        ReadString(c.header + "alloc,1,10,0,1\n", false, c.format);
    ASSERT_FALSE(t.ok()) << c.header;
    EXPECT_THAT(t.status().message(), HasSubstr("t.csv:1: ")) << c.header;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.header;
  }
}

TEST(TraceReaderTest, MissingFileIsNotFound) {
  absl::StatusOr<Trace> t = ReadTrace(TempPath("does-not-exist.csv"),
                                      TraceFormat::kAuto, ReadOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(t.status().message(), HasSubstr("does-not-exist.csv"));
}

TEST(TraceReaderTest, TruncatedGzipIsAnErrorEvenWhenLenient) {
  std::string text = kHeader;
  for (int i = 0; i < 20000; ++i) {
    text += "alloc," + std::to_string(i * 7919 + 13) + "," +
            std::to_string(i * 31 + 5) + ",0,1\n";
  }
  const std::string full = TempPath("full.csv.gz");
  WriteGzip(full, text);
  std::ifstream in(full, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  const std::string cut = TempPath("cut.csv.gz");
  WriteFile(cut, bytes.substr(0, bytes.size() / 2));
  for (bool lenient : {false, true}) {
    ReadOptions options;
    options.lenient = lenient;
    absl::StatusOr<Trace> t = ReadTrace(cut, TraceFormat::kAuto, options);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), absl::StatusCode::kDataLoss);
    const std::string message(t.status().message());
    EXPECT_THAT(message, HasSubstr("truncated"));
    // The line named is where the data stops, not the start of the file.
    const size_t at = message.find("cut.csv.gz:");
    ASSERT_NE(at, std::string::npos) << message;
    const int line = std::atoi(message.c_str() + at + 11);
    EXPECT_GT(line, 1000) << message;
    EXPECT_LE(line, 20001) << message;
  }
}

TEST(TraceReaderTest, LenientReportsEveryKindAndKeepsAFewWarnings) {
  std::string body = std::string(kHeader) + "alloc,1,10,0,1\n";
  for (int i = 0; i < 8; ++i) body += "free_completed,99,1,0,1\n";
  absl::StatusOr<Trace> t = ReadString(body, /*lenient=*/true);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->skipped_lines, 8u);
  EXPECT_EQ(t->warnings.size(), 5u);  // ReadOptions::max_warnings
}

constexpr char kRmmHeader[] = "Thread,Time,Action,Pointer,Size,Stream\n";

TEST(RmmCsvTest, ReadsAllocateFreeAndFailure) {
  absl::StatusOr<Trace> t = ReadString(
      std::string(kRmmHeader) +
      "140573312345856,08:02:34.803217,allocate,0x7f8a40000000,1024,0x0\n"
      "140573312345856,08:02:34:803336,allocate,7f8a40000400,2048,7f00\n"
      "140573312345856,08:02:35.000001,allocate failure,0x0,99999,0x0\n"
      "140573312345856,1634567890.5,free,0x7f8a40000000,1024,0x0\n"
      "140573312345856,08:02:36.1,deallocate,0x7f8a40000400,2048,0x7f00\n");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->format, "rmm");
  ASSERT_EQ(t->events.size(), 4u);
  EXPECT_EQ(t->ignored_lines, 1u);
  EXPECT_EQ(t->events[0].time_us,
            (8 * 3600 + 2 * 60 + 34) * 1000000LL + 803217);
  EXPECT_EQ(t->events[1].stream, 0x7f00u);
  EXPECT_EQ(t->events[2].op, Op::kFree);
  EXPECT_EQ(t->events[2].id, 0u);
  EXPECT_EQ(t->events[2].time_us, 1634567890500000LL);
  EXPECT_EQ(t->events[3].id, 1u);
  EXPECT_EQ(t->events[3].time_us,
            (8 * 3600 + 2 * 60 + 36) * 1000000LL + 100000);
}

TEST(RmmCsvTest, BadLinesNameFileAndLine) {
  const struct {
    const char* line;
    const char* message;
  } cases[] = {
      {"1,08:00:00.0,allocate,0xZZ,10,0x0", "bad Pointer '0xZZ'"},
      {"1,08:00:00.0,allocate,0x10,ten,0x0", "bad Size 'ten'"},
      {"1,8 o'clock,allocate,0x10,10,0x0", "bad Time"},
      {"1,25:00:00.0,allocate,0x10,10,0x0", "bad Time"},
      {"x,08:00:00.0,allocate,0x10,10,0x0", "bad Thread"},
      {"1,08:00:00.0,allocate,0x10,10,stream", "bad Stream"},
      {"1,08:00:00.0,reallocate,0x10,10,0x0", "unknown action 'reallocate'"},
      {"1,08:00:00.0,free,0x99,10,0x0", "free of unknown address 0x99"},
      {"1,08:00:00.0,allocate,0x10", "truncated line"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<Trace> t =
        ReadString(std::string(kRmmHeader) +
                   "1,08:00:00.0,allocate,0x1,10,0x0\n" + c.line + "\n");
    ASSERT_FALSE(t.ok()) << c.line;
    EXPECT_THAT(t.status().message(), HasSubstr("t.csv:3: ")) << c.line;
    EXPECT_THAT(t.status().message(), HasSubstr(c.message)) << c.line;
  }
}

TEST(RmmCsvTest, ParsesTimeForms) {
  int64_t us = 0;
  EXPECT_TRUE(ParseRmmTime("00:00:01.5", &us));
  EXPECT_EQ(us, 1500000);
  EXPECT_TRUE(ParseRmmTime("00:00:01:000002", &us));
  EXPECT_EQ(us, 1000002);
  EXPECT_TRUE(ParseRmmTime("12", &us));
  EXPECT_EQ(us, 12000000);
  EXPECT_TRUE(ParseRmmTime("1.123456789", &us));
  EXPECT_EQ(us, 1123456);
  EXPECT_FALSE(ParseRmmTime("", &us));
  EXPECT_FALSE(ParseRmmTime("1:2", &us));
  EXPECT_FALSE(ParseRmmTime("1.2.3", &us));
  EXPECT_FALSE(ParseRmmTime("00:61:00.0", &us));
}

TEST(TraceFormatTest, ParsesNames) {
  EXPECT_EQ(*ParseTraceFormat("auto"), TraceFormat::kAuto);
  EXPECT_EQ(*ParseTraceFormat("csv"), TraceFormat::kCsv);
  EXPECT_EQ(*ParseTraceFormat("rmm"), TraceFormat::kRmm);
  EXPECT_FALSE(ParseTraceFormat("json").ok());
}

}  // namespace
}  // namespace fragfree::replay
