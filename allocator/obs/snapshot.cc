// Snapshot writers (snapshot.h): JSON and pickle from the arena views, streamed
// through a buffer. Thread-safety: see snapshot.h.
#include "allocator/obs/snapshot.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>

namespace fragfree {
namespace {

// A 64 KiB buffer handed to `write` whenever the next token might not fit.
class Out {
 public:
  explicit Out(absl::FunctionRef<bool(std::string_view)> write)
      : write_(write), buf_(new char[kSize]), p_(buf_.get()) {}

  // Room for `n` (<= kMaxToken) more bytes at the returned pointer; the caller
  // then calls Advance with what it wrote.
  char* Reserve(size_t n) {
    if (size_t(buf_.get() + kSize - p_) < n) Flush();
    return p_;
  }
  void Advance(char* end) { p_ = end; }
  void Put(char c) { *Reserve(1) = c, ++p_; }
  void Put(std::string_view s) {
    char* p = Reserve(s.size());
    memcpy(p, s.data(), s.size());
    p_ = p + s.size();
  }
  // Hands the buffer on; false once a write has failed.
  bool Flush() {
    if (ok_ && p_ != buf_.get()) {
      ok_ = write_(std::string_view(buf_.get(), size_t(p_ - buf_.get())));
    }
    p_ = buf_.get();
    return ok_;
  }

  static constexpr size_t kMaxToken = 256;

 private:
  static constexpr size_t kSize = size_t{1} << 16;
  static_assert(kMaxToken <= kSize, "a token must fit an empty buffer");
  absl::FunctionRef<bool(std::string_view)> write_;
  std::unique_ptr<char[]> buf_;
  char* p_;
  bool ok_ = true;
};

// The nesting of containers a writer is in, and whether each has an item yet
// (the pickle opens a MARK before its first item; JSON separates items).
class Nesting {
 public:
  void Push() { has_items_[++depth_] = false; }
  // Whether the current container had no item until now.
  bool First() {
    const bool first = !has_items_[depth_];
    has_items_[depth_] = true;
    return first;
  }
  // Whether the container closed had items.
  bool Pop() { return has_items_[depth_--]; }

 private:
  bool has_items_[8] = {};
  int depth_ = 0;
};

// Protocol 2 with only the opcodes PyTorch's MemoryViz unpickler
// (torch/utils/viz/MemoryViz.js) accepts: PROTO, EMPTY_DICT/LIST, MARK,
// APPENDS, SETITEMS, TUPLE, BININT1/2, BININT, LONG1, BINUNICODE,
// NEWTRUE/NEWFALSE, STOP. No memo, so it also opens in Python's pickle.load.
class PickleWriter {
 public:
  explicit PickleWriter(Out* out) : out_(*out) {}
  void Begin() { out_.Put(std::string_view("\x80\x02", 2)); }  // PROTO 2
  void End() { out_.Put('.'); }                                // STOP
  void BeginDict() {
    out_.Put('}');  // EMPTY_DICT
    nesting_.Push();
  }
  void Key(std::string_view key) {
    if (nesting_.First()) out_.Put('(');  // MARK
    String(key);
  }
  void EndDict() {
    if (nesting_.Pop()) out_.Put('u');  // SETITEMS
  }
  void BeginList() {
    out_.Put(']');  // EMPTY_LIST
    nesting_.Push();
  }
  void Item() {
    if (nesting_.First()) out_.Put('(');  // MARK
  }
  void EndList() {
    if (nesting_.Pop()) out_.Put('e');  // APPENDS
  }
  void EmptyList() { out_.Put(']'); }
  void Bool(bool b) { out_.Put(b ? '\x88' : '\x89'); }  // NEWTRUE / NEWFALSE
  void IntPair(int64_t a, int64_t b) {
    out_.Put('(');  // MARK
    Int(a);
    Int(b);
    out_.Put('t');  // TUPLE
  }
  void Int(int64_t i) {
    char* p = out_.Reserve(10);
    if (i >= 0 && i < 256) {
      *p++ = 'K';  // BININT1
      *p++ = char(i);
    } else if (i >= 0 && i < 65536) {
      *p++ = 'M';  // BININT2
      p = LittleEndian(uint64_t(i), 2, p);
    } else if (i >= INT32_MIN && i <= INT32_MAX) {
      *p++ = 'J';  // BININT
      p = LittleEndian(uint64_t(uint32_t(int32_t(i))), 4, p);
    } else {
      *p++ = '\x8a';  // LONG1: little-endian two's complement
      *p++ = 8;
      p = LittleEndian(uint64_t(i), 8, p);
    }
    out_.Advance(p);
  }
  // REQUIRES: s.size() <= Out::kMaxToken - 5.
  void String(std::string_view s) {
    char* p = out_.Reserve(5 + s.size());
    *p++ = 'X';  // BINUNICODE
    p = LittleEndian(s.size(), 4, p);
    memcpy(p, s.data(), s.size());
    out_.Advance(p + s.size());
  }

 private:
  static char* LittleEndian(uint64_t v, int bytes, char* p) {
    for (int i = 0; i < bytes; ++i) *p++ = char((v >> (8 * i)) & 0xff);
    return p;
  }
  Out& out_;
  Nesting nesting_;
};

// The same content as JSON (tuples as arrays).
class JsonWriter {
 public:
  explicit JsonWriter(Out* out) : out_(*out) {}
  void Begin() {}
  void End() {}
  void BeginDict() {
    out_.Put('{');
    nesting_.Push();
  }
  void Key(std::string_view key) {
    if (!nesting_.First()) out_.Put(',');
    String(key);
    out_.Put(':');
  }
  void EndDict() {
    nesting_.Pop();
    out_.Put('}');
  }
  void BeginList() {
    out_.Put('[');
    nesting_.Push();
  }
  void Item() {
    if (!nesting_.First()) out_.Put(',');
  }
  void EndList() {
    nesting_.Pop();
    out_.Put(']');
  }
  void EmptyList() { out_.Put("[]"); }
  void Bool(bool b) { out_.Put(b ? std::string_view("true") : "false"); }
  void IntPair(int64_t a, int64_t b) {
    out_.Put('[');
    Int(a);
    out_.Put(',');
    Int(b);
    out_.Put(']');
  }
  void Int(int64_t i) {
    char* p = out_.Reserve(20);
    out_.Advance(std::to_chars(p, p + 20, i).ptr);
  }
  // REQUIRES: s needs no escaping (the snapshot's keys and names) and
  // s.size() <= Out::kMaxToken - 2.
  void String(std::string_view s) {
    char* p = out_.Reserve(s.size() + 2);
    *p++ = '"';
    memcpy(p, s.data(), s.size());
    p += s.size();
    *p++ = '"';
    out_.Advance(p);
  }

 private:
  Out& out_;
  Nesting nesting_;
};

const char* StateName(BlockState s) {
  switch (s) {
    case BlockState::kAllocated:
      return "active_allocated";
    case BlockState::kPendingFree:
      return "active_pending_free";
    case BlockState::kFree:
    case BlockState::kCached:
      return "inactive";
  }
  return "inactive";
}

// Allocated or waiting for its streams; a cached block is free memory outside
// the engine (DeviceAllocator::Arenas() reports it as free).
bool Live(BlockState s) {
  return s == BlockState::kAllocated || s == BlockState::kPendingFree;
}

// A contiguous mapped range [lo, hi) of `arena`, whose blocks start at
// arena->blocks[first] (blocks are in address order and tile the VA).
struct Range {
  uintptr_t lo, hi;
  const ArenaView* arena;
  size_t first;
};

// A paused tag's segments (docs/sleep.md): the page ranges under its live
// blocks, which keep their addresses while their pages are released.
void PausedRanges(const ArenaView& arena, std::vector<Range>* ranges) {
  const size_t page = arena.page_size;
  for (size_t i = 0; i < arena.blocks.size(); ++i) {
    const BlockView& b = arena.blocks[i];
    if (!Live(b.state)) continue;
    const uintptr_t lo = arena.base + (b.addr - arena.base) / page * page;
    const uintptr_t hi =
        arena.base + (b.addr + b.size - arena.base + page - 1) / page * page;
    if (!ranges->empty() && ranges->back().arena == &arena &&
        ranges->back().hi >= lo) {
      ranges->back().hi = std::max(ranges->back().hi, hi);
      continue;
    }
    size_t first = i;
    while (first > 0 &&
           arena.blocks[first - 1].addr + arena.blocks[first - 1].size > lo) {
      --first;
    }
    ranges->push_back({lo, hi, &arena, first});
  }
}

std::vector<Range> MappedRanges(const std::vector<ArenaView>& arenas) {
  std::vector<Range> ranges;
  for (const ArenaView& arena : arenas) {
    if (arena.paused) {
      PausedRanges(arena, &ranges);
      continue;
    }
    size_t p = 0, n = arena.page_mapped.size(), first = 0;
    while (p < n) {
      if (!arena.page_mapped[p]) {
        ++p;
        continue;
      }
      size_t q = p;
      while (q < n && arena.page_mapped[q]) ++q;
      const uintptr_t lo = arena.base + p * arena.page_size;
      while (first < arena.blocks.size() &&
             arena.blocks[first].addr + arena.blocks[first].size <= lo) {
        ++first;
      }
      ranges.push_back({lo, arena.base + q * arena.page_size, &arena, first});
      p = q;
    }
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const Range& a, const Range& b) { return a.lo < b.lo; });
  return ranges;
}

// Calls f(start, size, requested, state) for each block of `r`, clipped to it.
template <class F>
void ForEachBlock(const Range& r, F f) {
  const std::vector<BlockView>& blocks = r.arena->blocks;
  for (size_t i = r.first; i < blocks.size() && blocks[i].addr < r.hi; ++i) {
    const BlockView& b = blocks[i];
    const uintptr_t start = std::max(b.addr, r.lo);
    const uintptr_t end = std::min(b.addr + b.size, r.hi);
    if (start >= end) continue;
    const int64_t size = int64_t(end - start);
    const int64_t requested =
        Live(b.state) ? std::min<int64_t>(int64_t(b.requested), size) : size;
    f(start, size, requested, b.state);
  }
}

// One block of a segment (device or host): PyTorch's block dict.
template <class W>
void WriteBlock(W& w, uintptr_t addr, int64_t size, int64_t requested,
                BlockState state) {
  w.BeginDict();
  w.Key("address");
  w.Int(int64_t(addr));
  w.Key("size");
  w.Int(size);
  w.Key("requested_size");
  w.Int(requested);
  w.Key("state");
  w.String(StateName(state));
  w.Key("frames");
  w.EmptyList();
  w.EndDict();
}

template <class W>
void WriteSegment(W& w, int device, const Range& r) {
  int64_t allocated = 0, active = 0, requested = 0;
  ForEachBlock(r, [&](uintptr_t, int64_t size, int64_t req, BlockState s) {
    if (s == BlockState::kAllocated) allocated += size;
    if (Live(s)) {
      active += size;
      requested += req;
    }
  });
  const ArenaView& arena = *r.arena;
  w.BeginDict();
  w.Key("device");
  w.Int(device);
  w.Key("address");
  w.Int(int64_t(r.lo));
  w.Key("total_size");
  w.Int(int64_t(r.hi - r.lo));
  w.Key("allocated_size");
  w.Int(allocated);
  w.Key("active_size");
  w.Int(active);
  w.Key("requested_size");
  w.Int(requested);
  w.Key("stream");
  w.Int(int64_t(arena.stream));
  w.Key("segment_type");
  w.String(arena.small ? "small" : "large");
  w.Key("segment_pool_id");
  w.IntPair(int64_t(arena.pool_id[0]), int64_t(arena.pool_id[1]));
  w.Key("is_expandable");
  w.Bool(true);
  if (!arena.tag.empty()) {
    // fragfree's own keys (docs/sleep.md): the region tag, and whether it is
    // paused (the segment's pages are released; its addresses are kept).
    w.Key("tag");
    w.String(arena.tag);
    w.Key("paused");
    w.Bool(arena.paused);
  }
  w.Key("frames");
  w.EmptyList();
  w.Key("blocks");
  w.BeginList();
  ForEachBlock(r,
               [&](uintptr_t start, int64_t size, int64_t req, BlockState s) {
                 w.Item();
                 WriteBlock(w, start, size, req, s);
               });
  w.EndList();
  w.EndDict();
}

template <class W>
void WriteTraceEvent(W& w, const TraceEvent& e) {
  w.BeginDict();
  w.Key("action");
  w.String(TraceActionName(e.action));
  w.Key(e.action == TraceAction::kOom ? "device_free" : "addr");
  w.Int(int64_t(e.addr));
  w.Key("size");
  w.Int(int64_t(e.size));
  w.Key("stream");
  w.Int(int64_t(e.stream));
  w.Key("time_us");
  w.Int(int64_t(e.time_us));
  w.Key("frames");
  w.EmptyList();
  // The caller's tag (ff_set_trace_context): the PyTorch adapter puts the
  // Python stack it names into "frames".
  if (e.context != 0) {
    w.Key("context");
    w.Int(int64_t(e.context));
  }
  w.EndDict();
}

// The pinned pool's chunk, as a segment of host memory.
template <class W>
void WriteHostSegment(W& w, const HostSegmentView& h) {
  int64_t allocated = 0, requested = 0;
  for (const BlockView& b : h.blocks) {
    if (b.state == BlockState::kAllocated) allocated += int64_t(b.size);
    if (Live(b.state)) requested += int64_t(b.requested);
  }
  w.BeginDict();
  w.Key("address");
  w.Int(int64_t(h.base));
  w.Key("total_size");
  w.Int(int64_t(h.size));
  w.Key("allocated_size");
  w.Int(allocated);
  w.Key("requested_size");
  w.Int(requested);
  w.Key("blocks");
  w.BeginList();
  for (const BlockView& b : h.blocks) {
    w.Item();
    WriteBlock(w, b.addr, int64_t(b.size),
               Live(b.state) ? int64_t(b.requested) : int64_t(b.size), b.state);
  }
  w.EndList();
  w.EndDict();
}

template <class W>
void Write(W& w, int device, const std::vector<ArenaView>& arenas,
           const TraceLog& trace, const std::vector<HostSegmentView>& host) {
  w.Begin();
  w.BeginDict();
  w.Key("segments");
  w.BeginList();
  for (const Range& r : MappedRanges(arenas)) {
    w.Item();
    WriteSegment(w, device, r);
  }
  w.EndList();
  w.Key("device_traces");
  w.BeginList();
  for (int d = 0; d < device; ++d) {
    w.Item();
    w.EmptyList();
  }
  w.Item();
  w.BeginList();
  trace.ForEach([&w](const TraceEvent& e) {
    w.Item();
    WriteTraceEvent(w, e);
  });
  w.EndList();
  w.EndList();
  if (!host.empty()) {
    w.Key("host_segments");
    w.BeginList();
    for (const HostSegmentView& h : host) {
      w.Item();
      WriteHostSegment(w, h);
    }
    w.EndList();
  }
  w.EndDict();
  w.End();
}

std::string ToString(SnapshotFormat format, int device,
                     const std::vector<ArenaView>& arenas,
                     const TraceLog& trace,
                     const std::vector<HostSegmentView>& host) {
  // Reserved once: a little more than a snapshot takes (pages reserved but
  // never written are never touched).
  size_t blocks = 0;
  for (const ArenaView& a : arenas) blocks += a.blocks.size();
  std::string out;
  out.reserve(4096 + 160 * trace.size() + 192 * blocks);
  WriteSnapshot(
      format, device, arenas, trace,
      [&out](std::string_view s) {
        out.append(s);
        return true;
      },
      host);
  return out;
}

}  // namespace

bool WriteSnapshot(SnapshotFormat format, int device,
                   const std::vector<ArenaView>& arenas, const TraceLog& trace,
                   absl::FunctionRef<bool(std::string_view)> write,
                   const std::vector<HostSegmentView>& host) {
  Out out(write);
  if (format == SnapshotFormat::kPickle) {
    PickleWriter w(&out);
    Write(w, device, arenas, trace, host);
  } else {
    JsonWriter w(&out);
    Write(w, device, arenas, trace, host);
  }
  return out.Flush();
}

std::string SnapshotToJson(int device, const std::vector<ArenaView>& arenas,
                           const TraceLog& trace,
                           const std::vector<HostSegmentView>& host) {
  return ToString(SnapshotFormat::kJson, device, arenas, trace, host);
}

std::string SnapshotToPickle(int device, const std::vector<ArenaView>& arenas,
                             const TraceLog& trace,
                             const std::vector<HostSegmentView>& host) {
  return ToString(SnapshotFormat::kPickle, device, arenas, trace, host);
}

}  // namespace fragfree
