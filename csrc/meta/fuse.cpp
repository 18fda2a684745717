// Meta (shape) kernels for robocache::fuse and its backward: the shared
// symbolic check, then allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "robocache/checks.h"

namespace robocache {
namespace {

at::Tensor fuse_meta(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                     const std::optional<at::Tensor>& lengths, c10::string_view modes) {
  const auto n = check_fuse(values, times, query_times, lengths, modes).sizes;
  return at::empty_symint({n.B, n.T, n.D_total}, values[0].options());
}

std::tuple<std::vector<at::Tensor>, at::Tensor> fuse_backward_meta(
    const at::Tensor& grad_out, at::TensorList values, at::TensorList times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view modes,
    const c10::List<bool>& values_grad, bool query_grad) {
  check_fuse_backward(grad_out, values, times, query_times, lengths, modes, values_grad.size(),
                      query_grad);
  std::vector<at::Tensor> gv;
  for (size_t k = 0; k < values.size(); ++k) {
    gv.push_back(values_grad.get(k) ? at::empty_symint(values[k].sym_sizes(), values[k].options())
                                    : at::empty({0}, values[k].options()));
  }
  at::Tensor gq = query_grad ? at::empty_symint(query_times.sym_sizes(), query_times.options())
                             : at::empty({0}, query_times.options());
  return {gv, gq};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("fuse", &fuse_meta);
  m.impl("_fuse_backward", &fuse_backward_meta);
}

}  // namespace robocache
