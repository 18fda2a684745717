// The symbolic check of robocache::sample_windows, shared by CPU, CUDA and
// Meta (sizes only: no data is read, so it runs under fake tensors).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include <vector>

#include "robocache/windows.h"

namespace robocache {

struct WindowSizes {
  c10::SymInt N, D, E, B, W;  // samples, channels, episodes, windows, queries per window
};

// values (N, D) any dtype (floating for linear and mean); times (N,) int64;
// offsets (E + 1,) int64; episode (B,) int64; query_times (B, W) int64; one
// device. interval > 0 for mean; tolerance >= -1 (-1: none); edge_tolerance >= 0.
WindowSizes check_window_inputs(const at::Tensor& values, const at::Tensor& times,
                                const at::Tensor& offsets, const at::Tensor& episode,
                                const at::Tensor& query_times, const WindowRule& rule,
                                const char* op);

// The rule from the operator's scalar arguments, validated.
WindowRule window_rule(c10::string_view mode, int64_t interval, int64_t tolerance,
                       int64_t edge_tolerance, const char* op);

// The backward's inputs: grad_out (B, W, D) floating, the same index
// tensors, and num_values = N (the rows of values).
WindowSizes check_window_backward_inputs(const at::Tensor& grad_out, const at::Tensor& times,
                                         const at::Tensor& offsets, const at::Tensor& episode,
                                         const at::Tensor& query_times,
                                         const c10::SymInt& num_values, const char* op);

// robocache::anchor_windows: K streams' windows around B anchor rows.
struct AnchorWindowSizes {
  c10::SymInt E, B, N_anchor;
  std::vector<WindowSizes> streams;  // per stream: N, D (row elements), E, B, W
};

// One rule per stream: modes one for all or K comma-separated; intervals and
// tolerances empty (0 and -1 for all), one for all, or K.
std::vector<WindowRule> anchor_window_rules(c10::string_view modes, c10::IntArrayRef intervals,
                                            c10::IntArrayRef tolerances, int64_t edge_tolerance,
                                            size_t K, const char* op);

// values[k] (N_k, *shape_k), times[k] (N_k,), offsets[k] (E + 1,), deltas[k]
// (W_k >= 1,) int64; anchor_offsets (E + 1,), anchor_times (N_anchor,), index
// (B,) int64; anchor_rows[j] (N_anchor, *shape_j) any dtype; K >= 1; one device.
AnchorWindowSizes check_anchor_window_inputs(at::TensorList values, at::TensorList times,
                                             at::TensorList offsets, at::TensorList deltas,
                                             const at::Tensor& anchor_offsets,
                                             const at::Tensor& anchor_times,
                                             const at::Tensor& index, at::TensorList anchor_rows,
                                             const std::vector<WindowRule>& rules, const char* op);

// The output shape of stream k: (B, W_k, *values[k].shape[1:]).
std::vector<c10::SymInt> anchor_window_shape(const at::Tensor& values, const AnchorWindowSizes& n,
                                             size_t k);

// The output shape of an anchor-row table: (B, *rows.shape[1:]).
std::vector<c10::SymInt> anchor_row_shape(const at::Tensor& rows, const AnchorWindowSizes& n);

}  // namespace robocache
