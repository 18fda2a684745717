// CUDA entry points of robocache::resample and robocache::_resample_backward.
// The kernels are shared with fuse (the interp kernels, csrc/cuda/interp_kernels.cu);
// one launch forward, one launch backward (up to 32 streams). Lengths are never
// read on the host: values outside [1, S] follow the documented contract
// (NaN rows, clamping) instead of raising.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.resample";

at::Tensor resample_cuda(const at::Tensor& values, const at::Tensor& times,
                         const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                         c10::string_view mode) {
  const auto checked = check_resample(values, times, query_times, lengths, mode);
  return interp_forward_cuda(resample_inputs(checked, values, times, query_times, lengths, false),
                             kOp);
}

std::tuple<at::Tensor, at::Tensor> resample_backward_cuda(
    const at::Tensor& grad_out, const at::Tensor& values, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view mode,
    bool values_grad, bool query_grad) {
  const auto checked =
      check_resample_backward(grad_out, values, times, query_times, lengths, mode, query_grad);
  const auto in = resample_inputs(checked, values, times, query_times, lengths, false);
  auto [grad_values, grad_query] =
      interp_backward_cuda(in, grad_out, {values_grad}, query_grad, kOp);
  return {grad_values[0], grad_query};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("resample", &resample_cuda);
  m.impl("_resample_backward", &resample_backward_cuda);
}

}  // namespace robocache
