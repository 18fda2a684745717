// CPU entry points of robocache::resample and robocache::_resample_backward.
// The kernels are shared with fuse (the interp kernels, csrc/cpu/interp_kernels.cpp).
// After the shared check (csrc/checks/resample.cpp), lengths outside [1, S]
// are rejected too (reading them is free on the CPU).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

at::Tensor resample_cpu(const at::Tensor& values, const at::Tensor& times,
                        const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                        c10::string_view mode) {
  const auto checked = check_resample(values, times, query_times, lengths, mode);
  return interp_forward_cpu(resample_inputs(checked, values, times, query_times, lengths, true));
}

std::tuple<at::Tensor, at::Tensor> resample_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& values, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view mode,
    bool values_grad, bool query_grad) {
  const auto checked =
      check_resample_backward(grad_out, values, times, query_times, lengths, mode, query_grad);
  const auto in = resample_inputs(checked, values, times, query_times, lengths, true);
  auto [grad_values, grad_query] = interp_backward_cpu(in, grad_out, {values_grad}, query_grad);
  return {grad_values[0], grad_query};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("resample", &resample_cpu);
  m.impl("_resample_backward", &resample_backward_cpu);
}

}  // namespace robocache
