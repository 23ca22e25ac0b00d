// SlotPool<T>: the block records of a replay model, addressed by int32 index
// (stable across growth, unlike pointers into a vector), with freed slots
// reused last-in first-out. New() hands out a value-initialised T.
// Thread-safety: not thread-safe (each policy owns one).
#ifndef FRAGFREE_BENCH_REPLAY_SLOT_POOL_H_
#define FRAGFREE_BENCH_REPLAY_SLOT_POOL_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fragfree::replay {

template <typename T>
class SlotPool {
 public:
  int32_t New() {
    int32_t i;
    if (!free_.empty()) {
      i = free_.back();
      free_.pop_back();
      slots_[i] = T{};
    } else {
      i = static_cast<int32_t>(slots_.size());
      slots_.emplace_back();
      in_use_.push_back(false);
    }
    in_use_[i] = true;
    return i;
  }
  void Delete(int32_t i) {
    in_use_[i] = false;
    free_.push_back(i);
  }

  T& operator[](int32_t i) { return slots_[i]; }
  const T& operator[](int32_t i) const { return slots_[i]; }
  // Whether slot i holds a record (false once deleted).
  bool in_use(int32_t i) const { return in_use_[i]; }
  // Slots ever made, in use or free: indexes run below this.
  size_t size() const { return slots_.size(); }
  size_t free_slots() const { return free_.size(); }

 private:
  std::vector<T> slots_;
  std::vector<bool> in_use_;
  std::vector<int32_t> free_;
};

}  // namespace fragfree::replay

#endif  // FRAGFREE_BENCH_REPLAY_SLOT_POOL_H_
