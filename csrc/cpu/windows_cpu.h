// The CPU window fill shared by robocache::sample_windows and
// robocache::anchor_windows (csrc/cpu/windows.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

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

}  // namespace robocache
