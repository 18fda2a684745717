// The CUDA kernels behind resample (one stream) and fuse (up to kMaxStreams
// streams), forward and backward: device code only. Their launch policy
// (grid sizes, vector widths, template dispatch) is in interp_launch.cuh.
//
// One launch covers every stream (up to kMaxStreams): each query is located
// in every stream, and that stream's D_k channels are written (or
// back-propagated) at its column offset in the output row. Index math is
// int64 throughout.
#pragma once

#include <cstdint>

#include "interp_backward.cuh"
#include "launch.cuh"
#include "robocache/dispatch.h"
#include "robocache/interp_args.h"

namespace robocache {

// The sources of one launch travel as a kernel parameter (about 100 bytes a
// stream): at most kMaxStreams streams a launch.
constexpr int kMaxStreams = 32;

template <typename value_t, typename stamp_t, int MAXK>
struct InterpSources {
  InterpSource<value_t, stamp_t> source[MAXK];
  int64_t col[MAXK];                      // first output column of each stream
  compute_t<value_t>* grad_values[MAXK];  // backward: (B, S_k, D_k) accumulators, or nullptr
  int log2G[MAXK];                        // log2 of the lanes that share one query's channels
  int K;
};

// Lanes of a warp. Backward: a warp takes a chunk of up to kWarpLanes
// consecutive queries of one batch row. Its lanes locate their queries
// together (warp_locate: one row, so the pivot search applies), then the warp
// back-propagates every query's channels: groups of G lanes take one query at
// a time, reading its location from the owning lane by shuffle. When a lane
// holds at most one vector of a query's channels, each group takes
// consecutive queries and merges their additions to a shared row in
// registers (PendingRow).
constexpr int kWarpLanes = 32;
constexpr unsigned kFullMask = 0xffffffffu;

template <typename W>
__device__ __forceinline__ Location<W> shuffle_location(const Location<W>& loc, int src) {
  Location<W> out;
  out.i0 = __shfl_sync(kFullMask, loc.i0, src);
  out.i1 = __shfl_sync(kFullMask, loc.i1, src);
  out.w = __shfl_sync(kFullMask, loc.w, src);
  out.dt = __shfl_sync(kFullMask, loc.dt, src);
  out.nan = __shfl_sync(kFullMask, int(loc.nan), src) != 0;
  return out;
}

// upper_bound(times, stride, L, q) for every lane of a warp whose lanes all
// search the same row: the warp loads 31 evenly spaced pivots at once (one
// round trip), each lane finds its bracket among them in shared memory, and
// bisects only that 1/32 of the row, saving five dependent round trips.
// `pivots` is this warp's 32 entries of shared memory.
template <typename stamp_t>
__device__ __forceinline__ int64_t warp_upper_bound(const stamp_t* times, int64_t stride, int64_t L,
                                                    stamp_t q, int lane, stamp_t* pivots) {
  // Pivot j (j < 31) is sample ((j + 1) * L) / 32.
  if (lane < 31)
    pivots[lane] = times[(((lane + 1) * L) >> 5) * stride];
  __syncwarp();
  int lo = 0, hi = 31;  // c = the number of pivots <= q
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (pivots[mid] <= q) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  __syncwarp();  // the pivots are read before the next call overwrites them
  const int c = lo;
  const int64_t first = c == 0 ? 0 : ((int64_t(c) * L) >> 5) + 1;  // past pivot c - 1
  const int64_t last = c == 31 ? L : (int64_t(c + 1) * L) >> 5;    // at pivot c
  return first + upper_bound(times + first * stride, stride, last - first, q);
}

// Location of this lane's query (batch row b, time qv) in stream s, for a
// warp whose lanes call it together (`mine` is false for lanes without a
// query). Lanes whose queries search the same row (the usual case) search
// together, through the warp's pivots.
template <typename value_t, typename stamp_t>
__device__ __forceinline__ Location<weight_t<stamp_t>> warp_locate(
    const InterpSource<value_t, stamp_t>& s, int64_t b, stamp_t qv, bool mine, int lane,
    stamp_t* pivots) {
  using W = weight_t<stamp_t>;
  Location<W> loc{0, 0, W(0), W(0), true};
  const int64_t L = mine ? (s.lengths ? clamp_length(s.lengths[b], s.S) : s.S) : 0;
  const stamp_t* row = s.times + b * s.t_bstride;
  const int64_t L0 = __shfl_sync(kFullMask, L, 0);
  const long long row0 = __shfl_sync(kFullMask, reinterpret_cast<long long>(row), 0);
  if (L0 >= 64 &&
      __all_sync(kFullMask, !mine || (L == L0 && reinterpret_cast<long long>(row) == row0))) {
    const int64_t kq =
        warp_upper_bound(reinterpret_cast<const stamp_t*>(row0), s.t_stride, L0, qv, lane, pivots);
    if (mine && !is_nan(qv))
      loc = locate_at(row, s.t_stride, L, qv, s.mode, kq);
  } else if (mine) {
    loc = locate(row, s.t_stride, L, qv, s.mode);
  }
  return loc;
}

// Where a query reads its source rows: `off` is the element offset of row i0
// in the stream's values (row i1 = i0 + 1 follows at + v_sstride, and is read
// only when w != 0), or -1 for a NaN output.
template <typename W>
struct alignas(16) RowRef {
  int64_t off;
  W w;
};

// Forward. A tile of TT threads (a warp, a few warps, or the whole block)
// takes Q consecutive queries of the flattened (B * T) (Q a multiple of 32).
// Its threads locate every (stream, query) pair of the tile into shared
// memory (locate_tile), then write the tile's rows (gather_tile), each thread
// issuing the loads of kBatch output vectors before their stores, so that
// many bytes are in flight while other tiles search. The tiles of a
// block hold at most kMaxPairs pairs together. One launch covers every
// stream.
constexpr int kMaxPairs = 1024;
constexpr int kBatch = 4;

// Writes the RowRef of pair (k, i) of the tile to refs[k * Q + i].
template <int MAXK, typename value_t, typename stamp_t>
__device__ __forceinline__ void locate_tile(const InterpSources<value_t, stamp_t, MAXK>& p,
                                            const InterpQuery<stamp_t>& q, int64_t first, int nq,
                                            int Q, RowRef<weight_t<stamp_t>>* refs, stamp_t* pivots,
                                            int tid, int TT) {
  using W = weight_t<stamp_t>;
  const int K = MAXK == 1 ? 1 : p.K;
  const int lane = threadIdx.x % kWarpLanes;
  for (int base = tid & ~(kWarpLanes - 1); base < K * Q; base += TT) {
    // Uniform across the warp (Q is a multiple of 32); a constant for one
    // stream, which keeps p.source in the parameter space.
    const int k = MAXK == 1 ? 0 : base / Q;
    const int i = base - k * Q + lane;
    if (base - k * Q >= nq)
      continue;  // uniform: past the tile's last query
    const bool mine = i < nq;
    int64_t b = 0;
    stamp_t qv = stamp_t(0);
    if (mine) {
      const int64_t m = first + i;
      b = m / q.T;
      qv = q.query[b * q.q_bstride + (m - b * q.T) * q.q_stride];
    }
    const auto& s = p.source[k];
    const auto loc = warp_locate(s, b, qv, mine, lane, pivots + (threadIdx.x & ~(kWarpLanes - 1)));
    if (mine) {
      refs[k * Q + i] = RowRef<W>{loc.nan ? -1 : b * s.v_bstride + loc.i0 * s.v_sstride, loc.w};
    }
  }
}

// Writes the tile's output rows from the RowRef of pair (k, row) at
// refs[k * Q + row]. The quick pass (kExact false) blends with
// blend_quick_lanes and returns false if any value it wrote is not finite;
// the caller then runs the exact pass (blend, value by value), which rewrites
// the same values from the same thread. Keeping the exact path out of the
// quick loop, with one row in flight, keeps the quick loop free of spills.
template <bool kExact, int VEC, int MAXK, typename value_t, typename stamp_t>
__device__ __forceinline__ bool gather_tile(const InterpSources<value_t, stamp_t, MAXK>& p,
                                            const RowRef<weight_t<stamp_t>>* refs, int Q, int nq,
                                            value_t* __restrict__ out, int64_t out_cols, int tid,
                                            int TT) {
  using W = weight_t<stamp_t>;
  using IO = VecIO<value_t, VEC>;
  using C = typename IO::C;
  C non_finite = C(0);
  for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
    const auto& s = p.source[k];
    // Groups of G lanes share a query's channels; R groups per tile.
    const int lg = MAXK == 1 ? p.log2G[0] : p.log2G[k];
    const int G = 1 << lg, R = TT >> lg;
    const int sub = tid & (G - 1), r0 = tid >> lg;
    const int64_t nvec = s.D / VEC;
    const RowRef<W>* tile = refs + k * Q;
    value_t* dst = out + p.col[k];
    for (int64_t v = sub; v < nvec; v += G) {
      // The exact pass runs rarely. For 16-bit values and in the
      // multi-stream kernels it takes one row at a time, since kBatch rows
      // in flight there make the quick loop spill; elsewhere one row at a
      // time takes more registers than kBatch rows.
      constexpr bool kOneRow = kExact && (sizeof(value_t) == 2 || MAXK > 1);
      constexpr int NB = kOneRow ? 1 : kBatch;
      for (int r = r0; r < nq; r += NB * R) {
        // Offsets, and weights already in the compute type: fewer registers.
        int64_t off[NB];
        C w[NB];
        typename IO::Raw x0[NB], x1[NB];
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          const int row = r + u * R;
          off[u] = -1;
          w[u] = C(0);
          if (row < nq) {
            off[u] = tile[row].off;
            w[u] = C(tile[row].w);
          }
          if (off[u] >= 0) {
            const value_t* r0p = s.values + off[u] + v * VEC;
            x0[u] = IO::load_raw(r0p);
            if (w[u] != C(0))
              x1[u] = IO::load_raw(r0p + s.v_sstride);
          }
        }
#pragma unroll
        for (int u = 0; u < NB; ++u) {
          const int row = r + u * R;
          if (row < nq) {
            typename IO::Frag y;
            if (off[u] < 0) {
              y = IO::nan();
            } else {
              y = IO::convert(x0[u]);
              if (w[u] != C(0)) {
                const auto y1 = IO::convert(x1[u]);
                if constexpr (kExact) {
#pragma unroll
                  for (int e = 0; e < VEC; ++e)
                    y[e] = blend(y[e], y1[e], w[u]);
                } else {
                  blend_quick_lanes<VEC>(y, y1, w[u], non_finite);
                }
              }
            }
            IO::store(dst + row * out_cols + v * VEC, y);
          }
        }
      }
    }
  }
  return non_finite == C(0);
}

// Orders the tile's shared-memory writes before its reads: the block, a
// warp, or a named barrier for the TT threads of tile g.
__device__ __forceinline__ void tile_sync(int g, int TT) {
  if (TT == kThreads) {
    __syncthreads();
  } else if (TT == kWarpLanes) {
    __syncwarp();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(g + 1), "r"(TT) : "memory");
  }
}

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads, 4)
    interp_forward_kernel(const InterpSources<value_t, stamp_t, MAXK> p,
                          const InterpQuery<stamp_t> q, value_t* __restrict__ out, int64_t out_cols,
                          int64_t n, int Q, int TT) {
  __shared__ RowRef<weight_t<stamp_t>> refs[kMaxPairs];
  __shared__ stamp_t pivots[kThreads];
  const int K = MAXK == 1 ? 1 : p.K;
  const int g = threadIdx.x / TT, tid = threadIdx.x % TT;
  const int64_t first = (int64_t(blockIdx.x) * (kThreads / TT) + g) * Q;
  if (first >= n)
    return;  // uniform across the tile
  const int nq = int(n - first < Q ? n - first : Q);
  RowRef<weight_t<stamp_t>>* tile = refs + g * Q * K;
  locate_tile(p, q, first, nq, Q, tile, pivots, tid, TT);
  tile_sync(g, TT);
  if (!gather_tile<false, VEC>(p, tile, Q, nq, out + first * out_cols, out_cols, tid, TT))
    gather_tile<true, VEC>(p, tile, Q, nq, out + first * out_cols, out_cols, tid, TT);
}

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads)
    interp_backward_kernel(const InterpSources<value_t, stamp_t, MAXK> p,
                           const InterpQuery<stamp_t> q, const value_t* __restrict__ grad,
                           int64_t g_bstride, int64_t g_tstride,
                           weight_t<stamp_t>* __restrict__ grad_query, int64_t num_chunks,
                           int64_t chunks_per_row) {
  using W = weight_t<stamp_t>;
  using C = compute_t<value_t>;
  const int64_t chunk = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / kWarpLanes;
  if (chunk >= num_chunks)
    return;  // uniform across the warp
  const int lane = threadIdx.x % kWarpLanes;
  const int64_t b = chunk / chunks_per_row;
  const int64_t t0 = (chunk - b * chunks_per_row) * kWarpLanes;
  const int nq = int(q.T - t0 < kWarpLanes ? q.T - t0 : kWarpLanes);
  const bool mine = lane < nq;
  const stamp_t qv = mine ? q.query[b * q.q_bstride + (t0 + lane) * q.q_stride] : stamp_t(0);
  const value_t* grows = grad + b * g_bstride + t0 * g_tstride;
  __shared__ stamp_t pivots[kThreads];
  W slope = W(0);  // d loss / d (this lane's query)
  for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
    const auto& s = p.source[k];
    const auto loc = warp_locate(s, b, qv, mine, lane, pivots + (threadIdx.x & ~(kWarpLanes - 1)));
    const int lg = MAXK == 1 ? p.log2G[0] : p.log2G[k];
    const int G = 1 << lg, per_iter = kWarpLanes >> lg;
    const int group = lane >> lg, sub = lane & (G - 1);
    const bool query_grad = grad_query != nullptr;
    if (s.D / VEC <= G) {
      // A lane has at most one vector of a query's channels: group g takes
      // queries g G .. g G + G - 1 in order and merges the contributions of
      // consecutive queries to one row before adding them (PendingRow). The
      // lane that owns query g G + i is lane i of group g, so the group's
      // sum needs no shuffle back.
      PendingRow<C, VEC> pending;
      C* acc = p.grad_values[k] ? p.grad_values[k] + b * s.S * s.D + sub * VEC : nullptr;
      for (int i = 0; i < G && i < nq; ++i) {  // uniform: group 0 has the most queries
        const int src = group * G + i;
        const auto l = shuffle_location(loc, src);
        C partial = C(0);
        if (src < nq) {
          partial = resample_one_backward_merged<VEC>(
              s, l, b, sub, grows + src * g_tstride + p.col[k], acc, query_grad, pending);
        }
        if (query_grad) {
          partial = group_sum(partial, G);
          if (sub == i && loc.dt != W(0))
            slope += W(partial) / loc.dt;
        }
      }
      if (acc)
        pending.flush(acc, s.D);
      continue;
    }
    for (int j = 0; j < nq; j += per_iter) {
      const int src = j + group;
      const auto l = shuffle_location(loc, src);
      C partial = C(0);
      if (src < nq) {
        partial = resample_one_backward<VEC>(s, l, b, sub, G, grows + src * g_tstride + p.col[k],
                                             p.grad_values[k], query_grad);
      }
      if (query_grad) {
        // g . (v1 - v0) for query src, summed over its group, back to lane src.
        partial = group_sum(partial, G);
        const C total = __shfl_sync(kFullMask, partial, ((lane - j) & (per_iter - 1)) << lg);
        if (lane >= j && lane < j + per_iter && loc.dt != W(0))
          slope += W(total) / loc.dt;
      }
    }
  }
  if (grad_query != nullptr && mine)
    grad_query[b * q.T + t0 + lane] = slope;
}

}  // namespace robocache
