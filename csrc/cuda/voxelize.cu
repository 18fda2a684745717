// CUDA entry point of robocache::voxelize: dtype dispatch, allocation, and
// the launches of the kernels in voxelize_kernels.cuh. sum and mean raise
// PyTorch's nondeterminism alert (float atomics). Current CUDA stream, device
// guard, no host sync.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/full.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <limits>
#include <type_traits>

#include "launch.cuh"
#include "robocache/checks.h"
#include "robocache/dispatch.h"
#include "robocache/error.h"
#include "robocache/voxel.h"
#include "voxelize_kernels.cuh"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.voxelize";

unsigned int dense_blocks(int64_t groups) {
  return grid_blocks((groups + kDenseGroups - 1) / kDenseGroups, kOp);
}

template <typename out_t>
void poison_negative_lengths(const VoxelInputs& in, at::Tensor& out, out_t poison) {
  if (!in.lengths.defined() || out.numel() == 0)
    return;
  const int64_t total = out.numel();
  poison_negative_lengths_kernel<out_t>
      <<<grid_blocks(total, kOp), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          in.lengths.data_ptr<int64_t>(), total / in.B(), total, out.data_ptr<out_t>(), poison);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor voxelize_cuda(const at::Tensor& points, const std::optional<at::Tensor>& features,
                         const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                         at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                         c10::string_view reduce,
                         const std::optional<at::Tensor>& voxel_size_tensor,
                         const std::optional<at::Tensor>& origin_tensor) {
  const auto checked =
      check_voxelize(points, features, lengths, c10::fromIntArrayRefSlow(grid_size), voxel_size,
                     origin, reduce, voxel_size_tensor, origin_tensor);
  const auto in = voxelize_inputs(checked, points, features, lengths, grid_size, voxel_size, origin,
                                  voxel_size_tensor, origin_tensor, false);
  const c10::cuda::CUDAGuard guard(points.device());
  const int64_t B = in.B(), C = in.C(), cells = in.cells(), n = B * in.N();
  auto cuda_stream = at::cuda::getCurrentCUDAStream();
  at::Tensor result;
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_cuda", [&] {
    using point_t = scalar_t;
    if (in.reduce == Reduce::Occupancy) {
      result = at::empty({B, cells}, points.options());
      if (result.numel() == 0)
        return;
      const int64_t words_per_cloud = (cells + 31) / 32;
      // uint32 words, held in an int32 tensor (same bits).
      at::Tensor bits = at::zeros({B * words_per_cloud}, points.options().dtype(at::kInt));
      auto* bits_ptr = reinterpret_cast<uint32_t*>(bits.data_ptr<int32_t>());
      if (n > 0) {
        occupancy_bits_kernel<point_t><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
            voxel_args<point_t, float>(in), words_per_cloud, bits_ptr);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      const int64_t* lengths_ptr = in.lengths.defined() ? in.lengths.data_ptr<int64_t>() : nullptr;
      if (cells % 32 == 0) {
        write_occupancy_words_kernel<point_t>
            <<<grid_blocks(B * words_per_cloud, kOp), kThreads, 0, cuda_stream>>>(
                bits_ptr, B * words_per_cloud, cells, lengths_ptr, result.data_ptr<point_t>());
      } else if (cells % 4 == 0) {
        write_occupancy_kernel<point_t, 4>
            <<<grid_blocks((B * cells) / 4, kOp), kThreads, 0, cuda_stream>>>(
                bits_ptr, words_per_cloud, cells, B * cells, lengths_ptr,
                result.data_ptr<point_t>());
      } else {
        write_occupancy_kernel<point_t, 1>
            <<<grid_blocks(B * cells, kOp), kThreads, 0, cuda_stream>>>(
                bits_ptr, words_per_cloud, cells, B * cells, lengths_ptr,
                result.data_ptr<point_t>());
      }
      C10_CUDA_KERNEL_LAUNCH_CHECK();
      return;
    }
    if (in.reduce == Reduce::Count) {
      result = at::zeros({B, cells}, points.options().dtype(at::kInt));
      if (n > 0) {
        count_points_kernel<point_t, float><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
            voxel_args<point_t, float>(in), cells, result.data_ptr<int32_t>());
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      poison_negative_lengths<int32_t>(in, result, -1);
      return;
    }
    if (in.reduce != Reduce::Max) {
      at::globalContext().alertNotDeterministic(
          "robocache::voxelize (CUDA) with reduce='sum' or 'mean': float atomics");
    }
    // Slots are point indices, kept in int32.
    ROBOCACHE_CHECK(n <= int64_t(0x7fffffff), kOp,
                    ": at most 2^31 - 1 points per call on CUDA for sum/mean/max; got ", n,
                    " (split the batch)");
    ROBOCACHE_DISPATCH_VALUE_TYPES(in.features.scalar_type(), "voxelize_cuda", [&] {
      using feat_t = scalar_t;
      using A = compute_t<feat_t>;
      const auto acc_opts = in.features.options().dtype(c10::CppTypeToScalarType<A>::value);
      const auto int_opts = points.options().dtype(at::kInt);
      at::Tensor slot_of = at::full({B * cells}, -1, int_opts);
      // float sum/mean slots are padded to a multiple of 4 (16-byte atomics).
      const int64_t acc_stride =
          std::is_same<A, float>::value && in.reduce != Reduce::Max ? (C + 3) / 4 * 4 : C;
      at::Tensor acc =
          in.reduce == Reduce::Max
              ? at::full({n, acc_stride}, -std::numeric_limits<A>::infinity(), acc_opts)
              : at::zeros({n, acc_stride}, acc_opts);
      // mean: counts ride in a padding lane while they are exact in a float.
      const int64_t count_lane =
          in.reduce == Reduce::Mean && acc_stride > C && n <= (int64_t(1) << 24) ? C : -1;
      at::Tensor slot_count =
          in.reduce == Reduce::Mean && count_lane < 0 ? at::zeros({n}, int_opts) : at::Tensor();
      if (n > 0 && C > 0) {
        accumulate_slots_kernel<point_t, feat_t><<<grid_blocks(n, kOp), kThreads, 0, cuda_stream>>>(
            voxel_args<point_t, feat_t>(in), in.reduce, cells, slot_of.data_ptr<int32_t>(),
            acc.data_ptr<A>(), acc_stride,
            slot_count.defined() ? slot_count.data_ptr<int32_t>() : nullptr, count_lane);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      result = at::empty({B, C, cells}, in.features.options());
      if (result.numel() > 0) {
        const int32_t* counts = slot_count.defined() ? slot_count.data_ptr<int32_t>() : nullptr;
        if (cells % 4 == 0) {
          write_dense_kernel<feat_t, 4>
              <<<dense_blocks((B * cells) / 4), kThreads, 0, cuda_stream>>>(
                  slot_of.data_ptr<int32_t>(), acc.data_ptr<A>(), acc_stride, counts, count_lane,
                  in.reduce, C, cells, B * cells, result.data_ptr<feat_t>());
        } else {
          write_dense_kernel<feat_t, 1><<<dense_blocks(B * cells), kThreads, 0, cuda_stream>>>(
              slot_of.data_ptr<int32_t>(), acc.data_ptr<A>(), acc_stride, counts, count_lane,
              in.reduce, C, cells, B * cells, result.data_ptr<feat_t>());
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      }
      poison_negative_lengths<feat_t>(in, result, feat_t(std::numeric_limits<float>::quiet_NaN()));
    });
  });
  return result.view(in.result_shape());
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("voxelize", &voxelize_cuda);
}

}  // namespace robocache
