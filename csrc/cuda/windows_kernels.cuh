// CUDA kernels of robocache::sample_windows and its backward (device code
// only; windows.cu sizes and launches them). A block takes a tile of Q
// consecutive queries: its first Q threads locate one query each
// (pick_window, windows.h) into shared memory, then all threads write the
// tile's rows. No host sync; any episode index or offsets stay in bounds (an
// episode outside [0, E) reads as an episode without samples).
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "robocache/windows.h"

namespace robocache {

constexpr int kMaxWindowTile = kThreads;  // queries per block, at most

// Bytes of output a tile aims at: enough work per block for short rows, one
// query per block for rows of this size or more.
constexpr int64_t kTileBytes = 16384;

// Queries a block takes for rows of `row_bytes` (host code, for launchers).
inline int tile_queries(int64_t row_bytes) {
  const int64_t q = kTileBytes / (row_bytes > 1 ? row_bytes : 1);
  return int(q < 1 ? 1 : (q > kMaxWindowTile ? kMaxWindowTile : q));
}

struct WindowArgs {
  const int64_t* times;
  const int64_t* offsets;
  const int64_t* episode;
  const int64_t* query;
  int64_t N, E, W, M;  // M = B * W queries
  WindowRule rule;
};

__device__ __forceinline__ int64_t clamp_row(int64_t x, int64_t lo, int64_t hi) {
  return x < lo ? lo : (x > hi ? hi : x);
}

__device__ __forceinline__ WindowPick pick_query(const WindowArgs& a, int64_t m) {
  const int64_t e = a.episode[m / a.W];
  int64_t begin = 0, end = 0;
  if (e >= 0 && e < a.E) {
    begin = clamp_row(a.offsets[e], 0, a.N);
    end = clamp_row(a.offsets[e + 1], begin, a.N);
  }
  return pick_window(a.times, begin, end, a.query[m], a.rule);
}

// Phase one: the tile's picks into shared memory, is_pad and age to global
// memory. Returns the number of queries in the tile.
__device__ __forceinline__ int locate_windows(const WindowArgs& a, int Q, WindowPick* picks,
                                              bool* is_pad, int64_t* age, int64_t& first) {
  first = int64_t(blockIdx.x) * Q;
  const int nq = int(a.M - first < Q ? a.M - first : Q);
  if (int(threadIdx.x) < nq) {
    const int64_t m = first + threadIdx.x;
    const WindowPick p = pick_query(a, m);
    picks[threadIdx.x] = p;
    if (is_pad != nullptr) {
      is_pad[m] = p.pad;
      age[m] = p.age;
    }
  }
  __syncthreads();
  return nq;
}

// One long row (at least kThreads chunks) by the whole block, each thread
// with kRowUnroll independent loads in flight before it stores (a plain
// loop keeps one, too few to cover the memory latency).
constexpr int kRowUnroll = 4;

template <typename chunk_t>
__device__ __forceinline__ void copy_row(const WindowPick& p, const chunk_t* __restrict__ values,
                                         int64_t chunks, chunk_t* __restrict__ dst) {
  int64_t c = threadIdx.x;
  if (p.empty) {
    for (; c < chunks; c += kThreads)
      dst[c] = chunk_t{};
    return;
  }
  const chunk_t* src = values + p.i0 * chunks;
  for (; c + (kRowUnroll - 1) * kThreads < chunks; c += kRowUnroll * kThreads) {
    chunk_t x[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      x[u] = src[c + u * kThreads];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      dst[c + u * kThreads] = x[u];
  }
  for (; c < chunks; c += kThreads)
    dst[c] = src[c];
}

// Phase two of the point modes (and any pick that reads one row): the
// tile's nq rows copied in chunks of `chunk_t` (16, 8, 4, 2 or 1 bytes; the
// launcher picks the widest that divides the row and both base addresses).
template <typename chunk_t>
__device__ __forceinline__ void gather_tile(const WindowPick* picks, int nq,
                                            const chunk_t* __restrict__ values,
                                            int64_t chunks_per_row, chunk_t* __restrict__ dst) {
  if (chunks_per_row >= kThreads) {  // long rows (images): row by row
    for (int r = 0; r < nq; ++r)
      copy_row(picks[r], values, chunks_per_row, dst + int64_t(r) * chunks_per_row);
    return;
  }
  const int64_t total = int64_t(nq) * chunks_per_row;
  for (int64_t i = threadIdx.x; i < total; i += kThreads) {
    const int64_t row = i / chunks_per_row, c = i - row * chunks_per_row;
    const WindowPick& p = picks[row];
    chunk_t x{};
    if (!p.empty)
      x = values[p.i0 * chunks_per_row + c];
    dst[i] = x;
  }
}

// Phase two of linear and mean: one thread per output value, computed in C.
template <typename value_t, typename C>
__device__ __forceinline__ void blend_tile(const WindowPick* picks, int nq,
                                           const value_t* __restrict__ values, int64_t D,
                                           value_t* __restrict__ dst) {
  const int64_t total = int64_t(nq) * D;
  for (int64_t i = threadIdx.x; i < total; i += kThreads) {
    const int64_t row = i / D, d = i - row * D;
    const WindowPick& p = picks[row];
    C y = C(0);
    if (p.empty) {
    } else if (p.hi > p.lo) {
      for (int64_t s = p.lo; s < p.hi; ++s)
        y += C(values[s * D + d]);
      y /= C(p.hi - p.lo);
    } else if (p.w > 0.0) {
      y = blend(C(values[p.i0 * D + d]), C(values[p.i1 * D + d]), C(p.w));
    } else {
      y = C(values[p.i0 * D + d]);
    }
    dst[i] = value_t(y);
  }
}

template <typename chunk_t>
__global__ void __launch_bounds__(kThreads)
    gather_windows_kernel(const WindowArgs a, const chunk_t* __restrict__ values,
                          int64_t chunks_per_row, int Q, chunk_t* __restrict__ out,
                          bool* __restrict__ is_pad, int64_t* __restrict__ age) {
  __shared__ WindowPick picks[kMaxWindowTile];
  int64_t first;
  const int nq = locate_windows(a, Q, picks, is_pad, age, first);
  gather_tile(picks, nq, values, chunks_per_row, out + first * chunks_per_row);
}

template <typename value_t, typename C>
__global__ void __launch_bounds__(kThreads)
    blend_windows_kernel(const WindowArgs a, const value_t* __restrict__ values, int64_t D, int Q,
                         value_t* __restrict__ out, bool* __restrict__ is_pad,
                         int64_t* __restrict__ age) {
  __shared__ WindowPick picks[kMaxWindowTile];
  int64_t first;
  const int nq = locate_windows(a, Q, picks, is_pad, age, first);
  blend_tile<value_t, C>(picks, nq, values, D, out + first * D);
}

// Backward: every output value's gradient added, with its weight, to the
// rows it was read from (float atomics into acc_t: float for half and
// bfloat16, else the value type).
template <typename grad_t, typename acc_t>
__global__ void __launch_bounds__(kThreads)
    scatter_window_grads_kernel(const WindowArgs a, const grad_t* __restrict__ grad, int64_t D,
                                int Q, acc_t* __restrict__ grad_values) {
  __shared__ WindowPick picks[kMaxWindowTile];
  int64_t first;
  const int nq = locate_windows(a, Q, picks, nullptr, nullptr, first);
  const int64_t total = int64_t(nq) * D;
  const grad_t* g = grad + first * D;
  for (int64_t i = threadIdx.x; i < total; i += kThreads) {
    const int64_t row = i / D, d = i - row * D;
    const acc_t gi = acc_t(g[i]);
    for_each_source(picks[row], [&](int64_t src, double weight) {
      atomicAdd(grad_values + src * D + d, acc_t(weight) * gi);
    });
  }
}

}  // namespace robocache
