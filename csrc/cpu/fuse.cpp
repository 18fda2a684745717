// CPU entry points of robocache::fuse and robocache::_fuse_backward.
// The kernels are shared with resample (the interp kernels, csrc/cpu/interp_kernels.cpp).
// After the shared check (csrc/checks/fuse.cpp), lengths outside [1, S] are
// rejected too (reading them is free on the CPU).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

at::Tensor fuse_cpu(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                    const std::optional<at::Tensor>& lengths, c10::string_view modes) {
  const auto checked = check_fuse(values, times, query_times, lengths, modes);
  return interp_forward_cpu(fuse_inputs(checked, values, times, query_times, true));
}

std::tuple<std::vector<at::Tensor>, at::Tensor> fuse_backward_cpu(
    const at::Tensor& grad_out, at::TensorList values, at::TensorList times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view modes,
    const c10::List<bool>& values_grad, bool query_grad) {
  const auto checked = check_fuse_backward(grad_out, values, times, query_times, lengths, modes,
                                           values_grad.size(), query_grad);
  const auto in = fuse_inputs(checked, values, times, query_times, true);
  return interp_backward_cpu(in, grad_out, values_grad.vec(), query_grad);
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("fuse", &fuse_cpu);
  m.impl("_fuse_backward", &fuse_backward_cpu);
}

}  // namespace robocache
