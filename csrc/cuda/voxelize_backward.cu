// CUDA entry point of robocache::_voxelize_backward: allocation and the
// launches of the kernels in voxelize_backward_kernels.cuh (and, for mean,
// voxelize_kernels.cuh's count_points_kernel). Current CUDA stream, device
// guard, no host sync.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>

#include "launch.cuh"
#include "robocache/checks.h"
#include "robocache/dispatch.h"
#include "robocache/voxel.h"
#include "voxelize_backward_kernels.cuh"
#include "voxelize_kernels.cuh"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.voxelize";

at::Tensor voxelize_backward_cuda(const at::Tensor& grad, const at::Tensor& points,
                                  const at::Tensor& features,
                                  const std::optional<at::Tensor>& lengths,
                                  at::IntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                  at::ArrayRef<double> origin, c10::string_view reduce,
                                  const at::Tensor& result,
                                  const std::optional<at::Tensor>& voxel_size_tensor,
                                  const std::optional<at::Tensor>& origin_tensor) {
  const auto checked =
      check_voxelize_backward(grad, points, features, lengths, c10::fromIntArrayRefSlow(grid_size),
                              voxel_size, origin, reduce, result, voxel_size_tensor, origin_tensor);
  const auto in = voxelize_inputs(checked, points, features, lengths, grid_size, voxel_size, origin,
                                  voxel_size_tensor, origin_tensor, false);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t B = in.B(), C = in.C(), cells = in.cells(), n = B * in.N();
  auto cuda_stream = at::cuda::getCurrentCUDAStream();
  at::Tensor grad_features = at::empty({B, in.N(), C}, features.options());
  const at::Tensor g = grad.to(features.scalar_type()).contiguous();
  const at::Tensor res = result.contiguous();
  if (n > 0 && C > 0) {
    AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_backward_cuda", [&] {
      using point_t = scalar_t;
      ROBOCACHE_DISPATCH_VALUE_TYPES(features.scalar_type(), "voxelize_backward_cuda", [&] {
        using feat_t = scalar_t;
        const auto a = voxel_args<point_t, feat_t>(in);
        at::Tensor counts, first;
        if (in.reduce == Reduce::Mean) {
          counts = at::zeros({B, cells}, points.options().dtype(at::kInt));
          count_points_kernel<point_t, feat_t><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
              a, cells, counts.data_ptr<int32_t>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        } else if (in.reduce == Reduce::Max) {
          first = at::full({B, C, cells}, std::numeric_limits<int32_t>::max(),
                           points.options().dtype(at::kInt));
          argmax_kernel<point_t, feat_t><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
              a, cells, res.data_ptr<feat_t>(), first.data_ptr<int32_t>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        gather_grad_kernel<point_t, feat_t><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
            a, in.reduce, cells, g.data_ptr<feat_t>(),
            counts.defined() ? counts.data_ptr<int32_t>() : nullptr,
            first.defined() ? first.data_ptr<int32_t>() : nullptr,
            grad_features.data_ptr<feat_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
    });
  } else {
    grad_features.zero_();
  }
  return in.batched ? grad_features : grad_features.squeeze(0);
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("_voxelize_backward", &voxelize_backward_cuda);
}

}  // namespace robocache
