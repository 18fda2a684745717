// The CUDA kernels behind resample (one stream) and fuse (up to kMaxStreams
// streams), forward and backward, and their host-side launchers.
//
// One launch covers every stream (up to kMaxStreams): each query is located
// in every stream, and that stream's D_k channels are written (or
// back-propagated) at its column offset in the output row. Launches go to
// the current stream; nothing is read back to the host, so they are
// capturable in CUDA graphs. Index math is int64 throughout.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <type_traits>
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
  int log2G[MAXK];                         // log2 of the lanes that share one query's channels
  int K;
};

// Backward: a warp takes a chunk of up to 32 consecutive queries of one batch
// row. Its lanes locate their queries together (warp_locate: one row, so the
// pivot search applies), then the warp back-propagates every query's
// channels: groups of G lanes take one query each, reading its location from
// the owning lane by shuffle.
constexpr int kChunk = 32;
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

// The first index in [0, n) of row (element stride `stride`) whose value
// satisfies pred, or n: pred must be false, then true, along the row.
template <typename stamp_t, typename Pred>
__device__ __forceinline__ int64_t partition_point(const stamp_t* row, int64_t stride, int64_t n,
                                                   const Pred& pred) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    if (pred(row[mid * stride])) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// partition_point(row, stride, n, pred) for every lane of a warp whose lanes
// all search the same row (each with its own pred): the warp loads 31 evenly
// spaced pivots at once (one round trip), each lane finds its bracket among
// them in shared memory, and bisects only that 1/32 of the row, saving five
// dependent round trips. `pivots` is this warp's 32 entries of shared memory.
template <typename stamp_t, typename Pred>
__device__ __forceinline__ int64_t warp_partition_point(const stamp_t* row, int64_t stride,
                                                        int64_t n, const Pred& pred, int lane,
                                                        stamp_t* pivots) {
  // Pivot j (j < 31) is element ((j + 1) * n) / 32.
  if (lane < 31) pivots[lane] = row[(((lane + 1) * n) >> 5) * stride];
  __syncwarp();
  int lo = 0, hi = 31;  // c = the number of pivots before the partition point
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (pred(pivots[mid])) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  __syncwarp();  // the pivots are read before the next call overwrites them
  const int c = lo;
  const int64_t first = c == 0 ? 0 : ((int64_t(c) * n) >> 5) + 1;  // past pivot c - 1
  const int64_t last = c == 31 ? n : (int64_t(c + 1) * n) >> 5;     // at pivot c
  return first + partition_point(row + first * stride, stride, last - first, pred);
}

// upper_bound(times, stride, L, q) (the number of samples <= q; NaN q gives
// 0) for a warp whose lanes all search the same row.
template <typename stamp_t>
__device__ __forceinline__ int64_t warp_upper_bound(const stamp_t* times, int64_t stride, int64_t L,
                                                    stamp_t q, int lane, stamp_t* pivots) {
  return warp_partition_point(times, stride, L, [q](stamp_t t) { return !(t <= q); }, lane, pivots);
}

// Location of this lane's query (batch row b, time qv) in stream s, for a
// warp whose lanes call it together (`mine` is false for lanes without a
// query). Lanes whose queries search the same row (the usual case) search
// together, through the warp's pivots.
template <typename value_t, typename stamp_t>
__device__ __forceinline__ Location<weight_t<stamp_t>> warp_locate(
    const StreamArgs<value_t, stamp_t>& s, int64_t b, stamp_t qv, bool mine, int lane,
    stamp_t* pivots) {
  using W = weight_t<stamp_t>;
  Location<W> loc{0, 0, W(0), W(0), true};
  const int64_t L = mine ? (s.lengths ? clamp_length(s.lengths[b], s.S) : s.S) : 0;
  const stamp_t* row = s.times + b * s.t_bstride;
  const int64_t L0 = __shfl_sync(kFullMask, L, 0);
  const long long row0 = __shfl_sync(kFullMask, reinterpret_cast<long long>(row), 0);
  if (L0 >= 64 && __all_sync(kFullMask, !mine || (L == L0 && reinterpret_cast<long long>(row) == row0))) {
    const int64_t kq = warp_upper_bound(reinterpret_cast<const stamp_t*>(row0), s.t_stride, L0,
                                        qv, lane, pivots);
    if (mine && !is_nan(qv)) loc = locate_at(row, s.t_stride, L, qv, s.mode, kq);
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
// memory (locate_tile), then stream the tile's rows (gather_tile), each
// thread issuing the loads of kBatch output vectors before their stores, so
// that many bytes are in flight while other tiles search. The tiles of a
// block hold at most kMaxPairs pairs together. One launch covers every
// stream.
constexpr int kMaxPairs = 1024;
constexpr int kBatch = 4;

// Writes the RowRef of pair (k, i) of the tile to refs[k * Q + i].
template <int MAXK, typename value_t, typename stamp_t>
__device__ __forceinline__ void locate_tile(const Streams<value_t, stamp_t, MAXK>& p,
                                            const QueryArgs<stamp_t>& q, int64_t first, int nq,
                                            int Q, RowRef<weight_t<stamp_t>>* refs,
                                            stamp_t* pivots, int tid, int TT) {
  using W = weight_t<stamp_t>;
  const int K = MAXK == 1 ? 1 : p.K;
  const int lane = threadIdx.x % kChunk;
  for (int base = tid & ~(kChunk - 1); base < K * Q; base += TT) {
    // Uniform across the warp (Q is a multiple of 32); a constant for one
    // stream, which keeps p.s in the parameter space.
    const int k = MAXK == 1 ? 0 : base / Q;
    const int i = base - k * Q + lane;
    if (base - k * Q >= nq) continue;  // uniform: past the tile's last query
    const bool mine = i < nq;
    int64_t b = 0;
    stamp_t qv = stamp_t(0);
    if (mine) {
      const int64_t m = first + i;
      b = m / q.T;
      qv = q.query[b * q.q_bstride + (m - b * q.T) * q.q_stride];
    }
    const auto& s = p.s[k];
    const auto loc = warp_locate(s, b, qv, mine, lane, pivots + (threadIdx.x & ~(kChunk - 1)));
    if (mine) {
      refs[k * Q + i] = RowRef<W>{loc.nan ? -1 : b * s.v_bstride + loc.i0 * s.v_sstride, loc.w};
    }
  }
}

// Writes the tile's output rows from the RowRef of pair (k, row) at
// refs[k * Q + row].
template <int VEC, int MAXK, typename value_t, typename stamp_t>
__device__ __forceinline__ void gather_tile(const Streams<value_t, stamp_t, MAXK>& p,
                                            const RowRef<weight_t<stamp_t>>* refs, int Q, int nq,
                                            value_t* __restrict__ out, int64_t out_cols, int tid,
                                            int TT) {
  using W = weight_t<stamp_t>;
  using IO = VecIO<value_t, VEC>;
  using C = typename IO::C;
  for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
    const auto& s = p.s[k];
    // Groups of G lanes share a query's channels; R groups per tile.
    const int lg = MAXK == 1 ? p.log2G[0] : p.log2G[k];
    const int G = 1 << lg, R = TT >> lg;
    const int sub = tid & (G - 1), r0 = tid >> lg;
    const int64_t nvec = s.D / VEC;
    const RowRef<W>* tile = refs + k * Q;
    value_t* dst = out + p.col[k];
    for (int64_t v = sub; v < nvec; v += G) {
      for (int r = r0; r < nq; r += kBatch * R) {
        // Offsets, and weights already in the compute type: fewer registers.
        int64_t off[kBatch];
        C w[kBatch];
        typename IO::Raw x0[kBatch], x1[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
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
            if (w[u] != C(0)) x1[u] = IO::load_raw(r0p + s.v_sstride);
          }
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int row = r + u * R;
          if (row < nq) {
            typename IO::Frag y;
            if (off[u] < 0) {
              y = IO::nan();
            } else {
              y = IO::convert(x0[u]);
              if (w[u] != C(0)) {
                const auto y1 = IO::convert(x1[u]);
#pragma unroll
                for (int e = 0; e < VEC; ++e) y[e] = blend(y[e], y1[e], w[u]);
              }
            }
            IO::store(dst + row * out_cols + v * VEC, y);
          }
        }
      }
    }
  }
}

// Orders the tile's shared-memory writes before its reads: the block, a
// warp, or a named barrier for the TT threads of tile g.
__device__ __forceinline__ void tile_sync(int g, int TT) {
  if (TT == kThreads) {
    __syncthreads();
  } else if (TT == kChunk) {
    __syncwarp();
  } else {
    asm volatile("bar.sync %0, %1;" ::"r"(g + 1), "r"(TT) : "memory");
  }
}

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads, 4)
    multi_stream_forward_kernel(const Streams<value_t, stamp_t, MAXK> p, const QueryArgs<stamp_t> q,
                                value_t* __restrict__ out, int64_t out_cols, int64_t n, int Q,
                                int TT) {
  __shared__ RowRef<weight_t<stamp_t>> refs[kMaxPairs];
  __shared__ stamp_t pivots[kThreads];
  const int K = MAXK == 1 ? 1 : p.K;
  const int g = threadIdx.x / TT, tid = threadIdx.x % TT;
  const int64_t first = (int64_t(blockIdx.x) * (kThreads / TT) + g) * Q;
  if (first >= n) return;  // uniform across the tile
  const int nq = int(n - first < Q ? n - first : Q);
  RowRef<weight_t<stamp_t>>* tile = refs + g * Q * K;
  locate_tile(p, q, first, nq, Q, tile, pivots, tid, TT);
  tile_sync(g, TT);
  gather_tile<VEC>(p, tile, Q, nq, out + first * out_cols, out_cols, tid, TT);
}

// The backward of batch rows whose queries are not in order (see
// rows_backward_kernel for the others, which exit here at once): atomics into
// grad_values, which rows_backward_kernel zeroed for these rows. The query
// gradient of stream k goes to grad_query + k * n (n = B * T).
template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads) multi_stream_backward_kernel(
    const Streams<value_t, stamp_t, MAXK> p, const QueryArgs<stamp_t> q,
    const value_t* __restrict__ grad, int64_t g_bstride, int64_t g_tstride,
    weight_t<stamp_t>* __restrict__ grad_query, int64_t num_chunks, int64_t chunks_per_row,
    const int* __restrict__ unsorted) {
  using W = weight_t<stamp_t>;
  using C = compute_t<value_t>;
  const int64_t chunk = (int64_t(blockIdx.x) * kThreads + threadIdx.x) / kChunk;
  if (chunk >= num_chunks) return;  // uniform across the warp
  const int64_t b = chunk / chunks_per_row;
  if (unsorted[b] == 0) return;  // uniform: rows_backward_kernel did this row
  const int lane = threadIdx.x % kChunk;
  const int64_t t0 = (chunk - b * chunks_per_row) * kChunk;
  const int nq = int(q.T - t0 < kChunk ? q.T - t0 : kChunk);
  const bool mine = lane < nq;
  const stamp_t qv = mine ? q.query[b * q.q_bstride + (t0 + lane) * q.q_stride] : stamp_t(0);
  const value_t* grows = grad + b * g_bstride + t0 * g_tstride;
  __shared__ stamp_t pivots[kThreads];
  const bool query_grad = grad_query != nullptr;
  for (int k = 0; k < (MAXK == 1 ? 1 : p.K); ++k) {
    const auto& s = p.s[k];
    const auto loc = warp_locate(s, b, qv, mine, lane, pivots + (threadIdx.x & ~(kChunk - 1)));
    const int lg = MAXK == 1 ? p.log2G[0] : p.log2G[k];
    const int G = 1 << lg, per_iter = kChunk >> lg;
    const int group = lane >> lg, sub = lane & (G - 1);
    W slope = W(0);  // d loss / d (this lane's query), through stream k
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
        if (lane >= j && lane < j + per_iter && loc.dt != W(0)) slope += W(total) / loc.dt;
      }
    }
    if (query_grad && mine) {
      grad_query[int64_t(k) * (num_chunks / chunks_per_row) * q.T + b * q.T + t0 + lane] = slope;
    }
  }
}

// ---------------------------------------------------------------------------
// Backward of rows whose queries are in order: a gather, no atomics
// ---------------------------------------------------------------------------
//
// When a batch row's queries are non-decreasing (and none is NaN), the row
// i0 that each query reads first is non-decreasing along them too, so the
// queries with i0 == i form one run [A(i), A(i + 1)), where A(i) is the first
// query whose i0 >= i. Source row i of grad_values is then
//   the sum over its own run of  g_t - w_t g_t  (g_t where w_t == 0), plus
//   the sum over the run of row i - 1 of  w_t g_t  (where w_t != 0),
// (exactly what the atomic kernel adds there, in query order), so every row
// is written once, by one group of lanes: no atomics and no zero-fill. The
// same group forms the query gradient of its own run, g_t . (v[i+1] - v[i])
// / dt_t, reading v[i] and v[i + 1] once for the run.

// rows_sorted: unsorted[b] = 1 where batch row b's queries are not
// non-decreasing or hold a NaN (unsorted is zeroed before).
template <typename stamp_t>
__global__ void __launch_bounds__(kThreads) unsorted_rows_kernel(const QueryArgs<stamp_t> q,
                                                                 int64_t n, int* __restrict__ unsorted) {
  const int64_t m = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (m >= n) return;
  const int64_t b = m / q.T, t = m - b * q.T;
  const stamp_t* row = q.query + b * q.q_bstride;
  const stamp_t cur = row[t * q.q_stride];
  const bool ok = t == 0 ? !is_nan(cur) : row[(t - 1) * q.q_stride] <= cur;  // false for NaN
  if (!ok) unsorted[b] = 1;
}

// pred(q) == (i0 of query q >= i), for a source row i with 1 <= i < L:
// q >= t[i] for linear and previous; nearest also takes the queries of
// [t[i - 1], t[i]) nearer to t[i] (a tie goes to the later sample), compared
// exactly as locate_at compares them.
template <typename stamp_t>
struct ReadsFrom {
  stamp_t before, at;  // t[i - 1], t[i]
  bool nearest;
  __device__ __forceinline__ bool operator()(stamp_t x) const {
    if (x >= at) return true;
    return nearest && x >= before && (at - x) <= (x - before);
  }
};

// What rows_backward_kernel keeps of one source row in shared memory.
template <typename stamp_t>
struct RunEntry {
  int64_t start;   // A(b, i)
  int64_t length;  // the batch row's valid samples (0: none), or -1: its queries are out of order
  stamp_t time;    // t[i]
};

// Entry e of a tile: source row f = first - 1 + e of stream s (b = f / S,
// i = f % S); its start is A(b, i) where row i has a run to find, else 0
// (i == 0, or no valid sample) or T (i at or past the row's length).
template <typename value_t, typename stamp_t>
__device__ __forceinline__ void locate_run_starts(const StreamArgs<value_t, stamp_t>& s,
                                                  const QueryArgs<stamp_t>& q, int64_t B,
                                                  int64_t first, int entries,
                                                  RunEntry<stamp_t>* out,
                                                  const int* __restrict__ unsorted,
                                                  stamp_t* pivots, int tid, int TT) {
  const int lane = threadIdx.x % kChunk;
  const int64_t rows = B * s.S;
  for (int e0 = tid & ~(kChunk - 1); e0 < entries; e0 += TT) {  // uniform across the warp
    const int e = e0 + lane;
    const int64_t f = first - 1 + e;
    const bool valid = e < entries && f >= 0 && f < rows;
    int64_t b = 0, i = 0, L = 0, start = 0;
    bool in_order = false;
    ReadsFrom<stamp_t> pred{stamp_t(0), stamp_t(0), s.mode == Mode::Nearest};
    if (valid) {
      b = f / s.S;
      i = f - b * s.S;
      L = s.lengths ? clamp_length(s.lengths[b], s.S) : s.S;
      L = L < 0 ? 0 : L;
      in_order = unsorted[b] == 0;
      const stamp_t* trow = s.times + b * s.t_bstride;
      pred.at = trow[i * s.t_stride];
      pred.before = i > 0 ? trow[(i - 1) * s.t_stride] : pred.at;
      start = i == 0 ? 0 : q.T;
    }
    const bool search = valid && in_order && i >= 1 && i < L;
    const stamp_t* qrow = q.query + b * q.q_bstride;
    const unsigned searching = __ballot_sync(kFullMask, search);
    if (searching != 0) {
      const long long row0 =
          __shfl_sync(kFullMask, reinterpret_cast<long long>(qrow), __ffs(searching) - 1);
      if (q.T >= 64 && __all_sync(kFullMask, !search || reinterpret_cast<long long>(qrow) == row0)) {
        const int64_t r = warp_partition_point(reinterpret_cast<const stamp_t*>(row0), q.q_stride,
                                               q.T, pred, lane, pivots);
        if (search) start = r;
      } else if (search) {
        start = partition_point(qrow, q.q_stride, q.T, pred);
      }
    }
    if (e < entries) out[e] = RunEntry<stamp_t>{start, in_order ? L : -1, pred.at};
  }
}

// Stores a fragment of the accumulator type (16-byte stores where it fills them).
template <typename C, int N>
__device__ __forceinline__ void store_acc(C* p, const cutlass::Array<C, N>& x) {
  cutlass::AlignedArray<C, N> a;
  static_cast<cutlass::Array<C, N>&>(a) = x;
  *reinterpret_cast<cutlass::AlignedArray<C, N>*>(p) = a;
}

template <typename T>
__device__ __forceinline__ T masked_group_sum(T x, int G, unsigned mask) {
  for (int offset = G >> 1; offset > 0; offset >>= 1) x += __shfl_xor_sync(mask, x, offset);
  return x;
}

// The times around source row i: t[i - 1] (`before`, = t[i] for i == 0),
// t[i], t[i + 1] (`next`, = t[i] for the last valid sample); for nearest
// and previous all three are t[i] (their weights are 0).
template <typename stamp_t>
struct RowTimes {
  stamp_t before, at, next;
};

// w and dt of a query at time x as locate_at gives them, for a query of
// source row i's own run (`own`) or of row i - 1's: 0 before the first
// sample, at or past the last, and for nearest and previous.
template <typename stamp_t>
__device__ __forceinline__ weight_t<stamp_t> run_weight(const RowTimes<stamp_t>& tm, stamp_t x,
                                                        bool own, weight_t<stamp_t>& dt) {
  using W = weight_t<stamp_t>;
  const stamp_t t0 = own ? tm.at : tm.before;
  const W d = W((own ? tm.next : tm.at) - t0);
  dt = W(0);
  if (d == W(0) || x < t0) return W(0);
  dt = d;
  return W(x - t0) / d;
}

// Rows wider than two vectors a lane: one group of G lanes (a group may run
// apart from the other groups of its warp; its shuffles name its own lanes)
// writes row i of grad_values (gv, or nullptr) a vector at a time from the
// runs [hs, lo) (row i - 1's) and [lo, hi) (its own), then the query
// gradient of its own run into gq (batch row b's, or nullptr). x0p: row i
// of the values.
template <int VEC, typename value_t, typename stamp_t>
__device__ __forceinline__ void backward_wide_row(
    const value_t* __restrict__ x0p, int64_t v_sstride, int64_t nvec, const RowTimes<stamp_t>& tm,
    const stamp_t* qrow, int64_t q_stride, int64_t hs, int64_t lo, int64_t hi,
    const value_t* __restrict__ grow, int64_t g_tstride, compute_t<value_t>* gv,
    weight_t<stamp_t>* gq, int sub, int G, unsigned mask) {
  using W = weight_t<stamp_t>;
  using IO = VecIO<value_t, VEC>;
  using C = typename IO::C;
  using Frag = typename IO::Frag;
  if (gv != nullptr) {
    for (int64_t v = sub; v < nvec; v += G) {
      Frag acc;
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[e] = C(0);
      for (int64_t t = hs; t < hi; ++t) {
        W dt;
        const bool own = t >= lo;
        const C w = C(run_weight(tm, qrow[t * q_stride], own, dt));
        if (!own && w == C(0)) continue;
        const Frag g = IO::load(grow + t * g_tstride + v * VEC);
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[e] += !own ? w * g[e] : (w == C(0) ? g[e] : g[e] - w * g[e]);
      }
      store_acc(gv + v * VEC, acc);
    }
  }
  if (gq != nullptr) {
    for (int64_t t = lo; t < hi; ++t) {
      W dt;
      run_weight(tm, qrow[t * q_stride], true, dt);
      C partial = C(0);
      if (dt != W(0)) {
        for (int64_t v = sub; v < nvec; v += G) {
          const Frag g = IO::load(grow + t * g_tstride + v * VEC);
          const Frag x0 = IO::load(x0p + v * VEC);
          const Frag x1 = IO::load(x0p + v_sstride + v * VEC);
#pragma unroll
          for (int e = 0; e < VEC; ++e) partial += g[e] * (x1[e] - x0[e]);
        }
      }
      partial = masked_group_sum(partial, G, mask);
      if (sub == 0) gq[t] = dt != W(0) ? W(partial) / dt : W(0);
    }
  }
}

// Tiles of TT threads over the flattened (B * S) source rows of stream
// blockIdx.y, Q = TT * m - 2 rows each: the tile locates the run starts
// A(b, i) of rows first - 1 .. first + Q into shared memory (with each row's
// time and length), syncs, then groups of G lanes write its rows. Rows of
// batch rows whose queries are not in order are written as zeros (the
// accumulators of the atomic kernel, which runs next), as are rows at or past
// the row's length.
//
// Rows of up to two vectors a lane (G = row_group_log2's lanes) run in lock
// step across the warp: every lane takes part in every step, predicated, so
// the 32 / G rows of a warp share each instruction (the loop ends when no
// row of the warp has a query left).
constexpr int kRunEntries = 2 * kThreads;  // per block: m <= 2

// log2 of the lanes of a row in the backward's row gather: two vectors a lane.
__host__ __device__ inline int row_group_log2(int log2G) { return log2G > 0 ? log2G - 1 : 0; }

template <int VEC, int MAXK, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads, 3) rows_backward_kernel(
    const Streams<value_t, stamp_t, MAXK> p, const QueryArgs<stamp_t> q, int64_t B,
    const value_t* __restrict__ grad, int64_t g_bstride, int64_t g_tstride,
    weight_t<stamp_t>* __restrict__ grad_query, const int* __restrict__ unsorted, int TT, int m) {
  using W = weight_t<stamp_t>;
  using IO = VecIO<value_t, VEC>;
  using C = compute_t<value_t>;
  using Frag = typename IO::Frag;
  __shared__ RunEntry<stamp_t> entries[kRunEntries];
  __shared__ stamp_t pivots[kThreads];
  const int k = MAXK == 1 ? 0 : int(blockIdx.y);
  const auto& s = p.s[k];
  const int Q = TT * m - 2;
  const int g = threadIdx.x / TT, tid = threadIdx.x % TT;
  const int64_t rows = B * s.S;
  const int64_t first = (int64_t(blockIdx.x) * (kThreads / TT) + g) * Q;
  if (first >= rows) return;  // uniform across the tile
  const int nq = int(rows - first < Q ? rows - first : Q);
  RunEntry<stamp_t>* run = entries + g * TT * m;
  locate_run_starts(s, q, B, first, nq + 2, run, unsorted,
                    pivots + (threadIdx.x & ~(kChunk - 1)), tid, TT);
  tile_sync(g, TT);
  const int lg = row_group_log2(MAXK == 1 ? p.log2G[0] : p.log2G[k]);
  const int G = 1 << lg, R = TT >> lg;
  const int sub = tid & (G - 1);
  const int lane = threadIdx.x % kChunk;
  const unsigned mask = G == kChunk ? kFullMask : ((1u << G) - 1) << (lane & ~(G - 1));
  C* gvk = p.grad_values[k];
  W* gqk = grad_query != nullptr ? grad_query + int64_t(k) * B * q.T : nullptr;
  const int64_t nvec = s.D / VEC;
  const bool narrow = nvec <= 2 * G;  // uniform
  const bool linear = s.mode == Mode::Linear;
  // The warp's first row, and this group's offset from it.
  const int warp_row = (tid & ~(kChunk - 1)) >> lg, in_warp = lane >> lg;
  int64_t b = (first + warp_row + in_warp) / s.S, i = first + warp_row + in_warp - b * s.S;
  for (int base = warp_row; base < nq; base += R, i += R) {  // uniform across the warp
    while (i >= s.S) {
      i -= s.S;
      ++b;
    }
    const int j = base + in_warp;
    const int64_t f = first + j;
    int64_t hs = 0, lo = 0, hi = 0;
    RowTimes<stamp_t> tm{};
    C* gv = nullptr;
    W* gq = nullptr;
    bool write = false;
    if (j < nq) {
      const RunEntry<stamp_t> me = run[j + 1];
      const int64_t L = me.length;
      gv = gvk != nullptr ? gvk + f * s.D : nullptr;
      gq = gqk != nullptr ? gqk + b * q.T : nullptr;
      if (L < 0 || i >= L) {
        // Zeros: the atomic kernel's accumulator, or past the valid samples.
        // A row with no valid sample (L == 0) also gets a zero query gradient.
        if (gv != nullptr) {
          cutlass::Array<C, VEC> zero;
#pragma unroll
          for (int e = 0; e < VEC; ++e) zero[e] = C(0);
          for (int64_t v = sub; v < nvec; v += G) store_acc(gv + v * VEC, zero);
        }
        if (gq != nullptr && L == 0 && i == 0) {
          for (int64_t t = sub; t < q.T; t += G) gq[t] = W(0);
        }
      } else {
        write = true;
        const auto clampT = [&](int64_t x) { return x < 0 ? int64_t(0) : (x > q.T ? q.T : x); };
        // Unsorted times (unspecified results) must still keep every run in bounds.
        lo = clampT(me.start);
        hi = i == s.S - 1 ? q.T : clampT(run[j + 2].start);
        hi = hi < lo ? lo : hi;
        hs = i == 0 ? lo : clampT(run[j].start);
        hs = hs > lo ? lo : hs;
        tm = RowTimes<stamp_t>{me.time, me.time, me.time};
        if (linear) {
          if (i > 0) tm.before = run[j].time;
          if (i + 1 < L) tm.next = run[j + 2].time;
        }
      }
    }
    const value_t* x0p = s.values + b * s.v_bstride + i * s.v_sstride;
    const stamp_t* qrow = q.query + b * q.q_bstride;
    const value_t* grow = grad + b * g_bstride + p.col[k];
    if (!narrow) {
      if (write) {
        backward_wide_row<VEC>(x0p, s.v_sstride, nvec, tm, qrow, q.q_stride, hs, lo, hi, grow,
                               g_tstride, gv, gq, sub, G, mask);
      }
      continue;
    }
    // Narrow rows, in lock step: vectors sub and sub + G of the row.
    const bool has0 = write && sub < nvec, has1 = write && sub + G < nvec;
    const bool slopes = gq != nullptr && write && tm.next != tm.at;
    Frag acc0, acc1, dx0, dx1;  // dx = v[i + 1] - v[i]
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc0[e] = acc1[e] = dx0[e] = dx1[e] = C(0);
    if (slopes) {
      if (has0) {
        const Frag x0 = IO::load(x0p + sub * VEC), x1 = IO::load(x0p + s.v_sstride + sub * VEC);
#pragma unroll
        for (int e = 0; e < VEC; ++e) dx0[e] = x1[e] - x0[e];
      }
      if (has1) {
        const Frag x0 = IO::load(x0p + (sub + G) * VEC);
        const Frag x1 = IO::load(x0p + s.v_sstride + (sub + G) * VEC);
#pragma unroll
        for (int e = 0; e < VEC; ++e) dx1[e] = x1[e] - x0[e];
      }
    }
    const stamp_t* qp = qrow + hs * q.q_stride;
    const value_t* gp = grow + hs * g_tstride + sub * VEC;
    for (int64_t t = hs; __any_sync(kFullMask, t < hi); ++t, qp += q.q_stride, gp += g_tstride) {
      const bool act = t < hi;
      const stamp_t x = act ? *qp : stamp_t(0);
      Frag g0, g1;
#pragma unroll
      for (int e = 0; e < VEC; ++e) g0[e] = g1[e] = C(0);
      if (act && has0) g0 = IO::load(gp);
      if (act && has1) g1 = IO::load(gp + G * VEC);
      const bool own = t >= lo;
      W dt;
      const C w = act ? C(run_weight(tm, x, own, dt)) : C(0);
      // Row i - 1's run adds w g (nothing where w == 0); its own run g - w g
      // (g where w == 0), as the atomic kernel adds them.
#pragma unroll
      for (int e = 0; e < VEC; ++e) {
        acc0[e] += own ? (w == C(0) ? g0[e] : g0[e] - w * g0[e]) : (w == C(0) ? C(0) : w * g0[e]);
        acc1[e] += own ? (w == C(0) ? g1[e] : g1[e] - w * g1[e]) : (w == C(0) ? C(0) : w * g1[e]);
      }
      if (gq != nullptr) {  // uniform
        C partial = C(0);
#pragma unroll
        for (int e = 0; e < VEC; ++e) partial += g0[e] * dx0[e] + g1[e] * dx1[e];
        for (int offset = G >> 1; offset > 0; offset >>= 1) {
          partial += __shfl_xor_sync(kFullMask, partial, offset);
        }
        if (act && own && sub == 0) gq[t] = dt != W(0) ? W(partial) / dt : W(0);
      }
    }
    if (gv != nullptr) {
      if (has0) store_acc(gv + sub * VEC, acc0);
      if (has1) store_acc(gv + (sub + G) * VEC, acc1);
    }
  }
}

// ---------------------------------------------------------------------------
// Host side
// ---------------------------------------------------------------------------

// log2 of the lanes per query: enough vectors to cover D, at most a warp.
inline int group_log2(int64_t nvec) {
  int lg = 0;
  while (lg < 5 && (int64_t(1) << lg) < nvec) ++lg;
  return lg;
}

inline bool aligned(const void* p, int bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The backward kernel's chunks of kChunk queries of one batch row,
// kThreads / kChunk chunks per block.
struct ChunkGrid {
  int64_t per_row, total;
  unsigned int blocks;
};

inline ChunkGrid chunk_grid(int64_t B, int64_t T, const char* op) {
  ChunkGrid g;
  g.per_row = (T + kChunk - 1) / kChunk;
  g.total = B * g.per_row;
  const int64_t per_block = kThreads / kChunk;
  const int64_t blocks = (g.total + per_block - 1) / per_block;
  ROBOCACHE_CHECK(blocks <= int64_t(0x7fffffff), op, ": too many queries for one launch (", B * T,
                  ")");
  g.blocks = static_cast<unsigned int>(blocks);
  return g;
}

template <typename value_t, typename stamp_t, int MAXK>
Streams<value_t, stamp_t, MAXK> make_streams(const MultiStreamInputs& in, int64_t first,
                                             int64_t count, const std::vector<int64_t>& cols,
                                             int vec) {
  Streams<value_t, stamp_t, MAXK> p{};
  p.K = static_cast<int>(count);
  for (int64_t k = 0; k < count; ++k) {
    const int64_t j = first + k;
    p.s[k] = stream_args<value_t, stamp_t>(in.values[j], in.times[j], in.lengths[j], in.modes[j]);
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
int vector_width(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                 int64_t cols_total, const void* base, int64_t base_bstride = 0,
                 int64_t base_tstride = 0) {
  for (const int bytes : {16, 8}) {
    const int V = bytes / static_cast<int>(sizeof(value_t));
    if (V <= 1) break;
    bool ok = aligned(base, bytes) && cols_total % V == 0 && base_bstride % V == 0 &&
              base_tstride % V == 0;
    for (size_t k = 0; ok && k < in.values.size(); ++k) {
      const at::Tensor& v = in.values[k];
      ok = v.size(2) % V == 0 && v.stride(0) % V == 0 && v.stride(1) % V == 0 &&
           cols[k] % V == 0 && aligned(v.data_ptr(), bytes);
    }
    if (ok) return V;
  }
  return 1;
}

// Launches `launch(streams_param, vec_width_tag, first_stream, launch_index)`
// once per kMaxStreams streams (once for resample), with the kernel template
// arguments chosen here: `vec` is vector_width's answer.
template <typename value_t, typename stamp_t, typename F>
void for_each_launch(const MultiStreamInputs& in, const std::vector<int64_t>& cols, int vec,
                     F&& launch) {
  const int64_t K = static_cast<int64_t>(in.values.size());
  for (int64_t first = 0, index = 0; first < K; first += kMaxStreams, ++index) {
    const int64_t count = std::min<int64_t>(kMaxStreams, K - first);
    auto with_width = [&](auto vec_tag) {
      constexpr int V = decltype(vec_tag)::value;
      if (K == 1) {
        launch(make_streams<value_t, stamp_t, 1>(in, 0, 1, cols, V), vec_tag, first, index);
      } else {
        launch(make_streams<value_t, stamp_t, kMaxStreams>(in, first, count, cols, V), vec_tag,
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
// [32, 256]). Measured on an H200 (docs/performance.md):
//  - several streams (fuse): a whole block shares a tile, so that the
//    searches of every stream and the rows of a few wide queries spread over
//    256 threads;
//  - one stream: four tiles of 64 threads a block, each of up to 256 queries
//    (up to four searches a thread), so that the tiles of a block search at
//    different times and each search phase is amortized over many rows.
// Fewer queries a tile when the launch would have fewer than 8 tiles for
// each multiprocessor, or a thread more than `items` output vectors.
struct ForwardTile {
  int threads, queries;
};

inline ForwardTile forward_tile(int64_t n, int64_t vectors_per_query, int K) {
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  ForwardTile t{K == 1 ? 64 : kThreads, 256};
  const int64_t items = K == 1 ? 128 : 16;
  while (t.queries > kChunk &&
         (t.queries * vectors_per_query > items * t.threads || n < t.queries * sms * 8 ||
          (kThreads / t.threads) * t.queries * K > kMaxPairs)) {
    t.queries >>= 1;
  }
  return t;
}

// out: (B, T, cols_total) contiguous; stream k writes columns [cols[k], cols[k] + D_k).
template <typename value_t, typename stamp_t>
void launch_multi_stream_forward(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                                 at::Tensor& out, const char* op) {
  const auto q = query_args<stamp_t>(in.query);
  const int64_t out_cols = out.size(2);
  const int64_t n = out.size(0) * out.size(1);
  auto stream = at::cuda::getCurrentCUDAStream();
  value_t* o = out.data_ptr<value_t>();
  const int vec = vector_width<value_t>(in, cols, out_cols, o);
  const int K = static_cast<int>(std::min<int64_t>(in.values.size(), kMaxStreams));
  const auto tile = forward_tile(n, out_cols / vec, K);
  const int64_t per_block = int64_t(tile.queries) * (kThreads / tile.threads);
  const int64_t blocks = (n + per_block - 1) / per_block;
  ROBOCACHE_CHECK(blocks <= int64_t(0x7fffffff), op, ": too many queries for one launch (", n, ")");
  for_each_launch<value_t, stamp_t>(in, cols, vec, [&](const auto& p, auto vec_tag, int64_t, int64_t) {
    constexpr int VEC = decltype(vec_tag)::value;
    constexpr int MAXK = sizeof(p.s) / sizeof(p.s[0]);
    multi_stream_forward_kernel<VEC, MAXK><<<static_cast<unsigned int>(blocks), kThreads, 0, stream>>>(
        p, q, o, out_cols, n, tile.queries, tile.threads);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

// Tiles of the backward's row-gather kernel: kRowTileThreads threads each,
// kRowTileThreads * m - 2 source rows. m grows with the rows a group of
// lanes shares (narrow rows), so that each group writes about 16 rows a tile.
constexpr int kRowTileThreads = 64;

inline int row_tile_multiple(int max_log2G) {
  const int groups = kRowTileThreads >> row_group_log2(max_log2G);
  int m = (groups * 16 + 2 + kRowTileThreads - 1) / kRowTileThreads;
  return m < 1 ? 1 : (m > 2 ? 2 : m);
}

// grad: (B, T, cols_total) with unit stride along channels. grad_values[k] is
// a (B, S_k, D_k) accumulator (not initialized: every row is written here) or
// nullptr. The query gradient of stream k goes to grad_query_parts + k * B * T
// (every entry written). `unsorted`: B ints, zeroed.
//
// Three launches (and one more per kMaxStreams streams): flag the batch rows
// whose queries are out of order; the row gather (rows_backward_kernel) for
// the others, which also zeroes the flagged rows' accumulators; the atomic
// kernel for the flagged rows (its warps exit at once elsewhere).
template <typename value_t, typename stamp_t>
void launch_multi_stream_backward(const MultiStreamInputs& in, const std::vector<int64_t>& cols,
                                  const at::Tensor& grad,
                                  const std::vector<compute_t<value_t>*>& grad_values,
                                  weight_t<stamp_t>* grad_query_parts, int* unsorted,
                                  const char* op) {
  const auto q = query_args<stamp_t>(in.query);
  const int64_t B = grad.size(0);
  const auto grid = chunk_grid(B, grad.size(1), op);
  const int64_t n = B * grad.size(1);
  auto stream = at::cuda::getCurrentCUDAStream();
  const value_t* g = grad.data_ptr<value_t>();
  const int64_t gb = grad.stride(0), gt = grad.stride(1);
  const int vec = vector_width<value_t>(in, cols, grad.size(2), g, gb, gt);
  unsorted_rows_kernel<<<static_cast<unsigned int>((n + kThreads - 1) / kThreads), kThreads, 0,
                         stream>>>(q, n, unsorted);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  for_each_launch<value_t, stamp_t>(in, cols, vec, [&](auto p, auto vec_tag, int64_t first, int64_t) {
    constexpr int VEC = decltype(vec_tag)::value;
    constexpr int MAXK = sizeof(p.s) / sizeof(p.s[0]);
    int max_lg = 0;
    int64_t max_rows = 0;
    for (int k = 0; k < p.K; ++k) {
      p.grad_values[k] = grad_values[first + k];
      max_lg = std::max(max_lg, p.log2G[k]);
      max_rows = std::max(max_rows, B * p.s[k].S);
    }
    auto* gq = grad_query_parts ? grad_query_parts + first * n : nullptr;
    const int m = row_tile_multiple(max_lg);
    const int64_t per_block = int64_t(kRowTileThreads * m - 2) * (kThreads / kRowTileThreads);
    const int64_t blocks = (max_rows + per_block - 1) / per_block;
    ROBOCACHE_CHECK(blocks <= int64_t(0x7fffffff), op, ": too many source rows for one launch (",
                    max_rows, ")");
    const dim3 rows_grid(static_cast<unsigned int>(blocks), static_cast<unsigned int>(p.K));
    rows_backward_kernel<VEC, MAXK><<<rows_grid, kThreads, 0, stream>>>(
        p, q, B, g, gb, gt, gq, unsorted, kRowTileThreads, m);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    multi_stream_backward_kernel<VEC, MAXK><<<grid.blocks, kThreads, 0, stream>>>(
        p, q, g, gb, gt, gq, grid.total, grid.per_row, unsorted);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
}

}  // namespace robocache
