// CUDA entry points of robocache::sample_windows and its backward: checks,
// allocation, tile sizes and the launches of windows_kernels.cuh. One launch
// per call, on the current CUDA stream under a device guard; no host sync
// (episode indices and offsets are not read on the host; the kernels keep
// any value in bounds).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>

#include "launch.cuh"
#include "robocache/checks.h"
#include "windows_kernels.cuh"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.sample_windows";

WindowArgs window_args(const at::Tensor& times, const at::Tensor& offsets,
                       const at::Tensor& episode, const at::Tensor& query, const WindowSizes& n,
                       const WindowRule& rule) {
  return WindowArgs{times.data_ptr<int64_t>(),
                    offsets.data_ptr<int64_t>(),
                    episode.data_ptr<int64_t>(),
                    query.data_ptr<int64_t>(),
                    n.N.expect_int(),
                    n.E.expect_int(),
                    n.W.expect_int(),
                    n.B.expect_int() * n.W.expect_int(),
                    rule};
}

template <typename chunk_t>
void launch_gather(const WindowArgs& a, const at::Tensor& values, at::Tensor& out,
                   at::Tensor& is_pad, at::Tensor& age, int64_t row_bytes) {
  const int Q = tile_queries(row_bytes);
  gather_windows_kernel<chunk_t>
      <<<grid_blocks(a.M, Q, kOp, "windows", a.M), kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
          a, static_cast<const chunk_t*>(device_address(values)),
          row_bytes / int64_t(sizeof(chunk_t)), Q, static_cast<chunk_t*>(out.data_ptr()),
          is_pad.data_ptr<bool>(), age.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_windows_cuda(
    const at::Tensor& values, const at::Tensor& times, const at::Tensor& offsets,
    const at::Tensor& episode, const at::Tensor& query_times, c10::string_view mode,
    int64_t interval, int64_t tolerance, int64_t edge_tolerance) {
  const auto checked = check_sample_windows(values, times, offsets, episode, query_times, mode,
                                            interval, tolerance, edge_tolerance);
  const WindowRule& rule = checked.rule;
  const WindowSizes& n = checked.sizes;
  // Outputs and launches on the index's device (values may be pinned host memory).
  const c10::cuda::CUDAGuard guard(times.device());
  const at::Tensor v = values.contiguous(), t = times.contiguous(), o = offsets.contiguous(),
                   e = episode.contiguous(), q = query_times.contiguous();
  const int64_t B = n.B.expect_int(), W = n.W.expect_int(), D = n.D.expect_int();
  const auto options = values.options().device(times.device());
  at::Tensor out = at::empty({B, W, D}, options);
  at::Tensor is_pad = at::empty({B, W}, options.dtype(at::kBool));
  at::Tensor age = at::empty({B, W}, options.dtype(at::kLong));
  if (B * W == 0)
    return {out, is_pad, age};
  const WindowArgs a = window_args(t, o, e, q, n, rule);
  const int64_t row_bytes = D * v.element_size();
  if (!mode_blends(rule.mode)) {
    switch (copy_chunk_bytes(device_address(v), out.data_ptr(), row_bytes)) {
      case 16:
        launch_gather<uint4>(a, v, out, is_pad, age, row_bytes);
        break;
      case 8:
        launch_gather<uint2>(a, v, out, is_pad, age, row_bytes);
        break;
      case 4:
        launch_gather<uint32_t>(a, v, out, is_pad, age, row_bytes);
        break;
      case 2:
        launch_gather<uint16_t>(a, v, out, is_pad, age, row_bytes);
        break;
      default:
        launch_gather<uint8_t>(a, v, out, is_pad, age, row_bytes);
    }
    return {out, is_pad, age};
  }
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, v.scalar_type(), "sample_windows", [&] {
    using C = at::opmath_type<scalar_t>;
    const int Q = tile_queries(row_bytes);
    blend_windows_kernel<scalar_t, C><<<grid_blocks(a.M, Q, kOp, "windows", a.M), kThreads, 0,
                                        at::cuda::getCurrentCUDAStream()>>>(
        a, static_cast<const scalar_t*>(device_address(v)), D, Q, out.data_ptr<scalar_t>(),
        is_pad.data_ptr<bool>(), age.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  });
  return {out, is_pad, age};
}

at::Tensor sample_windows_backward_cuda(const at::Tensor& grad_out, const at::Tensor& times,
                                        const at::Tensor& offsets, const at::Tensor& episode,
                                        const at::Tensor& query_times, c10::string_view mode,
                                        int64_t interval, int64_t tolerance, int64_t edge_tolerance,
                                        c10::SymInt num_values) {
  const auto checked =
      check_sample_windows_backward(grad_out, times, offsets, episode, query_times, mode, interval,
                                    tolerance, edge_tolerance, num_values);
  const WindowRule& rule = checked.rule;
  const WindowSizes& n = checked.sizes;
  const c10::cuda::CUDAGuard guard(grad_out.device());
  const at::Tensor g = grad_out.contiguous(), t = times.contiguous(), o = offsets.contiguous(),
                   e = episode.contiguous(), q = query_times.contiguous();
  const int64_t N = n.N.expect_int(), D = n.D.expect_int();
  at::Tensor grad_values;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, g.scalar_type(), "sample_windows_backward", [&] {
        using acc_t = at::opmath_type<scalar_t>;
        at::Tensor acc =
            at::zeros({N, D}, g.options().dtype(c10::CppTypeToScalarType<acc_t>::value));
        const WindowArgs a = window_args(t, o, e, q, n, rule);
        if (a.M > 0 && D > 0) {
          const int Q = tile_queries(D * int64_t(sizeof(acc_t)));
          scatter_window_grads_kernel<scalar_t, acc_t>
              <<<grid_blocks(a.M, Q, kOp, "windows", a.M), kThreads, 0,
                 at::cuda::getCurrentCUDAStream()>>>(a, g.data_ptr<scalar_t>(), D, Q,
                                                     acc.data_ptr<acc_t>());
          C10_CUDA_KERNEL_LAUNCH_CHECK();
        }
        grad_values = acc.scalar_type() == g.scalar_type() ? acc : acc.to(g.scalar_type());
      });
  return grad_values;
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("sample_windows", &sample_windows_cuda);
  m.impl("_sample_windows_backward", &sample_windows_backward_cuda);
}

}  // namespace robocache
