// Unit tests of the physical backends: the host emulation keeps data across
// remapping, enforces capacity and alignment, and rejects the misuse the driver
// rejects; a forwarding decorator passes every call it does not override;
// the fault injector fails exactly the calls it is told to; the backend table
// names, documents and makes every backend.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "allocator/phys/backend_registry.h"
#include "allocator/phys/fault_injecting_backend.h"
#include "allocator/phys/forwarding_backend.h"
#include "allocator/phys/host_backend.h"
#include "allocator/phys/page_sized_backend.h"
#include "allocator/phys/simulated_backend.h"
#include "gtest/gtest.h"

namespace fragfree {
namespace {

constexpr size_t kPage = 64 << 10;

TEST(HostBackend, DataSurvivesRemapping) {
  auto b = *HostBackend::Create(4 * kPage, kPage);
  uintptr_t va1 = *b->ReserveVa(4 * kPage);
  uintptr_t va2 = *b->ReserveVa(4 * kPage);
  EXPECT_EQ(va1 % kPage, 0u);
  PhysHandle h = *b->Create(kPage);
  ASSERT_TRUE(b->Map(va1, kPage, h).ok());
  ASSERT_TRUE(b->SetAccess(va1, kPage).ok());
  memset(reinterpret_cast<void*>(va1), 0x5a, kPage);
  ASSERT_TRUE(b->Unmap(va1, kPage).ok());
  ASSERT_TRUE(b->Map(va2 + 2 * kPage, kPage, h).ok());
  ASSERT_TRUE(b->SetAccess(va2 + 2 * kPage, kPage).ok());
  EXPECT_EQ(reinterpret_cast<unsigned char*>(va2 + 2 * kPage)[kPage - 1], 0x5a);
  ASSERT_TRUE(b->Unmap(va2 + 2 * kPage, kPage).ok());
  ASSERT_TRUE(b->Release(h).ok());
}

TEST(HostBackend, CapacityIsEnforced) {
  auto b = *HostBackend::Create(2 * kPage, kPage);
  PhysHandle h1 = *b->Create(kPage);
  PhysHandle h2 = *b->Create(kPage);
  absl::StatusOr<PhysHandle> h3 = b->Create(kPage);
  EXPECT_TRUE(absl::IsResourceExhausted(h3.status())) << h3.status();
  EXPECT_EQ(b->MemoryInfo().free_bytes, 0u);
  ASSERT_TRUE(b->Release(h1).ok());
  EXPECT_TRUE(b->Create(kPage).ok());
  ASSERT_TRUE(b->Release(h2).ok());
}

TEST(HostBackend, RejectsMisuse) {
  auto b = *HostBackend::Create(4 * kPage, kPage);
  uintptr_t va = *b->ReserveVa(4 * kPage);
  PhysHandle h = *b->Create(kPage);
  PhysHandle h2 = *b->Create(kPage);
  EXPECT_FALSE(b->Map(va + 1, kPage, h).ok());  // unaligned
  EXPECT_FALSE(b->Create(kPage + 1).ok());      // bad size
  ASSERT_TRUE(b->Map(va, kPage, h).ok());
  EXPECT_FALSE(b->Map(va, kPage, h2).ok());        // over a mapping
  EXPECT_FALSE(b->Release(h).ok());                // still mapped
  EXPECT_FALSE(b->Unmap(va + kPage, kPage).ok());  // not mapped
  EXPECT_FALSE(b->ReleaseVa(va, 4 * kPage).ok());  // has mappings
  ASSERT_TRUE(b->Unmap(va, kPage).ok());
  EXPECT_TRUE(b->ReleaseVa(va, 4 * kPage).ok());
  EXPECT_FALSE(HostBackend::Create(kPage + 1, kPage).ok());
  EXPECT_FALSE(HostBackend::Create(kPage, 1000).ok());
}

TEST(SimulatedBackend, CountsCapacity) {
  SimulatedBackend b(2 * kPage, kPage);
  PhysHandle h = *b.Create(2 * kPage);
  EXPECT_TRUE(absl::IsResourceExhausted(b.Create(kPage).status()));
  ASSERT_TRUE(b.Release(h).ok());
  EXPECT_EQ(b.MemoryInfo().free_bytes, 2 * kPage);
}

// A decorator that overrides only Create: every other call reaches the inner
// backend unchanged.
class CreateCounter final : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  absl::StatusOr<PhysHandle> Create(size_t size) override {
    ++creates;
    return ForwardingBackend::Create(size);
  }
  int creates = 0;
};

TEST(ForwardingBackend, PassesEveryCallItDoesNotOverride) {
  CreateCounter b(std::make_unique<SimulatedBackend>(4 * kPage, kPage));
  EXPECT_EQ(b.Name(), "simulated");
  EXPECT_EQ(b.Granularity(), kPage);
  absl::StatusOr<uintptr_t> va = b.ReserveVa(2 * kPage);
  ASSERT_TRUE(va.ok());
  absl::StatusOr<PhysHandle> h = b.Create(kPage);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(b.creates, 1);
  EXPECT_EQ(b.MemoryInfo().free_bytes, 3 * kPage);
  EXPECT_EQ(b.inner().MemoryInfo().free_bytes, 3 * kPage);
  EXPECT_TRUE(b.Map(*va, kPage, *h).ok());
  EXPECT_TRUE(b.SetAccess(*va, kPage).ok());
  EXPECT_TRUE(b.Unmap(*va, kPage).ok());
  EXPECT_TRUE(b.Release(*h).ok());
  EXPECT_TRUE(b.ReleaseVa(*va, 2 * kPage).ok());
  EXPECT_EQ(b.MemoryInfo().free_bytes, 4 * kPage);
  EXPECT_TRUE(absl::IsResourceExhausted(b.Create(8 * kPage).status()));
  EXPECT_EQ(b.creates, 2);
}

// page_size_mb's decorator: the engine's page becomes a multiple of the
// device's granularity, which DeviceGranularity() still reports; 0 or the
// granularity itself leaves the backend as it is; anything else is refused.
TEST(PageSizedBackend, MakesPagesLargerAndKeepsTheDevicesGranularity) {
  auto make = [] {
    return std::make_unique<SimulatedBackend>(16 * kPage, kPage);
  };
  for (size_t same : {size_t{0}, kPage}) {
    std::unique_ptr<PhysicalBackend> inner = make();
    PhysicalBackend* raw = inner.get();
    absl::StatusOr<std::unique_ptr<PhysicalBackend>> b =
        PageSizedBackend::Wrap(std::move(inner), same, 0);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->get(), raw) << "page size " << same << " wraps nothing";
  }
  absl::StatusOr<std::unique_ptr<PhysicalBackend>> b =
      PageSizedBackend::Wrap(make(), 4 * kPage, 0);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ((*b)->Granularity(), 4 * kPage);
  EXPECT_EQ((*b)->DeviceGranularity(), kPage);
  EXPECT_EQ((*b)->Name(), "simulated");
  absl::StatusOr<PhysHandle> h = (*b)->Create(4 * kPage);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ((*b)->MemoryInfo().free_bytes, 12 * kPage);
  EXPECT_TRUE((*b)->Release(*h).ok());
  b = PageSizedBackend::Wrap(make(), 3 * kPage / 2, 2);
  ASSERT_TRUE(absl::IsInvalidArgument(b.status()));
  EXPECT_NE(b.status().message().find("page_size_mb"), std::string::npos);
  EXPECT_NE(b.status().message().find("device 2"), std::string::npos);
}

TEST(FaultInjectingBackend, NamesItselfAfterTheInnerBackend) {
  FaultInjectingBackend b(std::make_unique<SimulatedBackend>(kPage, kPage));
  EXPECT_EQ(b.Name(), "simulated+faults");
  EXPECT_EQ(b.Granularity(), kPage);
}

TEST(FaultInjectingBackend, FailsExactlyTheChosenCalls) {
  FaultInjectingBackend b(std::make_unique<SimulatedBackend>(8 * kPage, kPage));
  b.FailCalls(BackendOp::kCreate, 2, 1, absl::InternalError("injected"));
  EXPECT_TRUE(b.Create(kPage).ok());
  EXPECT_EQ(b.Create(kPage).status().message(), "injected");
  EXPECT_TRUE(b.Create(kPage).ok());
  b.FailNext(BackendOp::kMap, -1, absl::InternalError("map down"));
  EXPECT_FALSE(b.Map(0, kPage, PhysHandle{1}).ok());
  EXPECT_FALSE(b.Map(0, kPage, PhysHandle{1}).ok());
  b.ClearFaults();
  EXPECT_TRUE(b.Map(0, kPage, PhysHandle{1}).ok());
  EXPECT_EQ(b.FaultsInjected(), 3);
  EXPECT_EQ(b.Calls(BackendOp::kCreate), 3);
}

// The backend table: unique names, found by name, documented in order, and
// every emulated backend made from the params with their capacity and page.
TEST(BackendRegistry, NamesFindDocsAndFactories) {
  std::vector<std::string_view> names;
  for (const BackendSpec& spec : BackendSpecs()) {
    EXPECT_EQ(std::count(names.begin(), names.end(), spec.name), 0)
        << spec.name;
    names.push_back(spec.name);
    EXPECT_EQ(FindBackend(spec.name), &spec);
    EXPECT_NE(
        BackendsDoc().find(absl::StrCat("`", std::string(spec.name), "` (")),
        std::string::npos);
    if (!spec.emulated) continue;
    absl::StatusOr<std::unique_ptr<PhysicalBackend>> b = spec.create(
        {.device = 0, .capacity_bytes = 8 << 20, .granularity_bytes = 2 << 20});
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*b)->Name(), spec.name);
    EXPECT_EQ((*b)->Granularity(), size_t{2} << 20);
  }
  EXPECT_EQ(BackendSpecs()[0].name, "cuda");  // the default
  EXPECT_EQ(FindBackend("gpu"), nullptr);
  EXPECT_EQ(BackendNames(), "cuda, host or simulated");
}

}  // namespace
}  // namespace fragfree
