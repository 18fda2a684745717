// The symbolic check of robocache::sample_windows, shared by CPU, CUDA and
// Meta (sizes only: no data is read, so it runs under fake tensors).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include "robocache/windows.h"

namespace robocache {

WindowMode parse_window_mode(c10::string_view mode, const char* op);

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

}  // namespace robocache
