// CPU kernel of robocache::anchor_windows: each anchor row's episode (index
// and anchor_offsets checked here), then each stream's windows at
// anchor_times[index] + deltas through the CPU window fill (windows.cpp).
#include <ATen/core/Tensor.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/index_select.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "robocache/error.h"
#include "robocache/checks.h"
#include "windows_cpu.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.anchor_windows";

// Each anchor row's episode, with anchor_offsets and index checked.
at::Tensor anchor_episodes(const at::Tensor& anchor_offsets, const at::Tensor& index,
                           int64_t N_anchor) {
  const at::Tensor off_t = anchor_offsets.contiguous(), index_t = index.contiguous();
  const int64_t* off = off_t.data_ptr<int64_t>();
  const int64_t E = off_t.numel() - 1;
  ROBOCACHE_CHECK_VALUE(off[0] >= 0 && off[E] <= N_anchor, kOp,
                        ": anchor_offsets must lie in [0, N_anchor = ", N_anchor,
                        "]; got anchor_offsets[0] = ", off[0], " and anchor_offsets[E] = ", off[E]);
  for (int64_t e = 0; e < E; ++e) {
    ROBOCACHE_CHECK_VALUE(off[e] <= off[e + 1], kOp,
                          ": anchor_offsets must be non-decreasing; anchor_offsets[", e,
                          "] = ", off[e], " > anchor_offsets[", e + 1, "] = ", off[e + 1]);
  }
  const int64_t* rows = index_t.data_ptr<int64_t>();
  at::Tensor episode = at::empty({index_t.numel()}, index.options());
  int64_t* ep = episode.data_ptr<int64_t>();
  for (int64_t b = 0; b < index_t.numel(); ++b) {
    ep[b] = episode_of_row(off, E, rows[b]);
    ROBOCACHE_CHECK_VALUE(ep[b] >= 0, kOp, ": index[", b, "] = ", rows[b],
                          " is not a row of any episode of the anchor stream (its episodes hold "
                          "rows [",
                          off[0], ", ", off[E], "))");
  }
  return episode;
}

}  // namespace

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor,
           std::vector<at::Tensor>>
anchor_windows_cpu(at::TensorList values, at::TensorList times, at::TensorList offsets,
                   at::TensorList deltas, const at::Tensor& anchor_offsets,
                   const at::Tensor& anchor_times, const at::Tensor& index,
                   at::TensorList anchor_rows, c10::string_view modes, at::IntArrayRef intervals,
                   at::IntArrayRef tolerances, int64_t edge_tolerance) {
  const auto checked =
      check_anchor_windows(values, times, offsets, deltas, anchor_offsets, anchor_times, index,
                           anchor_rows, modes, intervals, tolerances, edge_tolerance);
  const std::vector<WindowRule>& rules = checked.rules;
  const AnchorWindowSizes& n = checked.sizes;
  const at::Tensor episode = anchor_episodes(anchor_offsets, index, n.N_anchor.expect_int());
  const at::Tensor anchor_time = anchor_times.index_select(0, index).unsqueeze(1);
  std::vector<at::Tensor> outs, pads, ages;
  for (size_t k = 0; k < values.size(); ++k) {
    const WindowSizes& s = n.streams[k];
    const std::string where = std::string(kOp) + " (stream " + std::to_string(k) + ")";
    const at::Tensor query =
        at::add(anchor_time, deltas[k]);  // int64 addition wraps, as the kernels'
    const PackedIndex packed = packed_index(times[k], offsets[k], episode, query, s, where.c_str());
    at::Tensor out = at::empty_symint(anchor_window_shape(values[k], n, k), values[k].options());
    at::Tensor is_pad = at::empty({packed.B, packed.W}, values[k].options().dtype(at::kBool));
    at::Tensor age = at::empty({packed.B, packed.W}, values[k].options().dtype(at::kLong));
    fill_windows(values[k], packed, rules[k], out, is_pad, age);
    outs.push_back(out);
    pads.push_back(is_pad);
    ages.push_back(age);
  }
  std::vector<at::Tensor> rows;
  for (const at::Tensor& table : anchor_rows)
    rows.push_back(table.index_select(0, index));
  return {outs, pads, ages, episode, rows};
}

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("anchor_windows", &anchor_windows_cpu);
}

}  // namespace robocache
