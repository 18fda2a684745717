// CUDA entry points of robocache::resample and robocache::_resample_backward.
// The kernels are shared with fuse (csrc/cuda/interp_kernels.cu); resample is
// their one-stream case: one launch forward, one launch backward.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.resample";

// No value checks that would read device memory: lengths outside [1, S]
// follow the documented contract (NaN rows, clamping) instead.
MultiStreamInputs checked_inputs(const at::Tensor& values, const at::Tensor& times,
                                 const at::Tensor& query_times,
                                 const std::optional<at::Tensor>& lengths, c10::string_view mode) {
  const Mode m = parse_mode(mode, kOp);
  check_resample_inputs(values, times, query_times, lengths, kOp);
  return prepare_inputs({values}, {times}, query_times, {lengths}, {m});
}

at::Tensor resample_cuda(const at::Tensor& values, const at::Tensor& times,
                         const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                         c10::string_view mode) {
  return multi_stream_forward_cuda(checked_inputs(values, times, query_times, lengths, mode), kOp);
}

std::tuple<at::Tensor, at::Tensor> resample_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& values, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
    c10::string_view mode, bool values_grad, bool query_grad) {
  const auto in = checked_inputs(values, times, query_times, lengths, mode);
  check_grad_out(grad_out, values.size(0), query_times.size(-1), values.size(2), kOp);
  check_query_grad(query_times, query_grad, kOp);
  auto [grad_values, grad_query] =
      multi_stream_backward_cuda(in, grad_out, {values_grad}, query_grad, kOp);
  return {grad_values[0], grad_query};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("resample", &resample_cuda);
  m.impl("_resample_backward", &resample_backward_cuda);
}

}  // namespace robocache
