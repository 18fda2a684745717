// Meta (shape) kernels of robocache::sample_windows and its backward: the
// shared symbolic check, then allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "robocache/checks.h"

namespace robocache {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_windows_meta(
    const at::Tensor& values, const at::Tensor& times, const at::Tensor& offsets,
    const at::Tensor& episode, const at::Tensor& query_times, c10::string_view mode,
    int64_t interval, int64_t tolerance, int64_t edge_tolerance) {
  const WindowSizes n = check_sample_windows(values, times, offsets, episode, query_times, mode,
                                             interval, tolerance, edge_tolerance)
                            .sizes;
  return {at::empty_symint({n.B, n.W, n.D}, values.options()),
          at::empty_symint({n.B, n.W}, values.options().dtype(at::kBool)),
          at::empty_symint({n.B, n.W}, values.options().dtype(at::kLong))};
}

at::Tensor sample_windows_backward_meta(const at::Tensor& grad_out, const at::Tensor& times,
                                        const at::Tensor& offsets, const at::Tensor& episode,
                                        const at::Tensor& query_times, c10::string_view mode,
                                        int64_t interval, int64_t tolerance, int64_t edge_tolerance,
                                        c10::SymInt num_values) {
  const WindowSizes n =
      check_sample_windows_backward(grad_out, times, offsets, episode, query_times, mode, interval,
                                    tolerance, edge_tolerance, num_values)
          .sizes;
  return at::empty_symint({n.N, n.D}, grad_out.options());
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("sample_windows", &sample_windows_meta);
  m.impl("_sample_windows_backward", &sample_windows_backward_meta);
}

}  // namespace robocache
