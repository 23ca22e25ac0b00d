// OomRejectionMixin: the adapter's (csrc/) answer to a member of
// CUDAAllocator that only newer PyTorch declares. Thread-safety: observers are
// guarded by a mutex.
#pragma once

#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

namespace fragfree_native {

// Version differences. attachOomRejectionObserver (PyTorch >= 2.12) is pure
// virtual where it exists and its parameter type does not exist before; this
// mixin overrides it only when the base class declares it.

template <typename A, typename = void>
struct HasOomRejection : std::false_type {};
template <typename A>
struct HasOomRejection<A, std::void_t<decltype(&A::attachOomRejectionObserver)>>
    : std::true_type {};

template <typename Fn>
struct FirstArg;
template <typename C, typename R, typename A0>
struct FirstArg<R (C::*)(A0)> {
  using type = std::decay_t<A0>;
};

template <typename Base, bool = HasOomRejection<Base>::value>
class OomRejectionMixin : public Base {};

template <typename Base>
class OomRejectionMixin<Base, true> : public Base {
 public:
  using RejectionObserver =
      typename FirstArg<decltype(&Base::attachOomRejectionObserver)>::type;
  // fragfree has no throw_on_cudamalloc_oom policy, so rejections never happen;
  // keep the observers alive and accept them (as a no-op) rather than throw.
  void attachOomRejectionObserver(RejectionObserver observer) override {
    std::lock_guard<std::mutex> lock(rejection_mu_);
    rejection_observers_.push_back(std::move(observer));
  }

 private:
  std::mutex rejection_mu_;
  std::vector<RejectionObserver> rejection_observers_;
};

}  // namespace fragfree_native
