// Meta (shape) kernels for robocache::resample and its backward: the shared
// symbolic check, then allocation only.
//
// Only symbolic sizes are used (sym_size / empty_symint), so fake-tensor
// tracing under torch.compile(dynamic=True) and torch.export keeps B, S and T
// symbolic instead of specializing them.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "robocache/checks.h"

namespace robocache {
namespace {

at::Tensor resample_meta(const at::Tensor& values, const at::Tensor& times,
                         const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                         c10::string_view mode) {
  const auto n = check_resample(values, times, query_times, lengths, mode).sizes;
  return at::empty_symint({n.B, n.T, n.D}, values.options());
}

std::tuple<at::Tensor, at::Tensor> resample_backward_meta(
    const at::Tensor& grad_out, const at::Tensor& values, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths, c10::string_view mode,
    bool values_grad, bool query_grad) {
  check_resample_backward(grad_out, values, times, query_times, lengths, mode, query_grad);
  at::Tensor gv = values_grad ? at::empty_symint(values.sym_sizes(), values.options())
                              : at::empty({0}, values.options());
  at::Tensor gq = query_grad ? at::empty_symint(query_times.sym_sizes(), query_times.options())
                             : at::empty({0}, query_times.options());
  return {gv, gq};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("resample", &resample_meta);
  m.impl("_resample_backward", &resample_backward_meta);
}

}  // namespace robocache
