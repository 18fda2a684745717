// CPU entry points of robocache::fuse and robocache::_fuse_backward.
// The kernels are shared with resample (csrc/cpu/interp_kernels.cpp).
#include <ATen/core/Tensor.h>
#include <torch/library.h>

#include "robocache/error.h"
#include "robocache/checks.h"
#include "robocache/interp_kernels.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.fuse";

MultiStreamInputs checked_inputs(at::TensorList values, at::TensorList times,
                                 const at::Tensor& query_times,
                                 const std::optional<at::Tensor>& lengths,
                                 c10::string_view modes) {
  ROBOCACHE_CHECK_VALUE(!values.empty(), kOp, ": needs at least one stream; got an empty list");
  const auto len = lengths_per_stream(lengths, values.size(), kOp);
  auto m = modes_per_stream(modes, values.size(), kOp);
  check_multi_stream_inputs(values, times, query_times, len, kOp);
  for (size_t k = 0; k < len.size(); ++k) {
    if (len[k].has_value()) {
      check_lengths_values_cpu(*len[k], values[k].size(1),
                               std::string(kOp) + ": stream " + std::to_string(k));
    }
  }
  return prepare_inputs(values, times, query_times, len, std::move(m));
}

at::Tensor fuse_cpu(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                    const std::optional<at::Tensor>& lengths,
                    c10::string_view modes) {
  return multi_stream_forward_cpu(checked_inputs(values, times, query_times, lengths, modes), kOp);
}

std::tuple<std::vector<at::Tensor>, at::Tensor> fuse_backward_cpu(
    const at::Tensor& grad_out, at::TensorList values, at::TensorList times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
    c10::string_view modes, const c10::List<bool>& values_grad, bool query_grad) {
  const auto in = checked_inputs(values, times, query_times, lengths, modes);
  ROBOCACHE_CHECK_VALUE(values_grad.size() == values.size(), kOp, ": values_grad has ",
                    values_grad.size(), " entries for ", values.size(), " streams");
  int64_t total = 0;
  column_offsets(in, &total);
  check_grad_out(grad_out, values[0].size(0), query_times.size(-1), total, kOp);
  check_query_grad(query_times, query_grad, kOp);
  return multi_stream_backward_cpu(in, grad_out, values_grad.vec(), query_grad, kOp);
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("fuse", &fuse_cpu);
  m.impl("_fuse_backward", &fuse_backward_cpu);
}

}  // namespace robocache
