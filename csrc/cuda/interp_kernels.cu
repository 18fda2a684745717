// The CUDA interp kernels, shared by resample (one stream) and fuse (K
// streams): dtype dispatch, allocation, and the launches of interp_launch.cuh.
// One translation unit, so each kernel is compiled once.
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <string>

#include "interp_launch.cuh"
#include "robocache/interp_kernels.h"

namespace robocache {

at::Tensor interp_forward_cuda(const InterpInputs& in, const char* op) {
  const c10::cuda::CUDAGuard guard(in.query.device());
  int64_t total = 0;
  const auto cols = column_offsets(in, &total);
  const at::Tensor& v0 = in.values[0];
  at::Tensor out = at::empty({v0.size(0), in.query.size(-1), total}, v0.options());
  if (out.numel() == 0)
    return out;
  ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_forward_cuda", [&] {
    using value_t = scalar_t;
    ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_forward_cuda", [&] {
      launch_interp_forward<value_t, scalar_t>(in, cols, out, op);
    });
  });
  return out;
}

std::tuple<std::vector<at::Tensor>, at::Tensor> interp_backward_cuda(
    const InterpInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad, const char* op) {
  const c10::cuda::CUDAGuard guard(in.query.device());
  for (bool needed : values_grad) {
    if (needed) {
      at::globalContext().alertNotDeterministic(
          std::string(op) + " backward (CUDA): the gradient of values accumulates with atomics");
      break;
    }
  }
  int64_t total = 0;
  const auto cols = column_offsets(in, &total);
  const at::Tensor& v0 = in.values[0];
  const int64_t B = v0.size(0), T = in.query.size(-1), K = in.values.size();
  const auto buf = interp_grad_buffers(in, grad_out, values_grad);
  // Rows are read in place; only a non-unit channel stride forces a copy.
  at::Tensor grad = buf.grad;
  if (grad.size(2) > 1 && grad.stride(2) != 1)
    grad = grad.contiguous();
  const int64_t launches = (K + kMaxStreams - 1) / kMaxStreams;
  at::Tensor gq_parts = query_grad
                            ? at::empty({launches, B, T}, in.query.options().dtype(buf.query_dtype))
                            : at::Tensor();
  if (B * T > 0 && total > 0) {
    ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_backward_cuda", [&] {
      using value_t = scalar_t;
      ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_backward_cuda", [&] {
        using stamp_t = scalar_t;
        launch_interp_backward<value_t, stamp_t>(
            in, cols, grad, buf.acc_ptrs<compute_t<value_t>>(),
            query_grad ? gq_parts.data_ptr<weight_t<stamp_t>>() : nullptr, op);
      });
    });
  } else if (query_grad) {
    gq_parts.zero_();
  }
  at::Tensor gq;
  if (query_grad)
    gq = launches == 1 ? gq_parts[0] : gq_parts.sum(0);
  return interp_grad_results(in, buf, gq);
}

}  // namespace robocache
