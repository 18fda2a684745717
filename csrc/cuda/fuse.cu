// CUDA entry points of robocache::fuse and robocache::_fuse_backward.
// The kernels are shared with resample (the interp kernels, csrc/cuda/interp_kernels.cu);
// one launch forward, one launch backward (up to 32 streams). Lengths are never
// read on the host: values outside [1, S] follow the documented contract
// (NaN rows, clamping) instead of raising.
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.fuse";

at::Tensor fuse_cuda(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                     const std::optional<at::Tensor>& lengths, c10::string_view modes) {
  const auto checked = check_fuse(values, times, query_times, lengths, modes);
  return interp_forward_cuda(fuse_inputs(checked, values, times, query_times, false), kOp);
}

std::tuple<std::vector<at::Tensor>, at::Tensor> fuse_backward_cuda(
    const at::Tensor& grad_out, at::TensorList values, at::TensorList times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view modes,
    const c10::List<bool>& values_grad, bool query_grad) {
  const auto checked = check_fuse_backward(grad_out, values, times, query_times, lengths, modes,
                                           values_grad.size(), query_grad);
  const auto in = fuse_inputs(checked, values, times, query_times, false);
  return interp_backward_cuda(in, grad_out, values_grad.vec(), query_grad, kOp);
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("fuse", &fuse_cuda);
  m.impl("_fuse_backward", &fuse_backward_cuda);
}

}  // namespace robocache
