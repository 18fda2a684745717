// The CPU window fill shared by robocache::sample_windows and
// robocache::anchor_windows (csrc/cpu/windows.cpp), and the CPU kernel of
// robocache::anchor_windows, which the mapped rows' finder calls directly
// (csrc/io/window_rows.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>
#include <vector>

#include "robocache/checks.h"

namespace robocache {

// A packed stream's index tensors (times, offsets) and the windows' episode
// and query tensors, contiguous, and their sizes.
struct PackedIndex {
  at::Tensor times, offsets, episode, query;
  int64_t N, E, B, W;
};

// The index tensors made contiguous, with offsets (in [0, N], non-decreasing)
// and every episode index (in [0, E)) checked; errors name `op`.
PackedIndex packed_index(const at::Tensor& times, const at::Tensor& offsets,
                         const at::Tensor& episode, const at::Tensor& query_times,
                         const WindowSizes& n, const char* op);

// The windows of `values` (N rows of any trailing shape) at packed's queries into
// out (B, W, ...), is_pad (B, W) and age (B, W), all contiguous on the CPU.
void fill_windows(const at::Tensor& values, const PackedIndex& packed, const WindowRule& rule,
                  at::Tensor& out, at::Tensor& is_pad, at::Tensor& age);

// robocache::anchor_windows on the CPU (the schema's arguments and results).
std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor,
           std::vector<at::Tensor>>
anchor_windows_cpu(at::TensorList values, at::TensorList times, at::TensorList offsets,
                   at::TensorList deltas, const at::Tensor& anchor_offsets,
                   const at::Tensor& anchor_times, const at::Tensor& index,
                   at::TensorList anchor_rows, c10::string_view modes, at::IntArrayRef intervals,
                   at::IntArrayRef tolerances, int64_t edge_tolerance);

}  // namespace robocache
