// CUDA kernel of robocache::anchor_windows (device code only;
// anchor_windows.cu fills the arguments and launches it). One launch covers
// up to kMaxAnchorSources sources: a source is a stream's windows, or a table
// with a row per anchor row, which reads row index[b] itself. The grid is
// every source's tiles back to back, and each block finds its source by its
// block index. A tile is located as in sample_windows (windows_kernels.cuh),
// with each query's episode and time taken from its anchor row, then copied
// or blended by the source's own row rule. No host sync; an index outside
// the anchor stream's episodes gives episode -1 and windows of zeros marked
// as padding.
#pragma once

#include <ATen/OpMathType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>

#include "launch.cuh"
#include "robocache/windows.h"
#include "windows_kernels.cuh"

namespace robocache {

constexpr int kMaxAnchorSources = 16;

// How a source's rows reach the output: a copy in chunks of 16, 8, 4, 2 or
// 1 bytes (point modes), or a blend in the value type (linear and mean).
enum class RowRule : int32_t {
  Copy16,
  Copy8,
  Copy4,
  Copy2,
  Copy1,
  BlendFloat,
  BlendDouble,
  BlendHalf,
  BlendBFloat16
};

// One source of a launch: a stream's windows, or an anchor-row table.
struct AnchorSource {
  const void* values;
  const int64_t* times;
  const int64_t* offsets;
  const int64_t* deltas;
  void* out;
  bool* is_pad;
  int64_t* age;
  int64_t N, W, M;      // rows, queries per window, B * W queries
  int64_t row_units;    // chunks (copy) or values (blend) per row
  int64_t first_block;  // this source's first block in the grid
  WindowRule rule;
  int32_t Q;  // queries per tile
  RowRule row_rule;
  bool at_anchor_row;  // an anchor-row table: row index[b] itself (W = 1; no is_pad, age)
};

struct AnchorArgs {
  const int64_t* anchor_offsets;
  const int64_t* anchor_times;
  const int64_t* index;
  int64_t* episode;  // written by source 0's blocks; nullptr: not by this launch
  int64_t E, N_anchor;
  int32_t K;
  AnchorSource sources[kMaxAnchorSources];
};

__device__ __forceinline__ WindowPick pick_anchor_query(const AnchorArgs& a, const AnchorSource& s,
                                                        int64_t b, int64_t w, int64_t& e) {
  const int64_t row = a.index[b];
  e = row >= 0 && row < a.N_anchor ? episode_of_row(a.anchor_offsets, a.E, row) : -1;
  if (s.at_anchor_row) {  // a table row of an invalid index reads as zeros
    const bool valid = e >= 0 && e < a.E;
    return WindowPick{row, row, 0.0, row, row, 0, !valid, !valid};
  }
  int64_t begin = 0, end = 0, q = 0;
  if (e >= 0 && e < a.E) {
    begin = clamp_row(s.offsets[e], 0, s.N);
    end = clamp_row(s.offsets[e + 1], begin, s.N);
    q = wrapping_add(a.anchor_times[row], s.deltas[w]);
  } else {
    e = -1;
  }
  return pick_window(s.times, begin, end, q, s.rule);
}

template <typename chunk_t>
__device__ __forceinline__ void gather_source_tile(const AnchorSource& s, const WindowPick* picks,
                                                   int nq, int64_t first) {
  gather_tile(picks, nq, static_cast<const chunk_t*>(s.values), s.row_units,
              static_cast<chunk_t*>(s.out) + first * s.row_units);
}

template <typename value_t>
__device__ __forceinline__ void blend_source_tile(const AnchorSource& s, const WindowPick* picks,
                                                  int nq, int64_t first) {
  blend_tile<value_t, at::opmath_type<value_t>>(picks, nq, static_cast<const value_t*>(s.values),
                                                s.row_units,
                                                static_cast<value_t*>(s.out) + first * s.row_units);
}

template <bool kBlends>
__global__ void __launch_bounds__(kThreads)
    anchor_windows_kernel(const __grid_constant__ AnchorArgs a) {
  __shared__ WindowPick picks[kMaxWindowTile];
  int k = 0;
  while (k + 1 < a.K && int64_t(blockIdx.x) >= a.sources[k + 1].first_block)
    ++k;
  const AnchorSource& s = a.sources[k];
  const int64_t first = (int64_t(blockIdx.x) - s.first_block) * s.Q;
  const int nq = int(s.M - first < s.Q ? s.M - first : s.Q);
  if (int(threadIdx.x) < nq) {
    const int64_t m = first + threadIdx.x, b = m / s.W, w = m - b * s.W;
    int64_t e;
    const WindowPick p = pick_anchor_query(a, s, b, w, e);
    picks[threadIdx.x] = p;
    if (s.is_pad != nullptr) {
      s.is_pad[m] = p.pad;
      s.age[m] = p.age;
    }
    if (k == 0 && w == 0 && a.episode != nullptr)
      a.episode[b] = e;
  }
  __syncthreads();
  switch (s.row_rule) {
    case RowRule::Copy16:
      gather_source_tile<uint4>(s, picks, nq, first);
      break;
    case RowRule::Copy8:
      gather_source_tile<uint2>(s, picks, nq, first);
      break;
    case RowRule::Copy4:
      gather_source_tile<uint32_t>(s, picks, nq, first);
      break;
    case RowRule::Copy2:
      gather_source_tile<uint16_t>(s, picks, nq, first);
      break;
    case RowRule::Copy1:
      gather_source_tile<uint8_t>(s, picks, nq, first);
      break;
    default:
      break;
  }
  if (!kBlends)
    return;
  switch (s.row_rule) {
    case RowRule::BlendFloat:
      blend_source_tile<float>(s, picks, nq, first);
      break;
    case RowRule::BlendDouble:
      blend_source_tile<double>(s, picks, nq, first);
      break;
    case RowRule::BlendHalf:
      blend_source_tile<at::Half>(s, picks, nq, first);
      break;
    case RowRule::BlendBFloat16:
      blend_source_tile<at::BFloat16>(s, picks, nq, first);
      break;
    default:
      break;
  }
}

}  // namespace robocache
