// The CUDA kernels of robocache::voxelize: device code only; the launches
// are in voxelize.cu (count_points_kernel also serves the mean backward,
// voxelize_backward.cu).
//
// One pass over the points (a thread per point). count goes straight into
// the zeroed dense grid (integer atomics, aggregated per warp). occupancy
// sets one bit per voxel, then one pass writes the dense grid once. sum, mean
// and max accumulate into compact per-point slots, then one pass writes the
// dense grid once. count and max are exact and deterministic (integer
// atomics, an ordered-integer atomic max); sum and mean use float atomics.
// Index math is int64.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "launch.cuh"
#include "robocache/dispatch.h"
#include "robocache/voxel.h"

namespace robocache {
// Internal linkage, as when these lived in one .cu: each .cu that includes
// this header compiles its own copy of the kernels it launches.
namespace {

// Atomic max on float/double through their bit patterns: non-negative values
// order like signed integers, negative ones in reverse as unsigned integers.
// A NaN stores the largest positive pattern, which then wins every compare,
// so NaN propagates like torch.amax.
__device__ __forceinline__ void atomic_max(float* addr, float x) {
  if (x != x) {
    atomicMax(reinterpret_cast<int*>(addr), 0x7fffffff);
  } else if (x >= 0.0f) {
    atomicMax(reinterpret_cast<int*>(addr), __float_as_int(x + 0.0f));  // -0 -> +0
  } else {
    atomicMin(reinterpret_cast<unsigned int*>(addr), __float_as_uint(x));
  }
}

__device__ __forceinline__ void atomic_max(double* addr, double x) {
  if (x != x) {
    atomicMax(reinterpret_cast<long long*>(addr), 0x7fffffffffffffffLL);
  } else if (x >= 0.0) {
    atomicMax(reinterpret_cast<long long*>(addr), __double_as_longlong(x + 0.0));
  } else {
    atomicMin(reinterpret_cast<unsigned long long*>(addr),
              static_cast<unsigned long long>(__double_as_longlong(x)));
  }
}

// The batch cell (b * cells + voxel) of this thread's point (a thread per
// point), or -1 for a dropped point or a thread past the last point. No lane
// returns early, so the warp votes after it see every lane.
template <typename point_t, typename feat_t>
__device__ __forceinline__ int64_t thread_cell(const VoxelArgs<point_t, feat_t>& a, int64_t cells) {
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.B * a.N)
    return -1;
  const int64_t b = i / a.N;
  const int64_t v = point_voxel(a, b, i - b * a.N);
  return v < 0 ? -1 : b * cells + v;
}

// Whether this lane's point falls in the same (kept) cell as its left
// neighbour's: depth-camera clouds arrive in pixel order, so neighbours
// often share a voxel. Every lane of the warp must call it (blocks are whole
// warps).
__device__ __forceinline__ bool repeats_left(int64_t cell) {
  const long long left = __shfl_up_sync(0xffffffffu, static_cast<long long>(cell), 1);
  return threadIdx.x % 32 > 0 && cell >= 0 && left == cell;
}

// count: one pass, straight into the zeroed dense grid. Points of a warp
// that fall into the same voxel add their count with one atomic.
template <typename point_t, typename feat_t>
__global__ void __launch_bounds__(kThreads)
    count_points_kernel(const VoxelArgs<point_t, feat_t> a, int64_t cells,
                        int32_t* __restrict__ counts) {
  const int64_t cell = thread_cell(a, cells);
  // The match is costly and only pays where neighbouring points share a voxel,
  // so a warp whose lanes never repeat their left neighbour's voxel (uniform
  // clouds) adds one per point; repeats further apart stay correct, unmerged.
  if (!__any_sync(0xffffffffu, repeats_left(cell))) {
    if (cell >= 0)
      atomicAdd(counts + cell, 1);
    return;
  }
  const auto key = static_cast<unsigned long long>(cell);
  const unsigned peers = __match_any_sync(0xffffffffu, key);
  const int leader = __ffs(peers) - 1;
  if (cell >= 0 && int(threadIdx.x % 32) == leader)
    atomicAdd(counts + cell, __popc(peers));
}

// occupancy, pass 1: one bit per voxel (words_per_cloud 32-bit words per
// cloud). Storing floats straight into the dense grid would write partial
// sectors at random all over it, each a read-modify-write of DRAM; the bits
// of a whole batch are 1/32 (float) of the grid and stay in L2. A point in
// the same voxel as its left neighbour skips its OR.
template <typename point_t>
__global__ void __launch_bounds__(kThreads)
    occupancy_bits_kernel(const VoxelArgs<point_t, float> a, int64_t words_per_cloud,
                          uint32_t* __restrict__ bits) {
  const int64_t cell = thread_cell(a, words_per_cloud * 32);
  const bool repeat = repeats_left(cell);
  if (cell < 0 || repeat)
    return;
  atomicOr(bits + (cell >> 5), 1u << (cell & 31));
}

// sum, mean, max, pass 1: each kept point claims its voxel's slot (the index
// of the first point to reach the voxel, recorded in `slot_of`) and
// accumulates its features into that compact slot; no dense accumulator.
// A slot holds acc_stride >= C accumulators; for float, acc_stride is a
// multiple of 4 and sum/mean add four channels per 16-byte atomic on sm_90.
// mean counts its points either in slot_count or, when count_lane >= 0, as
// 1.0 added to that spare padding lane of the slot (exact: the host picks it
// only while every count fits a float's 24-bit mantissa), which saves an
// atomic per point.
template <typename point_t, typename feat_t>
__global__ void __launch_bounds__(kThreads)
    accumulate_slots_kernel(const VoxelArgs<point_t, feat_t> a, Reduce reduce, int64_t cells,
                            int32_t* __restrict__ slot_of, compute_t<feat_t>* __restrict__ acc,
                            int64_t acc_stride, int32_t* __restrict__ slot_count,
                            int64_t count_lane) {
  using A = compute_t<feat_t>;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.B * a.N)
    return;
  const int64_t b = i / a.N, n = i - b * a.N;
  const int64_t v = point_voxel(a, b, n);
  if (v < 0)
    return;
  const int32_t prev = atomicCAS(slot_of + b * cells + v, -1, int32_t(i));
  const int64_t slot = prev == -1 ? i : prev;
  const feat_t* f = a.features + b * a.f_bstride + n * a.f_nstride;
  A* dst = acc + slot * acc_stride;
  if (reduce == Reduce::Max) {
    for (int64_t c = 0; c < a.C; ++c)
      atomic_max(dst + c, A(f[c * a.f_cstride]));
    return;
  }
  if (reduce == Reduce::Mean && count_lane < 0)
    atomicAdd(slot_count + slot, 1);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (std::is_same<A, float>::value) {
    if (acc_stride % 4 == 0) {
      for (int64_t c = 0; c < a.C; c += 4) {
        float x[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          x[k] = c + k < a.C ? float(f[(c + k) * a.f_cstride]) : c + k == count_lane ? 1.0f : 0.0f;
        }
        atomicAdd(reinterpret_cast<float4*>(dst + c), make_float4(x[0], x[1], x[2], x[3]));
      }
      return;
    }
  }
#endif
  for (int64_t c = 0; c < a.C; ++c)
    atomicAdd(dst + c, A(f[c * a.f_cstride]));
  if (count_lane >= 0)
    atomicAdd(dst + count_lane, A(1));
}

// Pass 2: the dense (B, C, X, Y, Z) result, written once; empty voxels are 0.
// A thread takes U groups of R consecutive voxels of one cloud (R = 4 when
// the cells of a cloud are a multiple of 4, so its loads and stores are
// vectors); group u of block k is group (k * U + u) * kThreads + threadIdx.x,
// so each of the U steps is coalesced across the block. The U slot loads are
// issued before any of them is used, so a thread keeps several slot gathers
// in flight, not one (docs/performance.md).
template <typename T, int R>
struct alignas(sizeof(T) * R) Run {
  T x[R];
};

constexpr int kDenseGroups = 4;  // U

// One group of R voxels of pass 2: their slots, and `dst`, their first
// voxel's channel 0 in the output.
template <typename feat_t, int R>
__device__ __forceinline__ void write_dense_group(const Run<int32_t, R>& slots,
                                                  const compute_t<feat_t>* __restrict__ acc,
                                                  int64_t acc_stride,
                                                  const int32_t* __restrict__ slot_count,
                                                  int64_t count_lane, Reduce reduce, int64_t C,
                                                  feat_t* __restrict__ dst, int64_t cells) {
  using A = compute_t<feat_t>;
  // `any` is implied by slot >= 0 below, but it lets the compiler skip an
  // empty group's gathers as one branch, which keeps the float kernel's
  // registers down.
  bool any = false;
  A scale[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t slot = slots.x[r];
    any |= slot >= 0;
    A scale_r = A(1);
    if (slot >= 0 && reduce == Reduce::Mean) {
      scale_r =
          A(1) / (count_lane >= 0 ? acc[slot * acc_stride + count_lane] : A(slot_count[slot]));
    }
    scale[r] = scale_r;
  }
  if constexpr (std::is_same<A, float>::value) {
    if (acc_stride % 4 == 0) {
      // Rows of a multiple of 4 floats (float sum and mean, whose slots
      // are padded; max when C is a multiple of 4): 16-byte loads, four
      // channels each, so a cell costs one request per 4 channels instead
      // of one per channel.
      for (int64_t c0 = 0; c0 < C; c0 += 4) {
        float4 x[R];
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int64_t slot = slots.x[r];
          x[r] = any && slot >= 0 ? *reinterpret_cast<const float4*>(acc + slot * acc_stride + c0)
                                  : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          if (c0 + k >= C)
            break;
          Run<feat_t, R> y;
#pragma unroll
          for (int r = 0; r < R; ++r) {
            const float v = k == 0 ? x[r].x : k == 1 ? x[r].y : k == 2 ? x[r].z : x[r].w;
            y.x[r] = feat_t(v * scale[r]);
          }
          *reinterpret_cast<Run<feat_t, R>*>(dst + (c0 + k) * cells) = y;
        }
      }
      return;
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    Run<feat_t, R> y;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t slot = slots.x[r];
      y.x[r] = any && slot >= 0 ? feat_t(acc[slot * acc_stride + c] * scale[r]) : feat_t(0);
    }
    *reinterpret_cast<Run<feat_t, R>*>(dst + c * cells) = y;
  }
}

template <typename feat_t, int R>
__global__ void __launch_bounds__(kThreads)
    write_dense_kernel(const int32_t* __restrict__ slot_of,
                       const compute_t<feat_t>* __restrict__ acc, int64_t acc_stride,
                       const int32_t* __restrict__ slot_count, int64_t count_lane, Reduce reduce,
                       int64_t C, int64_t cells, int64_t total_cells, feat_t* __restrict__ out) {
  constexpr int U = kDenseGroups;
  const int64_t g0 = int64_t(blockIdx.x) * kThreads * U + threadIdx.x;
  Run<int32_t, R> slots[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t e = (g0 + u * kThreads) * R;
    if (e < total_cells) {
      slots[u] = *reinterpret_cast<const Run<int32_t, R>*>(slot_of + e);
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r)
        slots[u].x[r] = -1;
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t e = (g0 + u * kThreads) * R;
    if (e < total_cells) {
      const int64_t b = e / cells;
      write_dense_group<feat_t, R>(slots[u], acc, acc_stride, slot_count, count_lane, reduce, C,
                                   out + b * C * cells + (e - b * cells), cells);
    }
  }
}

// occupancy, pass 2, when the cells of a cloud are a multiple of 32 (every
// bit word lies in one cloud, and word w covers cells [32 w, 32 w + 32) of the
// flattened batch): a warp loads 32 consecutive words with one coalesced load
// and writes their 1024 voxels in 8 steps of 4 voxels a lane, each lane
// taking its 4 bits from the owning lane by shuffle. One load serves 8
// vector stores, where a thread per 4 voxels would wait on its word before
// its one store (docs/performance.md). A cloud with a negative length comes
// out NaN (see poison_negative_lengths).
template <typename point_t>
__global__ void __launch_bounds__(kThreads)
    write_occupancy_words_kernel(const uint32_t* __restrict__ bits, int64_t words, int64_t cells,
                                 const int64_t* __restrict__ lengths, point_t* __restrict__ out) {
  const int lane = threadIdx.x % 32;
  const int64_t w0 = int64_t(blockIdx.x) * kThreads + threadIdx.x - lane;  // the warp's first word
  if (w0 >= words)
    return;  // uniform across the warp
  const uint32_t word = w0 + lane < words ? bits[w0 + lane] : 0u;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int owner = 4 * k + lane / 8;
    const uint32_t nibble = __shfl_sync(0xffffffffu, word, owner) >> (4 * (lane % 8));
    const int64_t e = (w0 + owner) * 32 + 4 * (lane % 8);
    if (w0 + owner >= words)
      continue;
    Run<point_t, 4> y;
#pragma unroll
    for (int r = 0; r < 4; ++r)
      y.x[r] = point_t((nibble >> r) & 1u);
    if (lengths != nullptr && lengths[e / cells] < 0) {
#pragma unroll
      for (int r = 0; r < 4; ++r)
        y.x[r] = std::numeric_limits<point_t>::quiet_NaN();
    }
    *reinterpret_cast<Run<point_t, 4>*>(out + e) = y;
  }
}

// occupancy, pass 2, for other cell counts: the dense grid written once from
// the bits. A thread takes R consecutive voxels of one cloud (R = 4 when the
// cells of a cloud are a multiple of 4: vector stores, and the 4 bits share a
// word). A cloud with a negative length comes out NaN.
template <typename point_t, int R>
__global__ void __launch_bounds__(kThreads)
    write_occupancy_kernel(const uint32_t* __restrict__ bits, int64_t words_per_cloud,
                           int64_t cells, int64_t total_cells, const int64_t* __restrict__ lengths,
                           point_t* __restrict__ out) {
  const int64_t e = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * R;
  if (e >= total_cells)
    return;
  const int64_t b = e / cells, v = e - b * cells;
  const bool poison = lengths != nullptr && lengths[b] < 0;
  Run<point_t, R> y;
  if (R == 4) {
    const uint32_t word = bits[b * words_per_cloud + (v >> 5)] >> (v & 31);
#pragma unroll
    for (int r = 0; r < R; ++r)
      y.x[r] = point_t((word >> r) & 1u);
  } else {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int64_t w = v + r;
      y.x[r] = point_t((bits[b * words_per_cloud + (w >> 5)] >> (w & 31)) & 1u);
    }
  }
  if (poison) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      y.x[r] = std::numeric_limits<point_t>::quiet_NaN();
  }
  *reinterpret_cast<Run<point_t, R>*>(out + e) = y;
}

// The no-host-sync contract for lengths: a cloud with a negative length
// comes out visibly wrong (NaN, or -1 for counts) instead of silently empty.
template <typename out_t>
__global__ void __launch_bounds__(kThreads)
    poison_negative_lengths_kernel(const int64_t* __restrict__ lengths, int64_t per_cloud,
                                   int64_t total, out_t* __restrict__ out, out_t poison) {
  const int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= total)
    return;
  if (lengths[e / per_cloud] < 0)
    out[e] = poison;
}

}  // namespace
}  // namespace robocache
