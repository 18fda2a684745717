// Marks shared between a native object's threads and the caller's Python
// thread (robocache/data/sampler/marks.py): int64 counters in a CPU tensor
// the native object owns, which Python reads and writes in place, without a
// call. The native side's loads and stores are atomic.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/zeros.h>

#include <cstdint>

namespace robocache {

// `count` marks, each 0.
inline at::Tensor make_marks(int64_t count) {
  return at::zeros({count}, at::kLong);
}

inline int64_t load_mark(const at::Tensor& marks, int64_t which) {
  return __atomic_load_n(marks.data_ptr<int64_t>() + which, __ATOMIC_ACQUIRE);
}

inline void store_mark(const at::Tensor& marks, int64_t which, int64_t value) {
  __atomic_store_n(marks.data_ptr<int64_t>() + which, value, __ATOMIC_RELEASE);
}

}  // namespace robocache
