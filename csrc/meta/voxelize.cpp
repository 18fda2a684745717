// Meta (shape) kernels for robocache::voxelize and its backward: the shared
// symbolic check, then allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "robocache/checks.h"

namespace robocache {
namespace {

at::Tensor voxelize_meta(const at::Tensor& points, const std::optional<at::Tensor>& features,
                         const std::optional<at::Tensor>& lengths, c10::SymIntArrayRef grid_size,
                         at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                         c10::string_view reduce,
                         const std::optional<at::Tensor>& voxel_size_tensor,
                         const std::optional<at::Tensor>& origin_tensor) {
  const auto checked = check_voxelize(points, features, lengths, grid_size, voxel_size, origin,
                                      reduce, voxel_size_tensor, origin_tensor);
  const auto& shape = checked.result_shape;
  switch (checked.reduce) {
    case Reduce::Occupancy:
      return at::empty_symint(shape, points.options());
    case Reduce::Count:
      return at::empty_symint(shape, points.options().dtype(at::kInt));
    default:
      return at::empty_symint(shape, features->options());
  }
}

at::Tensor voxelize_backward_meta(const at::Tensor& grad, const at::Tensor& points,
                                  const at::Tensor& features,
                                  const std::optional<at::Tensor>& lengths,
                                  c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                  at::ArrayRef<double> origin, c10::string_view reduce,
                                  const at::Tensor& result,
                                  const std::optional<at::Tensor>& voxel_size_tensor,
                                  const std::optional<at::Tensor>& origin_tensor) {
  check_voxelize_backward(grad, points, features, lengths, grid_size, voxel_size, origin, reduce,
                          result, voxel_size_tensor, origin_tensor);
  return at::empty_symint(features.sym_sizes(), features.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("voxelize", &voxelize_meta);
  m.impl("_voxelize_backward", &voxelize_backward_meta);
}

}  // namespace robocache
