// Meta (shape) kernel of robocache::anchor_windows: the shared symbolic
// check, then allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <vector>

#include "robocache/checks.h"

namespace robocache {
namespace {

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor,
           std::vector<at::Tensor>>
anchor_windows_meta(at::TensorList values, at::TensorList times, at::TensorList offsets,
                    at::TensorList deltas, const at::Tensor& anchor_offsets,
                    const at::Tensor& anchor_times, const at::Tensor& index,
                    at::TensorList anchor_rows, c10::string_view modes, at::IntArrayRef intervals,
                    at::IntArrayRef tolerances, int64_t edge_tolerance) {
  const AnchorWindowSizes n =
      check_anchor_windows(values, times, offsets, deltas, anchor_offsets, anchor_times, index,
                           anchor_rows, modes, intervals, tolerances, edge_tolerance)
          .sizes;
  std::vector<at::Tensor> outs, pads, ages;
  for (size_t k = 0; k < values.size(); ++k) {
    const auto& options = values[k].options();
    outs.push_back(at::empty_symint(anchor_window_shape(values[k], n, k), options));
    pads.push_back(at::empty_symint({n.B, n.streams[k].W}, options.dtype(at::kBool)));
    ages.push_back(at::empty_symint({n.B, n.streams[k].W}, options.dtype(at::kLong)));
  }
  std::vector<at::Tensor> rows;
  for (const at::Tensor& table : anchor_rows)
    rows.push_back(at::empty_symint(anchor_row_shape(table, n), table.options()));
  return {outs, pads, ages, at::empty_symint({n.B}, index.options()), rows};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("anchor_windows", &anchor_windows_meta);
}

}  // namespace robocache
