// fuzz_replay_main: a main() for LLVMFuzzerTestOneInput without libFuzzer, so
// any compiler (CI's gcc) runs the fuzz corpus and some random inputs as a
// plain test. Owns only the driver: argument parsing, corpus reading, the
// random inputs, and the report of which input failed (the fuzz function aborts
// on a violation).
//   engine_fuzz_replay [--random=N] [--seed=S] [--max_len=L] FILE_OR_DIR...
// Thread-safety: single-threaded.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

// What is running now, for the abort handler.
std::string g_current_name;
std::vector<uint8_t> g_current_input;

void WriteAll(const char* s, size_t n) {
  while (n > 0) {
    ssize_t w = write(STDERR_FILENO, s, n);
    if (w <= 0) return;
    s += w;
    n -= size_t(w);
  }
}

void OnAbort(int sig) {
  // Not async-signal-safe in general, but the process is dying anyway and the
  // strings were built before the crash.
  WriteAll("\nengine_fuzz_replay: the failing input is ", 42);
  WriteAll(g_current_name.data(), g_current_name.size());
  WriteAll("\nhex: ", 6);
  static const char kHex[] = "0123456789abcdef";
  for (uint8_t b : g_current_input) {
    char two[2] = {kHex[b >> 4], kHex[b & 15]};
    WriteAll(two, 2);
  }
  WriteAll("\n(save it with xxd -r -p and rerun: engine_fuzz_replay FILE)\n",
           61);
  signal(sig, SIG_DFL);
  raise(sig);
}

bool ReadFile(const std::filesystem::path& path, std::vector<uint8_t>* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), {});
  return true;
}

void RunOne(const std::string& name, std::vector<uint8_t> input) {
  g_current_name = name;
  g_current_input = std::move(input);
  LLVMFuzzerTestOneInput(g_current_input.data(), g_current_input.size());
}

}  // namespace

int main(int argc, char** argv) {
  signal(SIGABRT, OnAbort);
  signal(SIGSEGV, OnAbort);
  long random_inputs = 0;
  unsigned long seed = 1;
  size_t max_len = 512;
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--random=", 0) == 0) {
      random_inputs = strtol(arg.c_str() + 9, nullptr, 10);
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = strtoul(arg.c_str() + 7, nullptr, 10);
    } else if (arg.rfind("--max_len=", 0) == 0) {
      max_len = std::max<size_t>(4, strtoul(arg.c_str() + 10, nullptr, 10));
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& e : std::filesystem::directory_iterator(arg)) {
        if (e.is_regular_file()) files.push_back(e.path());
      }
    } else {
      files.push_back(arg);
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& path : files) {
    std::vector<uint8_t> input;
    if (!ReadFile(path, &input)) {
      fprintf(stderr, "engine_fuzz_replay: cannot read %s\n", path.c_str());
      return 2;
    }
    RunOne(path.string(), std::move(input));
  }
  std::mt19937_64 rng(seed);
  for (long n = 0; n < random_inputs; ++n) {
    std::vector<uint8_t> input(3 + rng() % (max_len - 3));
    for (uint8_t& b : input) b = uint8_t(rng());
    RunOne("random input " + std::to_string(n) + " (seed " +
               std::to_string(seed) + ")",
           std::move(input));
  }
  printf("engine_fuzz_replay: %zu corpus inputs and %ld random inputs passed\n",
         files.size(), random_inputs);
  return files.empty() && random_inputs == 0 ? 1 : 0;
}
