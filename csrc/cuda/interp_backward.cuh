// Per-query back-propagation on the GPU, for the resample/fuse backward
// kernel (interp_kernels.cuh). A "group" of G lanes (a power of two, at most a warp)
// handles one query; the lanes split the D channels in 16-byte vectors.
#pragma once

#include "robocache/interp.h"
#include "robocache/interp_args.h"
#include "vec.cuh"

namespace robocache {

// Adds a fragment into global memory: one 16-byte atomic per 4 floats on
// Hopper (sm_90+), scalar atomics elsewhere and for double.
template <int N>
__device__ __forceinline__ void atomic_add_frag(float* dst, const cutlass::Array<float, N>& x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kVector = N % 4 == 0;
#else
  constexpr bool kVector = false;
#endif
  if constexpr (kVector) {
#pragma unroll
    for (int k = 0; k < N; k += 4) {
      atomicAdd(reinterpret_cast<float4*>(dst + k),
                make_float4(x[k], x[k + 1], x[k + 2], x[k + 3]));
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k)
      atomicAdd(dst + k, x[k]);
  }
}

template <int N>
__device__ __forceinline__ void atomic_add_frag(double* dst, const cutlass::Array<double, N>& x) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    atomicAdd(dst + k, x[k]);
}

template <typename T>
__device__ __forceinline__ T group_sum(T x, int G) {
  for (int offset = G >> 1; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// The blend's split of a gradient vector g between rows i0 and i1:
// x1 = w g, x0 = g - x1.
template <typename C, int N>
__device__ __forceinline__ void split_by_weight(const cutlass::Array<C, N>& g, C w,
                                                cutlass::Array<C, N>& x0,
                                                cutlass::Array<C, N>& x1) {
#pragma unroll
  for (int k = 0; k < N; ++k) {
    x1[k] = w * g[k];
    x0[k] = g[k] - x1[k];
  }
}

// partial += g . (v1 - v0): a vector's share of the query gradient's
// numerator.
template <typename C, int N>
__device__ __forceinline__ void add_dot_difference(C& partial, const cutlass::Array<C, N>& g,
                                                   const cutlass::Array<C, N>& v0,
                                                   const cutlass::Array<C, N>& v1) {
#pragma unroll
  for (int k = 0; k < N; ++k)
    partial += g[k] * (v1[k] - v0[k]);
}

// Backward of the forward blend for query (b, t):
//  - adds (1 - w) g and w g into rows i0 and i1 of grad_values (atomics),
//  - returns this lane's share of g . (v1 - v0) for the query gradient.
template <int VEC, typename value_t, typename stamp_t>
__device__ __forceinline__ compute_t<value_t> resample_one_backward(
    const InterpSource<value_t, stamp_t>& s, const Location<weight_t<stamp_t>>& loc, int64_t b,
    int lane, int G, const value_t* __restrict__ grad, compute_t<value_t>* grad_values,
    bool query_grad) {
  using IO = VecIO<value_t, VEC>;
  using C = typename IO::C;
  C partial = C(0);
  if (loc.nan)
    return partial;
  const int64_t nvec = s.D / VEC;
  const C w = C(loc.w);
  const bool slope = query_grad && loc.dt != 0;
  C* a0 = grad_values ? grad_values + (b * s.S + loc.i0) * s.D : nullptr;
  C* a1 = grad_values ? grad_values + (b * s.S + loc.i1) * s.D : nullptr;
  const value_t* r0 = s.values + b * s.v_bstride + loc.i0 * s.v_sstride;
  const value_t* r1 = s.values + b * s.v_bstride + loc.i1 * s.v_sstride;
  for (int64_t v = lane; v < nvec; v += G) {
    const auto g = IO::load(grad + v * VEC);
    if (a0) {
      if (w == C(0)) {
        atomic_add_frag(a0 + v * VEC, g);
      } else {
        typename IO::Frag x0, x1;
        split_by_weight(g, w, x0, x1);
        atomic_add_frag(a0 + v * VEC, x0);
        atomic_add_frag(a1 + v * VEC, x1);
      }
    }
    if (slope) {
      add_dot_difference(partial, g, IO::load(r0 + v * VEC), IO::load(r1 + v * VEC));
    }
  }
  return partial;
}

// Row contributions of consecutive queries, merged in registers: a lane
// holds the sum for one row of grad_values (its own vector of channels) and
// adds it with one atomic when a contribution to another row comes, or at
// flush(). With queries in order a query's i0 is mostly the previous query's
// i1, so linear interpolation needs about one atomic a query instead of two,
// and fewer when queries outnumber samples.
template <typename C, int VEC>
struct PendingRow {
  int64_t row = -1;
  cutlass::Array<C, VEC> sum;

  // dst: this lane's vector of row 0 of the batch row's accumulator.
  __device__ __forceinline__ void add(C* dst, int64_t D, int64_t r,
                                      const cutlass::Array<C, VEC>& x) {
    if (r == row) {
#pragma unroll
      for (int k = 0; k < VEC; ++k)
        sum[k] += x[k];
      return;
    }
    flush(dst, D);
    row = r;
    sum = x;
  }

  __device__ __forceinline__ void flush(C* dst, int64_t D) {
    if (row >= 0)
      atomic_add_frag(dst + row * D, sum);
    row = -1;
  }
};

// resample_one_backward for a group in which each lane has at most one
// vector of channels (D <= G * VEC): lane `lane` adds its vector's row
// contributions into `pending` instead of with an atomic each. `acc` is this
// lane's vector of row 0 of the batch row's accumulator, or nullptr.
template <int VEC, typename value_t, typename stamp_t>
__device__ __forceinline__ compute_t<value_t> resample_one_backward_merged(
    const InterpSource<value_t, stamp_t>& s, const Location<weight_t<stamp_t>>& loc, int64_t b,
    int lane, const value_t* __restrict__ grad, compute_t<value_t>* acc, bool query_grad,
    PendingRow<compute_t<value_t>, VEC>& pending) {
  using IO = VecIO<value_t, VEC>;
  using C = typename IO::C;
  C partial = C(0);
  if (loc.nan || lane >= s.D / VEC)
    return partial;
  const C w = C(loc.w);
  const auto g = IO::load(grad + lane * VEC);
  if (acc) {
    if (w == C(0)) {
      pending.add(acc, s.D, loc.i0, g);
    } else {
      typename IO::Frag x0, x1;
      split_by_weight(g, w, x0, x1);
      pending.add(acc, s.D, loc.i0, x0);
      pending.add(acc, s.D, loc.i1, x1);
    }
  }
  if (query_grad && loc.dt != 0) {
    const value_t* r0 = s.values + b * s.v_bstride + loc.i0 * s.v_sstride + lane * VEC;
    add_dot_difference(partial, g, IO::load(r0), IO::load(r0 + (loc.i1 - loc.i0) * s.v_sstride));
  }
  return partial;
}

}  // namespace robocache
