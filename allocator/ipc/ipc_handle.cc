#include "allocator/ipc/ipc_handle.h"

#include <cstring>

#include "absl/strings/str_format.h"

namespace fragfree {
namespace {

// PyTorch's ShareHeader, as its x86-64/aarch64 compilers lay it out.
struct TorchShareHeader {
  int32_t pid;
  uint64_t segment_size;
  uint64_t num_handles;
};
static_assert(sizeof(TorchShareHeader) == 24, "PyTorch's layout");

constexpr char kMagic[8] = {'F', 'F', 'I', 'P', 'C', '0', '1', '\0'};

struct IpcTrailer {
  uint64_t producer_start_time;
  int32_t device;
  int32_t lease_fd;
  uint64_t export_id;
  uint64_t block_offset;
  uint64_t block_size;
  uint32_t lease_slot;
  uint32_t reserved;
  uint64_t lease_bytes;
};
static_assert(sizeof(IpcTrailer) == 56, "no hidden padding");

// Far more pages than any device has (64 TiB of 2 MiB pages).
constexpr uint64_t kMaxPages = uint64_t{1} << 25;

template <typename T>
void Put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

class Reader {
 public:
  explicit Reader(std::string_view bytes) : bytes_(bytes) {}
  template <typename T>
  bool Get(T* value) {
    if (bytes_.size() - pos_ < sizeof(T)) return false;
    memcpy(value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  size_t left() const { return bytes_.size() - pos_; }
  std::string_view Peek(size_t n) const { return bytes_.substr(pos_, n); }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

absl::Status Bad(std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrFormat("fragfree ipc: not a valid IPC handle: %s", why));
}

}  // namespace

std::string EncodeIpcHandle(const IpcHandle& h) {
  std::string out;
  out.reserve(2 + sizeof(TorchShareHeader) + h.pages.size() * 12 +
              sizeof(kMagic) + sizeof(IpcTrailer));
  out.push_back(kTorchHandleVersion);
  out.push_back(kTorchExpandableType);
  TorchShareHeader header{};
  header.pid = int32_t(h.pid);
  header.segment_size = h.page_size;
  header.num_handles = h.pages.size();
  Put(out, header);
  for (const IpcHandle::Page& p : h.pages) Put(out, int32_t(p.fd));
  out.append(kMagic, sizeof(kMagic));
  IpcTrailer t{};
  t.producer_start_time = h.producer_start_time;
  t.device = h.device;
  t.lease_fd = h.lease_fd;
  t.export_id = h.export_id;
  t.block_offset = h.block_offset;
  t.block_size = h.block_size;
  t.lease_slot = h.lease_slot;
  t.lease_bytes = h.lease_bytes;
  Put(out, t);
  for (const IpcHandle::Page& p : h.pages) Put(out, p.offset);
  return out;
}

absl::StatusOr<IpcHandle> DecodeIpcHandle(std::string_view bytes) {
  Reader r(bytes);
  char version = 0, type = 0;
  if (!r.Get(&version) || !r.Get(&type)) return Bad("too short");
  if (version < 1 || version > kTorchHandleVersion) {
    return Bad(absl::StrFormat("unknown version %d", int(version)));
  }
  if (type == kTorchCudaMallocType) {
    return Bad(
        "a cudaMalloc handle ('c'): open it with cudaIpcOpenMemHandle, not "
        "fragfree");
  }
  if (type != kTorchExpandableType) {
    return Bad(absl::StrFormat("unknown type byte 0x%02x", int(uint8_t(type))));
  }
  TorchShareHeader header;
  if (!r.Get(&header)) return Bad("truncated header");
  if (header.pid <= 0 || header.num_handles == 0 ||
      header.num_handles > kMaxPages || header.segment_size == 0) {
    return Bad("header out of range");
  }
  IpcHandle h;
  h.pid = header.pid;
  h.page_size = header.segment_size;
  if (r.left() < header.num_handles * sizeof(int32_t)) {
    return Bad("truncated descriptor list");
  }
  h.pages.resize(header.num_handles);
  for (IpcHandle::Page& p : h.pages) {
    int32_t fd = -1;
    r.Get(&fd);
    if (fd < 0) return Bad("negative descriptor");
    p.fd = fd;
  }
  if (r.left() == 0) {  // stock PyTorch: the block is every page
    h.block_size = h.page_size * h.pages.size();
    return h;
  }
  if (r.left() < sizeof(kMagic) ||
      r.Peek(sizeof(kMagic)) != std::string_view(kMagic, sizeof(kMagic))) {
    return Bad("unknown trailer");
  }
  char magic[sizeof(kMagic)];
  r.Get(&magic);
  IpcTrailer t;
  if (!r.Get(&t)) return Bad("truncated trailer");
  if (r.left() != h.pages.size() * sizeof(uint64_t)) {
    return Bad("trailer's page offsets do not match the page count");
  }
  for (IpcHandle::Page& p : h.pages) r.Get(&p.offset);
  const uint64_t span = h.page_size * h.pages.size();
  if (t.block_size == 0 || t.block_offset >= h.page_size ||
      t.block_offset + t.block_size > span ||
      t.block_offset + t.block_size <= span - h.page_size || t.lease_fd < 0 ||
      t.device < 0) {
    return Bad("block outside its pages");
  }
  h.has_trailer = true;
  h.producer_start_time = t.producer_start_time;
  h.device = t.device;
  h.export_id = t.export_id;
  h.block_offset = t.block_offset;
  h.block_size = t.block_size;
  h.lease_fd = t.lease_fd;
  h.lease_slot = t.lease_slot;
  h.lease_bytes = t.lease_bytes;
  return h;
}

}  // namespace fragfree
