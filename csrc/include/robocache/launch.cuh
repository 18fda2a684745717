// Host-side helpers shared by the CUDA launchers of resample and fuse.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>

#include "robocache/resample_device.cuh"

namespace robocache {

constexpr int kThreads = 256;

// log2 of the lanes per query: enough 16-byte vectors to cover D, at most a warp.
inline int group_log2(int64_t nvec) {
  int lg = 0;
  while (lg < 5 && (int64_t(1) << lg) < nvec) ++lg;
  return lg;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline unsigned int blocks_for(int64_t groups, int log2G, const char* op) {
  const int64_t per_block = kThreads >> log2G;
  const int64_t blocks = (groups + per_block - 1) / per_block;
  TORCH_CHECK(blocks <= int64_t(0x7fffffff), op, ": problem too large for one launch (", groups,
              " queries)");
  return static_cast<unsigned int>(blocks);
}

template <typename value_t, typename stamp_t>
StreamArgs<value_t, stamp_t> stream_args(const at::Tensor& values, const at::Tensor& times,
                                         const at::Tensor& lengths, Mode mode) {
  StreamArgs<value_t, stamp_t> s;
  s.values = values.data_ptr<value_t>();
  s.v_bstride = values.stride(0);
  s.v_sstride = values.stride(1);
  s.times = times.data_ptr<stamp_t>();
  s.t_bstride = times.dim() == 2 ? times.stride(0) : 0;
  s.t_stride = times.stride(-1);
  s.lengths = lengths.defined() ? lengths.data_ptr<int64_t>() : nullptr;
  s.S = values.size(1);
  s.D = values.size(2);
  s.mode = mode;
  return s;
}

template <typename stamp_t>
QueryArgs<stamp_t> query_args(const at::Tensor& query) {
  return {query.data_ptr<stamp_t>(), query.dim() == 2 ? query.stride(0) : 0, query.stride(-1),
          query.size(-1)};
}

// Whether a stream's rows can be read with 16-byte vectors.
template <typename value_t>
bool can_vectorize(const at::Tensor& values) {
  constexpr int V = kVec16<value_t>;
  return values.size(2) % V == 0 && values.stride(0) % V == 0 && values.stride(1) % V == 0 &&
         aligned16(values.data_ptr());
}

// values with unit stride along D (copies only when it has not).
inline at::Tensor unit_stride_d(const at::Tensor& values) {
  return values.size(2) <= 1 || values.stride(2) == 1 ? values : values.contiguous();
}

}  // namespace robocache
