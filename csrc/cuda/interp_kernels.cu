// CUDA kernels shared by resample (one stream) and fuse (K streams): dtype
// dispatch, allocation and launch of the kernels in multi_stream.cuh. One
// translation unit, so each kernel is compiled once.
#include <ATen/Context.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>

#include <string>

#include "robocache/interp_kernels.h"
#include "robocache/multi_stream.cuh"

namespace robocache {

at::Tensor multi_stream_forward_cuda(const MultiStreamInputs& in, const char* op) {
  const c10::cuda::CUDAGuard guard(in.query.device());
  int64_t total = 0;
  const auto cols = column_offsets(in, &total);
  const at::Tensor& v0 = in.values[0];
  at::Tensor out = at::empty({v0.size(0), in.query.size(-1), total}, v0.options());
  if (out.numel() == 0) return out;
  ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_forward_cuda", [&] {
    using value_t = scalar_t;
    ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_forward_cuda", [&] {
      launch_multi_stream_forward<value_t, scalar_t>(in, cols, out, op);
    });
  });
  return out;
}

std::tuple<std::vector<at::Tensor>, at::Tensor> multi_stream_backward_cuda(
    const MultiStreamInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
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
  const auto acc_dtype = v0.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto w_dtype = in.query.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  // Rows are read in place; only a non-unit channel stride forces a copy.
  at::Tensor grad = grad_out.to(v0.scalar_type());
  if (grad.size(2) > 1 && grad.stride(2) != 1) grad = grad.contiguous();
  std::vector<at::Tensor> acc;
  for (int64_t k = 0; k < K; ++k) {
    acc.push_back(values_grad[k] ? at::zeros(in.values[k].sizes(), v0.options().dtype(acc_dtype))
                                 : at::Tensor());
  }
  const int64_t launches = (K + kMaxStreams - 1) / kMaxStreams;
  at::Tensor gq_parts = query_grad
                            ? at::empty({launches, B, T}, in.query.options().dtype(w_dtype))
                            : at::Tensor();
  if (B * T > 0 && total > 0) {
    ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_backward_cuda", [&] {
      using value_t = scalar_t;
      ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_backward_cuda", [&] {
        using stamp_t = scalar_t;
        std::vector<compute_t<value_t>*> gv;
        for (const auto& a : acc) gv.push_back(a.defined() ? a.data_ptr<compute_t<value_t>>() : nullptr);
        launch_multi_stream_backward<value_t, stamp_t>(
            in, cols, grad, gv, query_grad ? gq_parts.data_ptr<weight_t<stamp_t>>() : nullptr, op);
      });
    });
  } else if (query_grad) {
    gq_parts.zero_();
  }
  std::vector<at::Tensor> grad_values;
  for (const auto& a : acc) {
    grad_values.push_back(a.defined() ? a.to(v0.scalar_type()) : at::empty({0}, v0.options()));
  }
  at::Tensor gq = at::empty({0}, in.query.options());
  if (query_grad) {
    gq = launches == 1 ? gq_parts[0] : gq_parts.sum(0);
    if (in.query.dim() == 1) gq = gq.sum(0);
    gq = gq.to(in.query.scalar_type());
  }
  return {grad_values, gq};
}

}  // namespace robocache
