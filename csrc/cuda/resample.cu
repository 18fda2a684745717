// CUDA kernels for robocache::resample and robocache::_resample_backward.
//
// Forward: one launch; each query is handled by a group of lanes that search
// the times once and stream the D channels with 16-byte loads and stores.
// Backward: one launch over the queries; gradients of values accumulate with
// atomics (so it raises PyTorch's nondeterminism alert), the query gradient
// is reduced inside each group with shuffles.
// Everything runs on the current stream under a device guard, never reads
// device data on the host, and is capturable in CUDA graphs.
#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/dispatch.h"
#include "robocache/launch.cuh"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.resample";

template <int VEC, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads)
    resample_forward_kernel(const StreamArgs<value_t, stamp_t> s, const QueryArgs<stamp_t> q,
                            value_t* __restrict__ out, int64_t num_queries, int log2G) {
  const int64_t i = int64_t(blockIdx.x) * (kThreads >> log2G) + (threadIdx.x >> log2G);
  if (i >= num_queries) return;
  const int G = 1 << log2G;
  const int lane = threadIdx.x & (G - 1);
  const int64_t b = i / q.T, t = i - b * q.T;
  const auto loc = locate_query(s, q, b, t);
  resample_one<VEC>(s, loc, b, lane, G, out + i * s.D);
}

template <int VEC, typename value_t, typename stamp_t>
__global__ void __launch_bounds__(kThreads) resample_backward_kernel(
    const StreamArgs<value_t, stamp_t> s, const QueryArgs<stamp_t> q,
    const value_t* __restrict__ grad, compute_t<value_t>* grad_values,
    weight_t<stamp_t>* __restrict__ grad_query, int64_t num_queries, int log2G) {
  using W = weight_t<stamp_t>;
  const int64_t i = int64_t(blockIdx.x) * (kThreads >> log2G) + (threadIdx.x >> log2G);
  const int G = 1 << log2G;
  const int lane = threadIdx.x & (G - 1);
  // Lanes past the end stay to the group reduction (the shuffles need the whole warp).
  const bool active = i < num_queries;
  compute_t<value_t> partial = 0;
  Location<W> loc{0, 0, W(0), W(0), true};
  if (active) {
    const int64_t b = i / q.T, t = i - b * q.T;
    loc = locate_query(s, q, b, t);
    partial = resample_one_backward<VEC>(s, loc, b, lane, G, grad + i * s.D, grad_values,
                                         grad_query != nullptr);
  }
  if (grad_query != nullptr) {
    partial = group_sum(partial, G);
    if (active && lane == 0) grad_query[i] = loc.dt != W(0) ? W(partial) / loc.dt : W(0);
  }
}

template <typename value_t, typename stamp_t>
void launch_forward(const at::Tensor& values, const at::Tensor& times, const at::Tensor& query,
                    const at::Tensor& lengths, Mode mode, at::Tensor& out) {
  const auto s = stream_args<value_t, stamp_t>(values, times, lengths, mode);
  const auto q = query_args<stamp_t>(query);
  const int64_t n = values.size(0) * q.T;
  auto stream = at::cuda::getCurrentCUDAStream();
  value_t* o = out.data_ptr<value_t>();
  if (can_vectorize<value_t>(values)) {
    constexpr int V = kVec16<value_t>;
    const int lg = group_log2(s.D / V);
    resample_forward_kernel<V><<<blocks_for(n, lg, kOp), kThreads, 0, stream>>>(s, q, o, n, lg);
  } else {
    const int lg = group_log2(s.D);
    resample_forward_kernel<1><<<blocks_for(n, lg, kOp), kThreads, 0, stream>>>(s, q, o, n, lg);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

template <typename value_t, typename stamp_t>
void launch_backward(const at::Tensor& grad, const at::Tensor& values, const at::Tensor& times,
                     const at::Tensor& query, const at::Tensor& lengths, Mode mode,
                     compute_t<value_t>* gv, weight_t<stamp_t>* gq) {
  const auto s = stream_args<value_t, stamp_t>(values, times, lengths, mode);
  const auto q = query_args<stamp_t>(query);
  const int64_t n = values.size(0) * q.T;
  auto stream = at::cuda::getCurrentCUDAStream();
  const value_t* g = grad.data_ptr<value_t>();
  if (can_vectorize<value_t>(values) && aligned16(g)) {
    constexpr int V = kVec16<value_t>;
    const int lg = group_log2(s.D / V);
    resample_backward_kernel<V>
        <<<blocks_for(n, lg, kOp), kThreads, 0, stream>>>(s, q, g, gv, gq, n, lg);
  } else {
    const int lg = group_log2(s.D);
    resample_backward_kernel<1>
        <<<blocks_for(n, lg, kOp), kThreads, 0, stream>>>(s, q, g, gv, gq, n, lg);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

at::Tensor resample_cuda(const at::Tensor& values_in, const at::Tensor& times,
                         const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                         c10::string_view mode_str) {
  const Mode mode = parse_mode(mode_str, kOp);
  check_resample_inputs(values_in, times, query_times, lengths, kOp);
  const c10::cuda::CUDAGuard guard(values_in.device());
  const at::Tensor values = unit_stride_d(values_in);
  at::Tensor out = at::empty({values.size(0), query_times.size(-1), values.size(2)},
                             values.options());
  if (out.numel() == 0) return out;
  const at::Tensor len = lengths.has_value() ? *lengths : at::Tensor();
  ROBOCACHE_DISPATCH_VALUE_TYPES(values.scalar_type(), "resample_cuda", [&] {
    using value_t = scalar_t;
    ROBOCACHE_DISPATCH_TIME_TYPES(times.scalar_type(), "resample_cuda", [&] {
      launch_forward<value_t, scalar_t>(values, times, query_times, len, mode, out);
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> resample_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& values_in, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
    c10::string_view mode_str, bool values_grad, bool query_grad) {
  const Mode mode = parse_mode(mode_str, kOp);
  check_resample_inputs(values_in, times, query_times, lengths, kOp);
  TORCH_CHECK_VALUE(!query_grad || at::isFloatingType(query_times.scalar_type()), kOp,
                    ": query_times of dtype ", query_times.scalar_type(),
                    " cannot receive a gradient");
  const int64_t B = values_in.size(0), S = values_in.size(1), D = values_in.size(2);
  const int64_t T = query_times.size(-1);
  TORCH_CHECK_VALUE(grad_out.sizes() == at::IntArrayRef({B, T, D}), kOp,
                    ": grad_out must have shape ", at::IntArrayRef({B, T, D}), "; got ",
                    grad_out.sizes());
  const c10::cuda::CUDAGuard guard(values_in.device());
  if (values_grad) {
    at::globalContext().alertNotDeterministic(
        "robocache::_resample_backward (CUDA): the gradient of values accumulates with atomics");
  }
  const at::Tensor values = unit_stride_d(values_in);
  // grad_out has the output's shape; its rows are read with the values' vector width.
  const at::Tensor grad = grad_out.to(values.scalar_type()).contiguous();
  const at::Tensor len = lengths.has_value() ? *lengths : at::Tensor();
  const auto acc_dtype = values.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto w_dtype = times.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor gv = values_grad ? at::zeros({B, S, D}, values.options().dtype(acc_dtype))
                              : at::empty({0}, values.options());
  at::Tensor gq = query_grad ? at::empty({B, T}, query_times.options().dtype(w_dtype))
                             : at::empty({0}, query_times.options());
  if ((values_grad || query_grad) && B * T > 0 && D > 0) {
    ROBOCACHE_DISPATCH_VALUE_TYPES(values.scalar_type(), "resample_backward_cuda", [&] {
      using value_t = scalar_t;
      ROBOCACHE_DISPATCH_TIME_TYPES(times.scalar_type(), "resample_backward_cuda", [&] {
        using stamp_t = scalar_t;
        launch_backward<value_t, stamp_t>(
            grad, values, times, query_times, len, mode,
            values_grad ? gv.data_ptr<compute_t<value_t>>() : nullptr,
            query_grad ? gq.data_ptr<weight_t<stamp_t>>() : nullptr);
      });
    });
  } else if (query_grad) {
    gq.zero_();
  }
  if (values_grad) gv = gv.to(values.scalar_type());
  if (query_grad) {
    if (query_times.dim() == 1) gq = gq.sum(0);
    gq = gq.to(query_times.scalar_type());
  }
  return {gv, gq};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("resample", &resample_cuda);
  m.impl("_resample_backward", &resample_backward_cuda);
}

}  // namespace robocache
