// Shared voxel math for the voxelize kernels (CPU and CUDA, forward and
// backward): which voxel a point falls in, or that it is dropped; the
// result's shape; how a voxel's gradient reaches its points.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/ArrayRef.h>

#include <cstdint>
#include <vector>

#include "robocache/interp.h"  // ROBOCACHE_HD

namespace robocache {

enum class Reduce : int32_t { Occupancy = 0, Count = 1, Sum = 2, Mean = 3, Max = 4 };

inline bool reduce_needs_features(Reduce r) {
  return r == Reduce::Sum || r == Reduce::Mean || r == Reduce::Max;
}

// The grid, with origin and voxel size already in the points' dtype, so that
// every backend (and the pure-PyTorch reference) evaluates
// floor((p - origin) / voxel_size) with the same rounding.
template <typename point_t>
struct VoxelGrid {
  int64_t X, Y, Z;
  point_t origin[3];
  point_t voxel[3];
};

// Flat voxel index (ix * Y + iy) * Z + iz of a point, or -1 when it is
// dropped: not finite, or outside the half-open range [0, grid) on an axis,
// i.e. floor((p - origin) / voxel_size) outside [0, grid).
// The range test is on q = (p - origin) / voxel_size itself: for an integer
// bound G, floor(q) >= 0 <=> q >= 0 and floor(q) < G <=> q < G, and a NaN or
// infinite q (from a non-finite point) fails it. It happens in floating point,
// before any conversion to an integer (a NaN converted to int becomes 0 on
// CUDA, which would land in voxel 0). Past it, q >= 0, so truncation is floor;
// this keeps the CPU loop free of libm floor calls.
template <typename point_t>
ROBOCACHE_HD int64_t voxel_index(const VoxelGrid<point_t>& g, point_t x, point_t y, point_t z) {
  const point_t qx = (x - g.origin[0]) / g.voxel[0];
  const point_t qy = (y - g.origin[1]) / g.voxel[1];
  const point_t qz = (z - g.origin[2]) / g.voxel[2];
  if (!(qx >= point_t(0) && qx < point_t(g.X) && qy >= point_t(0) && qy < point_t(g.Y) &&
        qz >= point_t(0) && qz < point_t(g.Z)))
    return -1;
  return (int64_t(qx) * g.Y + int64_t(qy)) * g.Z + int64_t(qz);
}

// Points (B, N, 3) and features (B, N, C) with any strides; lengths (B,)
// contiguous or nullptr.
template <typename point_t, typename feat_t>
struct VoxelArgs {
  const point_t* points;
  int64_t p_bstride, p_nstride, p_cstride;
  const feat_t* features;
  int64_t f_bstride, f_nstride, f_cstride;
  const int64_t* lengths;
  int64_t B, N, C;
  VoxelGrid<point_t> grid;
  // Grids read from the tensors' memory, each or both, or nullptr (grid holds them):
  // cloud b's origin axis k is origins[b * origin_bstride + k], its voxel
  // size voxels[b * voxel_bstride + k * voxel_kstride].
  const point_t* origins;
  const point_t* voxels;
  int64_t origin_bstride, voxel_bstride, voxel_kstride;
};

// Validated inputs seen as a batch: (N, 3) clouds become B = 1.
struct VoxelInputs {
  at::Tensor points, features, lengths;  // features/lengths may be undefined
  // Tensor forms of voxel size and origin in the points' dtype, or undefined
  // (voxel and origin below hold them).
  at::Tensor voxel_size_tensor, origin_tensor;
  int64_t grid[3];
  double voxel[3], origin[3];
  Reduce reduce;
  bool batched;

  int64_t B() const { return points.size(0); }
  int64_t N() const { return points.size(1); }
  int64_t C() const { return features.defined() ? features.size(2) : 0; }
  int64_t cells() const { return grid[0] * grid[1] * grid[2]; }

  // The result's shape, ([B,] [C,] X, Y, Z): B for batched clouds only, C
  // for the reduces that carry features only.
  std::vector<int64_t> result_shape() const {
    std::vector<int64_t> shape;
    if (batched)
      shape.push_back(B());
    if (reduce_needs_features(reduce))
      shape.push_back(C());
    for (int k = 0; k < 3; ++k)
      shape.push_back(grid[k]);
    return shape;
  }
};

inline VoxelInputs prepare_voxel_inputs(const at::Tensor& points,
                                        const std::optional<at::Tensor>& features,
                                        const std::optional<at::Tensor>& lengths,
                                        at::IntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                        at::ArrayRef<double> origin, Reduce reduce,
                                        const std::optional<at::Tensor>& voxel_size_tensor = {},
                                        const std::optional<at::Tensor>& origin_tensor = {}) {
  VoxelInputs in;
  in.batched = points.dim() == 3;
  in.points = in.batched ? points : points.unsqueeze(0);
  if (features.has_value())
    in.features = in.batched ? *features : features->unsqueeze(0);
  if (lengths.has_value())
    in.lengths = lengths->contiguous();
  for (int a = 0; a < 3; ++a) {
    in.grid[a] = grid_size[a];
    in.voxel[a] = voxel_size.size() == 1 ? voxel_size[0] : voxel_size[a];
    in.origin[a] = origin[a];
  }
  in.reduce = reduce;
  const auto as_points = [&](const std::optional<at::Tensor>& t) {
    return t.has_value() ? t->to(points.scalar_type()).contiguous() : at::Tensor();
  };
  in.voxel_size_tensor = as_points(voxel_size_tensor);
  in.origin_tensor = as_points(origin_tensor);
  return in;
}

template <typename point_t, typename feat_t>
VoxelArgs<point_t, feat_t> voxel_args(const VoxelInputs& in) {
  VoxelArgs<point_t, feat_t> a;
  a.points = in.points.data_ptr<point_t>();
  a.p_bstride = in.points.stride(0);
  a.p_nstride = in.points.stride(1);
  a.p_cstride = in.points.stride(2);
  a.features = in.features.defined() ? in.features.data_ptr<feat_t>() : nullptr;
  a.f_bstride = in.features.defined() ? in.features.stride(0) : 0;
  a.f_nstride = in.features.defined() ? in.features.stride(1) : 0;
  a.f_cstride = in.features.defined() ? in.features.stride(2) : 0;
  a.lengths = in.lengths.defined() ? in.lengths.data_ptr<int64_t>() : nullptr;
  a.B = in.B();
  a.N = in.N();
  a.C = in.C();
  a.grid.X = in.grid[0];
  a.grid.Y = in.grid[1];
  a.grid.Z = in.grid[2];
  for (int k = 0; k < 3; ++k) {
    a.grid.origin[k] = static_cast<point_t>(in.origin[k]);
    a.grid.voxel[k] = static_cast<point_t>(in.voxel[k]);
  }
  a.origins = a.voxels = nullptr;
  a.origin_bstride = a.voxel_bstride = a.voxel_kstride = 0;
  if (in.origin_tensor.defined()) {
    a.origins = in.origin_tensor.data_ptr<point_t>();
    a.origin_bstride = in.origin_tensor.dim() == 2 ? 3 : 0;
  }
  if (in.voxel_size_tensor.defined()) {
    const at::Tensor& v = in.voxel_size_tensor;
    a.voxels = v.data_ptr<point_t>();
    a.voxel_bstride = v.dim() == 2 ? 3 : 0;
    a.voxel_kstride = v.size(-1) == 1 ? 0 : 1;
  }
  return a;
}

// Voxel of point n of cloud b, or -1 (dropped, or past the cloud's length).
template <typename point_t, typename feat_t>
ROBOCACHE_HD int64_t point_voxel(const VoxelArgs<point_t, feat_t>& a, int64_t b, int64_t n) {
  if (a.lengths != nullptr && n >= a.lengths[b])
    return -1;
  const point_t* p = a.points + b * a.p_bstride + n * a.p_nstride;
  if (a.origins == nullptr && a.voxels == nullptr)
    return voxel_index(a.grid, p[0], p[a.p_cstride], p[2 * a.p_cstride]);
  VoxelGrid<point_t> g = a.grid;
  for (int k = 0; k < 3; ++k) {
    if (a.origins)
      g.origin[k] = a.origins[b * a.origin_bstride + k];
    if (a.voxels)
      g.voxel[k] = a.voxels[b * a.voxel_bstride + k * a.voxel_kstride];
  }
  return voxel_index(g, p[0], p[a.p_cstride], p[2 * a.p_cstride]);
}

// The gradient of one feature channel of a kept point `point`, from g, the
// result's gradient at that channel of the point's voxel: sum passes g
// whole, mean divides it by the voxel's point count (counts[cell]), max
// gives it to the voxel's winner (first[e]: the lowest-index point at the
// max) and 0 to the others. counts and first are read only for the reduce
// that needs them (their buffers exist only then). The CUDA backward
// (gather_grad_kernel) writes the same rule out rather than calling this: a
// call compiles there to the same math in another instruction order.
template <typename A, typename Index>
ROBOCACHE_HD A voxel_point_grad(Reduce reduce, A g, const int32_t* counts, int64_t cell,
                                const int32_t* first, int64_t e, Index point) {
  A x = A(0);
  if (reduce == Reduce::Sum)
    x = g;
  if (reduce == Reduce::Mean)
    x = g / A(counts[cell]);
  if (reduce == Reduce::Max && first[e] == point)
    x = g;
  return x;
}

}  // namespace robocache
