// The CUDA kernels of robocache::_voxelize_backward (launched by
// voxelize_backward.cu): device code only. Sum and mean gather each point's
// gradient from its voxel; max first finds each voxel's lowest-index argmax
// with an integer atomicMin. Index math is int64.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "robocache/dispatch.h"
#include "robocache/voxel.h"

namespace robocache {
namespace {  // internal linkage, as in voxelize_kernels.cuh

// For max: first[b, c, v] = the lowest point index whose feature equals the max.
template <typename point_t, typename feat_t>
__global__ void __launch_bounds__(kThreads)
    argmax_kernel(const VoxelArgs<point_t, feat_t> a, int64_t cells,
                  const feat_t* __restrict__ result, int32_t* __restrict__ first) {
  using A = compute_t<feat_t>;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.B * a.N)
    return;
  const int64_t b = i / a.N, n = i - b * a.N;
  const int64_t v = point_voxel(a, b, n);
  if (v < 0)
    return;
  const feat_t* f = a.features + b * a.f_bstride + n * a.f_nstride;
  for (int64_t c = 0; c < a.C; ++c) {
    const int64_t e = (b * a.C + c) * cells + v;
    if (A(f[c * a.f_cstride]) == A(result[e]))
      atomicMin(first + e, int32_t(n));
  }
}

template <typename point_t, typename feat_t>
__global__ void __launch_bounds__(kThreads)
    gather_grad_kernel(const VoxelArgs<point_t, feat_t> a, Reduce reduce, int64_t cells,
                       const feat_t* __restrict__ grad, const int32_t* __restrict__ counts,
                       const int32_t* __restrict__ first, feat_t* __restrict__ grad_features) {
  using A = compute_t<feat_t>;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.B * a.N)
    return;
  const int64_t b = i / a.N, n = i - b * a.N;
  const int64_t v = point_voxel(a, b, n);
  feat_t* out = grad_features + i * a.C;
  for (int64_t c = 0; c < a.C; ++c) {
    A x = A(0);
    if (v >= 0) {
      const int64_t e = (b * a.C + c) * cells + v;
      const A g = A(grad[e]);
      // voxel_point_grad's rule (voxel.h), written out: see there.
      if (reduce == Reduce::Sum)
        x = g;
      if (reduce == Reduce::Mean)
        x = g / A(counts[b * cells + v]);
      if (reduce == Reduce::Max && first[e] == int32_t(n))
        x = g;
    }
    out[c] = feat_t(x);
  }
}

}  // namespace
}  // namespace robocache
