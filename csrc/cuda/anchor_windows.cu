// CUDA entry point of robocache::anchor_windows: checks, allocation, each
// source's tile size and row rule (a stream's windows or an anchor-row
// table), and one launch of anchor_windows_kernels.cuh per kMaxAnchorSources
// sources, on the current CUDA stream under a device guard. No host sync:
// index, offsets and times are not read on the host.
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <cstdint>
#include <vector>

#include "anchor_windows_kernels.cuh"
#include "launch.cuh"
#include "robocache/checks.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.anchor_windows";

// The widest copy whose chunk divides the row and both base addresses.
RowRule copy_rule(const void* values, const void* out, int64_t row_bytes, int64_t& chunk) {
  chunk = copy_chunk_bytes(values, out, row_bytes);
  switch (chunk) {
    case 16:
      return RowRule::Copy16;
    case 8:
      return RowRule::Copy8;
    case 4:
      return RowRule::Copy4;
    case 2:
      return RowRule::Copy2;
    default:
      return RowRule::Copy1;
  }
}

RowRule blend_rule(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return RowRule::BlendFloat;
    case at::kDouble:
      return RowRule::BlendDouble;
    case at::kHalf:
      return RowRule::BlendHalf;
    default:
      return RowRule::BlendBFloat16;  // the shared check allows only these four
  }
}

std::tuple<std::vector<at::Tensor>, std::vector<at::Tensor>, std::vector<at::Tensor>, at::Tensor,
           std::vector<at::Tensor>>
anchor_windows_cuda(at::TensorList values, at::TensorList times, at::TensorList offsets,
                    at::TensorList deltas, const at::Tensor& anchor_offsets,
                    const at::Tensor& anchor_times, const at::Tensor& index,
                    at::TensorList anchor_rows, c10::string_view modes, at::IntArrayRef intervals,
                    at::IntArrayRef tolerances, int64_t edge_tolerance) {
  const size_t K = values.size();
  const auto checked =
      check_anchor_windows(values, times, offsets, deltas, anchor_offsets, anchor_times, index,
                           anchor_rows, modes, intervals, tolerances, edge_tolerance);
  const std::vector<WindowRule>& rules = checked.rules;
  const AnchorWindowSizes& n = checked.sizes;
  // Outputs and launches on the index's device (values may be pinned host memory).
  const c10::Device device = anchor_times.device();
  const c10::cuda::CUDAGuard guard(device);
  const int64_t B = n.B.expect_int();
  const at::Tensor a_off = anchor_offsets.contiguous(), a_times = anchor_times.contiguous(),
                   idx = index.contiguous();
  at::Tensor episode = at::empty({B}, index.options());
  std::vector<at::Tensor> outs, pads, ages, rows;
  for (size_t k = 0; k < K; ++k) {
    const int64_t W = n.streams[k].W.expect_int();
    const auto options = values[k].options().device(device);
    outs.push_back(at::empty_symint(anchor_window_shape(values[k], n, k), options));
    pads.push_back(at::empty({B, W}, options.dtype(at::kBool)));
    ages.push_back(at::empty({B, W}, options.dtype(at::kLong)));
  }
  for (const at::Tensor& table : anchor_rows)
    rows.push_back(at::empty_symint(anchor_row_shape(table, n), table.options().device(device)));
  if (B == 0)
    return {outs, pads, ages, episode, rows};
  AnchorArgs a{};
  a.anchor_offsets = a_off.data_ptr<int64_t>();
  a.anchor_times = a_times.data_ptr<int64_t>();
  a.index = idx.data_ptr<int64_t>();
  a.episode = episode.data_ptr<int64_t>();
  a.E = n.E.expect_int();
  a.N_anchor = n.N_anchor.expect_int();
  int64_t blocks = 0;
  bool blends_any = false;
  const auto launch = [&] {
    // Launches of point modes only skip the blend code (fewer registers).
    const auto kernel = blends_any ? anchor_windows_kernel<true> : anchor_windows_kernel<false>;
    kernel<<<grid_blocks(blocks, 1, kOp, "window tiles", blocks), kThreads, 0,
             at::cuda::getCurrentCUDAStream()>>>(a);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    a.episode = nullptr;  // the first launch writes it
    a.K = 0;
    blocks = 0;
    blends_any = false;
  };
  // Adds a source of M queries whose rows hold `row_bytes` of `dtype` (and
  // launches when a launch's sources are full).
  const auto add = [&](AnchorSource s, at::ScalarType dtype, int64_t D, int64_t row_bytes) {
    s.M = B * s.W;
    s.Q = tile_queries(row_bytes);
    const bool blends = mode_blends(s.rule.mode);
    int64_t chunk = 1;
    s.row_rule = blends ? blend_rule(dtype) : copy_rule(s.values, s.out, row_bytes, chunk);
    s.row_units = blends ? D : row_bytes / chunk;
    s.first_block = blocks;
    blends_any = blends_any || blends;
    blocks += (s.M + s.Q - 1) / s.Q;
    a.sources[a.K++] = s;
    if (a.K == kMaxAnchorSources)
      launch();
  };
  std::vector<at::Tensor> inputs;  // kept alive until the launches are queued
  inputs.reserve(4 * K + anchor_rows.size());
  for (size_t k = 0; k < K; ++k) {
    for (const at::Tensor& t : {values[k].contiguous(), times[k].contiguous(),
                                offsets[k].contiguous(), deltas[k].contiguous()})
      inputs.push_back(t);
    const at::Tensor* v = &inputs[inputs.size() - 4];
    AnchorSource s{};
    s.values = device_address(*v);
    s.times = v[1].data_ptr<int64_t>();
    s.offsets = v[2].data_ptr<int64_t>();
    s.deltas = v[3].data_ptr<int64_t>();
    s.out = outs[k].data_ptr();
    s.is_pad = pads[k].data_ptr<bool>();
    s.age = ages[k].data_ptr<int64_t>();
    s.N = n.streams[k].N.expect_int();
    s.W = n.streams[k].W.expect_int();
    s.rule = rules[k];
    const int64_t D = n.streams[k].D.expect_int();
    add(s, v->scalar_type(), D, D * v->element_size());
  }
  for (size_t j = 0; j < anchor_rows.size(); ++j) {
    inputs.push_back(anchor_rows[j].contiguous());
    const at::Tensor& table = inputs.back();
    AnchorSource s{};
    s.values = device_address(table);
    s.out = rows[j].data_ptr();
    s.N = a.N_anchor;
    s.W = 1;
    s.rule = WindowRule{Mode::Nearest, 0, -1, 0};
    s.at_anchor_row = true;
    const int64_t row_bytes = rows[j].numel() / B * table.element_size();
    add(s, table.scalar_type(), 0, row_bytes);
  }
  if (a.K > 0)
    launch();
  return {outs, pads, ages, episode, rows};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("anchor_windows", &anchor_windows_cuda);
}

}  // namespace robocache
