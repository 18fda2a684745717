// The CUDA kernels behind resample (one stream) and fuse (up to kMaxStreams
// streams), forward and backward, and their host-side launchers.
//
// One launch covers every stream: a group of G lanes takes one query, and for
// each stream locates the query and writes (or back-propagates) that stream's
// D_k channels at its column offset in the output row. Launches go to the
// current stream; nothing is read back to the host, so they are capturable in
// CUDA graphs. Index math is int64 throughout.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "robocache/error.h"
#include "robocache/dispatch.h"
#include "robocache/resample_device.cuh"
#include "robocache/stream.h"

namespace robocache {

constexpr int kThreads = 256;
// Stream descriptions travel as a kernel parameter (about 100 bytes each).
constexpr int kMaxStreams = 32;

template <typename value_t, typename stamp_t, int MAXK>
struct Streams {
  StreamArgs<value_t, stamp_t> s[MAXK];
  int64_t col[MAXK];                       // first output column of each stream
  compute_t<value_t>* grad_values[MAXK];   // backward: (B, S_k, D_k) accumulators, or nullptr
  int K;
};

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads)
    multi_stream_forward_kernel(const Streams<value_t, stamp_t, MAXK> p, const QueryArgs<stamp_t> q,
                                value_t* __restrict__ out, int64_t out_cols, int64_t num_queries,
                                int log2G) {
  const int64_t i = int64_t(blockIdx.x) * (kThreads >> log2G) + (threadIdx.x >> log2G);
  if (i >= num_queries) return;
  const int G = 1 << log2G;
  const int lane = threadIdx.x & (G - 1);
  const int64_t b = i / q.T, t = i - b * q.T;
  value_t* row = out + i * out_cols;
  for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
    const auto loc = locate_query(p.s[k], q, b, t);
    resample_one<VEC>(p.s[k], loc, b, lane, G, row + p.col[k]);
  }
}

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads) multi_stream_backward_kernel(
    const Streams<value_t, stamp_t, MAXK> p, const QueryArgs<stamp_t> q,
    const value_t* __restrict__ grad, int64_t g_bstride, int64_t g_tstride,
    weight_t<stamp_t>* __restrict__ grad_query, int64_t num_queries, int log2G) {
  using W = weight_t<stamp_t>;
  const int64_t i = int64_t(blockIdx.x) * (kThreads >> log2G) + (threadIdx.x >> log2G);
  const int G = 1 << log2G;
  const int lane = threadIdx.x & (G - 1);
  // Lanes past the end stay for the group reduction (its shuffles need the whole warp).
  const bool active = i < num_queries;
  W slope = W(0);
  if (active) {
    const int64_t b = i / q.T, t = i - b * q.T;
    const value_t* grow = grad + b * g_bstride + t * g_tstride;
    for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
      const auto loc = locate_query(p.s[k], q, b, t);
      const auto partial = resample_one_backward<VEC>(p.s[k], loc, b, lane, G, grow + p.col[k],
                                                      p.grad_values[k], grad_query != nullptr);
      if (loc.dt != W(0)) slope += W(partial) / loc.dt;
    }
  }
  if (grad_query != nullptr) {
    slope = group_sum(slope, G);
    if (active && lane == 0) grad_query[i] = slope;
  }
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

// log2 of the lanes per query: enough 16-byte vectors to cover D, at most a warp.
inline int group_log2(int64_t nvec) {
  int lg = 0;
  while (lg < 5 && (int64_t(1) << lg) < nvec) ++lg;
  return lg;
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline unsigned int blocks_for(int64_t queries, int log2G, const char* op) {
  const int64_t per_block = kThreads >> log2G;
  const int64_t blocks = (queries + per_block - 1) / per_block;
  ROBOCACHE_CHECK(blocks <= int64_t(0x7fffffff), op, ": too many queries for one launch (", queries,
              ")");
  return static_cast<unsigned int>(blocks);
}

template <typename value_t, typename stamp_t, int MAXK>
Streams<value_t, stamp_t, MAXK> make_streams(const MultiStreamInputs& in, int64_t first,
                                             int64_t count,
                                             const std::vector<int64_t>& cols) {
  Streams<value_t, stamp_t, MAXK> p{};
  p.K = static_cast<int>(count);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t j = first + k;
    p.s[k] = stream_args<value_t, stamp_t>(in.values[j], in.times[j], in.lengths[j], in.modes[j]);
    p.col[k] = cols[j];
    p.grad_values[k] = nullptr;
  }
  return p;
}

// Whether every stream's rows, and their columns in a row of `cols_total`
// channels starting at `base`, can use 16-byte vectors.
template <typename value_t>
bool can_vectorize(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                   int64_t cols_total, const void* base, int64_t base_bstride = 0,
                   int64_t base_tstride = 0) {
  constexpr int V = kVec16<value_t>;
  if (!aligned16(base) || cols_total % V || base_bstride % V || base_tstride % V) return false;
  for (size_t k = 0; k < in.values.size(); ++k) {
    const at::Tensor& v = in.values[k];
    if (v.size(2) % V || v.stride(0) % V || v.stride(1) % V || cols[k] % V ||
        !aligned16(v.data_ptr()))
      return false;
  }
  return true;
}

template <typename value_t>
int max_group_log2(const MultiStreamInputs& in, int vec) {
  int lg = 0;
  for (const auto& v : in.values) lg = std::max(lg, group_log2(v.size(2) / vec));
  return lg;
}

// out: (B, T, cols_total) contiguous; stream k writes columns [cols[k], cols[k] + D_k).
template <typename value_t, typename stamp_t>
void launch_multi_stream_forward(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                                 at::Tensor& out, const char* op) {
  const auto q = query_args<stamp_t>(in.query);
  const int64_t n = out.size(0) * out.size(1), out_cols = out.size(2);
  const int64_t K = static_cast<int64_t>(in.values.size());
  auto stream = at::cuda::getCurrentCUDAStream();
  value_t* o = out.data_ptr<value_t>();
  const bool vec = can_vectorize<value_t>(in, cols, out_cols, o);
  constexpr int V = kVec16<value_t>;
  const int lg = max_group_log2<value_t>(in, vec ? V : 1);
  const unsigned int blocks = blocks_for(n, lg, op);
  // More streams than one parameter block holds: one launch per kMaxStreams.
  for (int64_t first = 0; first < K; first += kMaxStreams) {
    const int64_t count = std::min<int64_t>(kMaxStreams, K - first);
    if (K == 1) {
      const auto p = make_streams<value_t, stamp_t, 1>(in, 0, 1, cols);
      if (vec) {
        multi_stream_forward_kernel<V, 1><<<blocks, kThreads, 0, stream>>>(p, q, o, out_cols, n, lg);
      } else {
        multi_stream_forward_kernel<1, 1><<<blocks, kThreads, 0, stream>>>(p, q, o, out_cols, n, lg);
      }
    } else {
      const auto p = make_streams<value_t, stamp_t, kMaxStreams>(in, first, count, cols);
      if (vec) {
        multi_stream_forward_kernel<V, kMaxStreams>
            <<<blocks, kThreads, 0, stream>>>(p, q, o, out_cols, n, lg);
      } else {
        multi_stream_forward_kernel<1, kMaxStreams>
            <<<blocks, kThreads, 0, stream>>>(p, q, o, out_cols, n, lg);
      }
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

// grad: (B, T, cols_total) with unit stride along channels. grad_values[k] is
// a zeroed (B, S_k, D_k) accumulator or nullptr; grad_query (B*T) or nullptr.
// With more than kMaxStreams streams the query gradient of each launch is
// written to its own slice of grad_query_parts (n per launch), summed after.
template <typename value_t, typename stamp_t>
void launch_multi_stream_backward(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                                  const at::Tensor& grad,
                                  const std::vector<compute_t<value_t>*>& grad_values,
                                  weight_t<stamp_t>* grad_query_parts, const char* op) {
  const auto q = query_args<stamp_t>(in.query);
  const int64_t n = grad.size(0) * grad.size(1), cols_total = grad.size(2);
  const int64_t K = static_cast<int64_t>(in.values.size());
  auto stream = at::cuda::getCurrentCUDAStream();
  const value_t* g = grad.data_ptr<value_t>();
  const int64_t gb = grad.stride(0), gt = grad.stride(1);
  const bool vec = can_vectorize<value_t>(in, cols, cols_total, g, gb, gt);
  constexpr int V = kVec16<value_t>;
  const int lg = max_group_log2<value_t>(in, vec ? V : 1);
  const unsigned int blocks = blocks_for(n, lg, op);
  int64_t launch = 0;
  for (int64_t first = 0; first < K; first += kMaxStreams, ++launch) {
    const int64_t count = std::min<int64_t>(kMaxStreams, K - first);
    auto* gq = grad_query_parts ? grad_query_parts + launch * n : nullptr;
    if (K == 1) {
      auto p = make_streams<value_t, stamp_t, 1>(in, 0, 1, cols);
      p.grad_values[0] = grad_values[0];
      if (vec) {
        multi_stream_backward_kernel<V, 1><<<blocks, kThreads, 0, stream>>>(p, q, g, gb, gt, gq, n, lg);
      } else {
        multi_stream_backward_kernel<1, 1><<<blocks, kThreads, 0, stream>>>(p, q, g, gb, gt, gq, n, lg);
      }
    } else {
      auto p = make_streams<value_t, stamp_t, kMaxStreams>(in, first, count, cols);
      for (int64_t k = 0; k < count; ++k) p.grad_values[k] = grad_values[first + k];
      if (vec) {
        multi_stream_backward_kernel<V, kMaxStreams>
            <<<blocks, kThreads, 0, stream>>>(p, q, g, gb, gt, gq, n, lg);
      } else {
        multi_stream_backward_kernel<1, kMaxStreams>
            <<<blocks, kThreads, 0, stream>>>(p, q, g, gb, gt, gq, n, lg);
      }
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace robocache
