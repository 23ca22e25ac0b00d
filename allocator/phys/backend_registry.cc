// The backend table (backend_registry.h).
// Thread-safety: see backend_registry.h.
#include "allocator/phys/backend_registry.h"

#include "allocator/phys/host_backend.h"
#include "allocator/phys/simulated_backend.h"
#ifdef FRAGFREE_WITH_CUDA
#include "allocator/phys/cuda_vmm_backend.h"
#endif

namespace fragfree {
namespace {

absl::StatusOr<std::unique_ptr<PhysicalBackend>> MakeCuda(
    const BackendParams& params) {
#ifdef FRAGFREE_WITH_CUDA
  absl::StatusOr<std::unique_ptr<CudaVmmBackend>> b =
      CudaVmmBackend::Create(params.device);
  if (!b.ok()) return b.status();
  return std::unique_ptr<PhysicalBackend>(std::move(*b));
#else
  (void)params;
  return NoCudaBuildError();
#endif
}

absl::StatusOr<std::unique_ptr<PhysicalBackend>> MakeHost(
    const BackendParams& params) {
  absl::StatusOr<std::unique_ptr<HostBackend>> b =
      HostBackend::Create(params.capacity_bytes, params.granularity_bytes);
  if (!b.ok()) return b.status();
  return std::unique_ptr<PhysicalBackend>(std::move(*b));
}

absl::StatusOr<std::unique_ptr<PhysicalBackend>> MakeSimulated(
    const BackendParams& params) {
  return std::unique_ptr<PhysicalBackend>(std::make_unique<SimulatedBackend>(
      params.capacity_bytes, params.granularity_bytes));
}

constexpr BackendSpec kBackends[] = {
    {"cuda", "driver VMM", /*emulated=*/false, MakeCuda},
    {"host", "memfd + mmap emulation, real host memory", /*emulated=*/true,
     MakeHost},
    {"simulated", "bookkeeping only", /*emulated=*/true, MakeSimulated},
};

}  // namespace

absl::Span<const BackendSpec> BackendSpecs() { return kBackends; }

const BackendSpec* FindBackend(std::string_view name) {
  for (const BackendSpec& spec : kBackends) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

const std::string& BackendsDoc() {
  // Never destroyed: options may be parsed by exit handlers.
  static const std::string* const doc = [] {
    auto* s = new std::string;
    for (const BackendSpec& spec : kBackends) {
      if (!s->empty()) s->append(", ");
      s->append("`").append(spec.name).append("` (");
      s->append(spec.summary).append(")");
    }
    return s;
  }();
  return *doc;
}

const std::string& BackendNames() {
  static const std::string* const names = [] {
    auto* s = new std::string;
    const size_t n = std::size(kBackends);
    for (size_t i = 0; i < n; ++i) {
      s->append(i == 0 ? "" : (i + 1 == n ? " or " : ", "));
      s->append(kBackends[i].name);
    }
    return s;
  }();
  return *names;
}

absl::Status NoCudaBuildError(std::string_view what) {
  std::string message =
      "fragfree was built without CUDA (FRAGFREE_WITH_CUDA=OFF); use "
      "FRAGFREE_CONF=backend:host";
  if (!what.empty()) message.append(" for ").append(what);
  return absl::UnavailableError(message);
}

}  // namespace fragfree
