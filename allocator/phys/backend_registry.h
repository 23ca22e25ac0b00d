// The physical backends by name: what FRAGFREE_CONF's `backend` key accepts,
// the documentation of that key, and how the runtime makes one for a device.
// A new backend is a PhysicalBackend in a new file pair, its .cc in
// allocator/CMakeLists.txt, and a row in backend_registry.cc (docs/design.md,
// "Adding ...").
// Thread-safety: a constant table; the functions are pure (Create calls the
// backend's own constructor).
#ifndef FRAGFREE_ALLOCATOR_PHYS_BACKEND_REGISTRY_H_
#define FRAGFREE_ALLOCATOR_PHYS_BACKEND_REGISTRY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "allocator/phys/backend.h"

namespace fragfree {

// What a backend is made from: the device index, and for emulated backends
// the memory they emulate per device.
struct BackendParams {
  int device = 0;
  size_t capacity_bytes = 0;     // host_capacity_mb
  size_t granularity_bytes = 0;  // host_granularity_kb
};

struct BackendSpec {
  std::string_view name;     // the value of FRAGFREE_CONF's `backend`
  std::string_view summary;  // one phrase for the options table
  // Emulated on the host: devices are `host_devices`, sized by the params,
  // and stream order is the host's (HostEventSource); otherwise the devices
  // and events are CUDA's.
  bool emulated;
  absl::StatusOr<std::unique_ptr<PhysicalBackend>> (*create)(
      const BackendParams& params);
};

// Every backend, in the options table's order (the first is the default).
absl::Span<const BackendSpec> BackendSpecs();
// The backend named `name`, or nullptr.
const BackendSpec* FindBackend(std::string_view name);
// "`cuda` (driver VMM), `host` (...), ...": the `backend` key's documentation.
const std::string& BackendsDoc();
// "cuda, host or simulated": what an unknown name is told.
const std::string& BackendNames();
// The error of anything that needs CUDA in a build without it; `what`, when
// not empty, says what the host backend gives instead.
absl::Status NoCudaBuildError(std::string_view what = "");

}  // namespace fragfree

#endif  // FRAGFREE_ALLOCATOR_PHYS_BACKEND_REGISTRY_H_
