// The launch policy of the resample/fuse kernels (interp_kernels.cuh): grid
// sizes, tile shapes, vector widths, and the template arguments of each
// launch. Launches go to the current CUDA stream; nothing is read back to the
// host, so they are capturable in CUDA graphs.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "interp_kernels.cuh"
#include "launch.cuh"
#include "robocache/interp_args.h"

namespace robocache {

// log2 of the lanes per query: enough vectors to cover D, at most a warp.
inline int group_log2(int64_t nvec) {
  int lg = 0;
  while (lg < 5 && (int64_t(1) << lg) < nvec)
    ++lg;
  return lg;
}

// The backward kernel's chunks of kWarpLanes queries of one batch row,
// kThreads / kWarpLanes chunks per block.
struct ChunkGrid {
  int64_t per_row, total;
  unsigned int blocks;
};

inline ChunkGrid chunk_grid(int64_t B, int64_t T, const char* op) {
  ChunkGrid g;
  g.per_row = (T + kWarpLanes - 1) / kWarpLanes;
  g.total = B * g.per_row;
  g.blocks = grid_blocks(g.total, kThreads / kWarpLanes, op, "queries", B * T);
  return g;
}

template <typename value_t, typename stamp_t, int MAXK>
InterpSources<value_t, stamp_t, MAXK> make_sources(const InterpInputs& in, int64_t first,
                                                   int64_t count, const std::vector<int64_t>& cols,
                                                   int vec) {
  InterpSources<value_t, stamp_t, MAXK> p{};
  p.K = static_cast<int>(count);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t j = first + k;
    p.source[k] =
        interp_source<value_t, stamp_t>(in.values[j], in.times[j], in.lengths[j], in.modes[j]);
    p.col[k] = cols[j];
    p.grad_values[k] = nullptr;
    p.log2G[k] = group_log2(in.values[j].size(2) / vec);
  }
  return p;
}

// The widest access (16 or 8 bytes, else one element) that every stream's
// rows, and their columns in a row of `cols_total` channels starting at
// `base`, allow: returned in elements.
template <typename value_t>
int vector_width(const InterpInputs& in, const std::vector<int64_t>& cols, int64_t cols_total,
                 const void* base, int64_t base_bstride = 0, int64_t base_tstride = 0) {
  for (const int bytes : {16, 8}) {
    const int V = bytes / static_cast<int>(sizeof(value_t));
    if (V <= 1)
      break;
    bool ok = aligned(base, bytes) && cols_total % V == 0 && base_bstride % V == 0 &&
              base_tstride % V == 0;
    for (size_t k = 0; ok && k < in.values.size(); ++k) {
      const at::Tensor& v = in.values[k];
      ok = v.size(2) % V == 0 && v.stride(0) % V == 0 && v.stride(1) % V == 0 && cols[k] % V == 0 &&
           aligned(v.data_ptr(), bytes);
    }
    if (ok)
      return V;
  }
  return 1;
}

// Launches `launch(sources, vec_width_tag, first_stream, launch_index)`
// once per kMaxStreams streams (once for resample), with the kernel template
// arguments chosen here: `vec` is vector_width's answer.
template <typename value_t, typename stamp_t, typename F>
void for_each_launch(const InterpInputs& in, const std::vector<int64_t>& cols, int vec,
                     F&& launch) {
  const int64_t K = static_cast<int64_t>(in.values.size());
  for (int64_t first = 0, index = 0; first < K; first += kMaxStreams, ++index) {
    const int64_t count = std::min<int64_t>(kMaxStreams, K - first);
    auto with_width = [&](auto vec_tag) {
      constexpr int V = decltype(vec_tag)::value;
      if (K == 1) {
        launch(make_sources<value_t, stamp_t, 1>(in, 0, 1, cols, V), vec_tag, first, index);
      } else {
        launch(make_sources<value_t, stamp_t, kMaxStreams>(in, first, count, cols, V), vec_tag,
               first, index);
      }
    };
    constexpr int V16 = kVec16<value_t>, V8 = kVec8<value_t>;
    if (vec == V16) {
      with_width(std::integral_constant<int, V16>{});
    } else if (V8 > 1 && vec == V8) {
      with_width(std::integral_constant<int, (V8 > 1 ? V8 : V16)>{});
    } else {
      with_width(std::integral_constant<int, 1>{});
    }
  }
}

// The forward kernel's tiles: `threads` (32, 64, 128 or 256: a block holds
// kThreads / threads tiles) take `queries` queries (a power of two in
// [32, 256]); docs/performance.md has the choices' timings:
//  - several streams (fuse): a whole block shares a tile, so that the
//    searches of every stream and the rows of a few wide queries spread over
//    256 threads, in fewer and fuller blocks than 32-query tiles give;
//  - one stream: two tiles of 128 threads a block, each of up to 128 queries
//    (one search a thread), so that the two tiles of a block search at
//    different times; more queries a thread would make each search phase
//    longer than the copying it hides behind.
// Fewer queries a tile when the launch would have fewer than `min_blocks`
// blocks for each multiprocessor, or a thread more than `items` output
// vectors.
struct ForwardTile {
  int threads, queries;
};

inline ForwardTile forward_tile(int64_t n, int64_t vectors_per_query, int K) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  ForwardTile t = K == 1 ? ForwardTile{128, 128} : ForwardTile{kThreads, 256};
  const int64_t items = 128;
  const int64_t tiles_per_block = kThreads / t.threads, min_blocks = 2;
  while (t.queries > kWarpLanes && (t.queries * vectors_per_query > items * t.threads ||
                                    n < t.queries * tiles_per_block * sms * min_blocks ||
                                    tiles_per_block * t.queries * K > kMaxPairs)) {
    t.queries >>= 1;
  }
  return t;
}

// out: (B, T, cols_total) contiguous; stream k writes columns [cols[k], cols[k] + D_k).
template <typename value_t, typename stamp_t>
void launch_interp_forward(const InterpInputs& in, const std::vector<int64_t>& cols,
                           at::Tensor& out, const char* op) {
  const auto q = interp_query<stamp_t>(in.query);
  const int64_t out_cols = out.size(2);
  const int64_t n = out.size(0) * out.size(1);
  auto cuda_stream = at::cuda::getCurrentCUDAStream();
  value_t* o = out.data_ptr<value_t>();
  const int vec = vector_width<value_t>(in, cols, out_cols, o);
  const int K = static_cast<int>(std::min<int64_t>(in.values.size(), kMaxStreams));
  const auto tile = forward_tile(n, out_cols / vec, K);
  const int64_t per_block = int64_t(tile.queries) * (kThreads / tile.threads);
  const unsigned int blocks = grid_blocks(n, per_block, op, "queries", n);
  for_each_launch<value_t, stamp_t>(
      in, cols, vec, [&](const auto& p, auto vec_tag, int64_t, int64_t) {
        constexpr int VEC = decltype(vec_tag)::value;
        constexpr int MAXK = sizeof(p.source) / sizeof(p.source[0]);
        interp_forward_kernel<VEC, MAXK><<<blocks, kThreads, 0, cuda_stream>>>(
            p, q, o, out_cols, n, tile.queries, tile.threads);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

// grad: (B, T, cols_total) with unit stride along channels. grad_values[k] is
// a zeroed (B, S_k, D_k) accumulator or nullptr. The query gradient of launch
// i (one per kMaxStreams streams) goes to grad_query_parts + i * B * T.
template <typename value_t, typename stamp_t>
void launch_interp_backward(const InterpInputs& in, const std::vector<int64_t>& cols,
                            const at::Tensor& grad,
                            const std::vector<compute_t<value_t>*>& grad_values,
                            weight_t<stamp_t>* grad_query_parts, const char* op) {
  const auto q = interp_query<stamp_t>(in.query);
  const auto grid = chunk_grid(grad.size(0), grad.size(1), op);
  const int64_t n = grad.size(0) * grad.size(1);
  auto cuda_stream = at::cuda::getCurrentCUDAStream();
  const value_t* g = grad.data_ptr<value_t>();
  const int64_t gb = grad.stride(0), gt = grad.stride(1);
  const int vec = vector_width<value_t>(in, cols, grad.size(2), g, gb, gt);
  for_each_launch<value_t, stamp_t>(
      in, cols, vec, [&](auto p, auto vec_tag, int64_t first, int64_t index) {
        constexpr int VEC = decltype(vec_tag)::value;
        constexpr int MAXK = sizeof(p.source) / sizeof(p.source[0]);
        for (int k = 0; k < p.K; ++k)
          p.grad_values[k] = grad_values[first + k];
        auto* gq = grad_query_parts ? grad_query_parts + index * n : nullptr;
        interp_backward_kernel<VEC, MAXK><<<grid.blocks, kThreads, 0, cuda_stream>>>(
            p, q, g, gb, gt, gq, grid.total, grid.per_row);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

}  // namespace robocache
