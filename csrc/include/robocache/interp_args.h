// The arguments of the interpolating ops (resample and fuse) as the kernels
// read them: one source (a stream's values, times, lengths and mode) per
// stream, and the queries. Shared by the CPU and CUDA kernels (host and
// device code), with the host code that builds them from tensors.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "robocache/interp.h"

namespace robocache {

// One stream as an interpolation source: values (B, S, D) with unit stride
// along D; times (B, S) or shared (S,) (batch stride 0); optional contiguous
// lengths (B,).
template <typename value_t, typename stamp_t>
struct InterpSource {
  const value_t* values;
  int64_t v_bstride, v_sstride;
  const stamp_t* times;
  int64_t t_bstride, t_stride;
  const int64_t* lengths;  // nullptr: every row has S valid samples
  int64_t S, D;
  Mode mode;
};

// The interpolation queries, (B, T) or shared (T,).
template <typename stamp_t>
struct InterpQuery {
  const stamp_t* query;
  int64_t q_bstride, q_stride;
  int64_t T;
};

template <typename value_t, typename stamp_t>
ROBOCACHE_HD Location<weight_t<stamp_t>> locate_query(const InterpSource<value_t, stamp_t>& s,
                                                      const InterpQuery<stamp_t>& q, int64_t b,
                                                      int64_t t, int64_t* hint = nullptr) {
  const int64_t L = s.lengths ? clamp_length(s.lengths[b], s.S) : s.S;
  return locate(s.times + b * s.t_bstride, s.t_stride, L, q.query[b * q.q_bstride + t * q.q_stride],
                s.mode, hint);
}

// values must have unit stride along D (see unit_stride_d) and lengths, if
// defined, must be contiguous.
template <typename value_t, typename stamp_t>
InterpSource<value_t, stamp_t> interp_source(const at::Tensor& values, const at::Tensor& times,
                                             const at::Tensor& lengths, Mode mode) {
  InterpSource<value_t, stamp_t> s;
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
InterpQuery<stamp_t> interp_query(const at::Tensor& query) {
  return {query.data_ptr<stamp_t>(), query.dim() == 2 ? query.stride(0) : 0, query.stride(-1),
          query.size(-1)};
}

// Everything the interp kernels (resample and fuse, csrc/*/interp_kernels.*)
// need for K streams, already validated: values have unit stride along D and
// lengths (where defined) are contiguous.
struct InterpInputs {
  std::vector<at::Tensor> values, times, lengths;
  std::vector<Mode> modes;
  at::Tensor query;
};

// Output column offsets of the streams; `total` gets the sum of the D_k.
inline std::vector<int64_t> column_offsets(const InterpInputs& in, int64_t* total) {
  std::vector<int64_t> cols(in.values.size());
  int64_t c = 0;
  for (size_t k = 0; k < in.values.size(); ++k) {
    cols[k] = c;
    c += in.values[k].size(2);
  }
  *total = c;
  return cols;
}

// values with unit stride along D (copies only when it has not).
inline at::Tensor unit_stride_d(const at::Tensor& values) {
  return values.size(2) <= 1 || values.stride(2) == 1 ? values : values.contiguous();
}

// Launch-ready inputs for one or more streams (no data is copied unless a
// tensor's layout demands it).
inline InterpInputs prepare_interp_inputs(at::TensorList values, at::TensorList times,
                                          const at::Tensor& query,
                                          const std::vector<std::optional<at::Tensor>>& lengths,
                                          std::vector<Mode> modes) {
  InterpInputs in;
  for (size_t k = 0; k < values.size(); ++k) {
    in.values.push_back(unit_stride_d(values[k]));
    in.times.push_back(times[k]);
    in.lengths.push_back(lengths[k].has_value() ? lengths[k]->contiguous() : at::Tensor());
  }
  in.modes = std::move(modes);
  in.query = query;
  return in;
}

}  // namespace robocache
