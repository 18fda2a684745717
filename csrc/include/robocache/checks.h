// The one symbolic check of each operator, shared by its CPU, CUDA and Meta
// kernels (csrc/checks/<op>.cpp; a backward op's check sits with its forward
// op's). As ATen's structured kernels run one meta function
// (TORCH_META_FUNC) before every backend's implementation, each backend
// starts with the same check_<op>, which validates every argument and
// returns what the kernels need: the parsed arguments and the output sizes.
//
// The checks work on symbolic sizes and read no tensor data, so the Meta
// kernels run them under fake tensors and torch.compile(dynamic=True)
// without specializing shapes: equalities between sizes become deferred
// runtime asserts, not guards. Checks of the data itself come after, where
// reading it is free (the CPU: the *_inputs builders with host_lengths, and
// the window ops' offsets and episode indices); CUDA never reads device data
// on the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/ArrayRef.h>
#include <c10/util/string_view.h>

#include <optional>
#include <vector>

#include "robocache/augment.h"
#include "robocache/interp_args.h"
#include "robocache/mode.h"
#include "robocache/voxel.h"
#include "robocache/windows.h"

namespace robocache {

// ---- resample and _resample_backward (csrc/checks/resample.cpp)

struct ResampleSizes {
  c10::SymInt B, S, T, D;  // the output is (B, T, D)
};

struct ResampleChecked {
  Mode mode;
  ResampleSizes sizes;
};

ResampleChecked check_resample(const at::Tensor& values, const at::Tensor& times,
                               const at::Tensor& query_times,
                               const std::optional<at::Tensor>& lengths, c10::string_view mode);

// The forward's check, then grad_out (B, T, D) and a query gradient only for
// floating query times.
ResampleChecked check_resample_backward(const at::Tensor& grad_out, const at::Tensor& values,
                                        const at::Tensor& times, const at::Tensor& query_times,
                                        const std::optional<at::Tensor>& lengths,
                                        c10::string_view mode, bool query_grad);

// The kernels' inputs after the check. `host_lengths`: also check the
// lengths' values, in [1, S] (the CPU).
InterpInputs resample_inputs(const ResampleChecked& checked, const at::Tensor& values,
                             const at::Tensor& times, const at::Tensor& query_times,
                             const std::optional<at::Tensor>& lengths, bool host_lengths);

// ---- fuse and _fuse_backward (csrc/checks/fuse.cpp)

struct InterpSizes {
  c10::SymInt B, T, D_total;  // the output is (B, T, D_total)
};

// The sizes, and each stream's lengths row and mode.
struct FuseChecked {
  InterpSizes sizes;
  std::vector<std::optional<at::Tensor>> lengths;
  std::vector<Mode> modes;
};

// K >= 1 streams, each as resample's inputs, and their agreement: one values
// dtype, one times dtype, one device, one batch size. lengths: None or
// (K, B); modes: one mode for every stream, or K comma-separated.
FuseChecked check_fuse(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                       const std::optional<at::Tensor>& lengths, c10::string_view modes);

// The forward's check, then one values_grad flag per stream, grad_out
// (B, T, D_total) and a query gradient only for floating query times.
FuseChecked check_fuse_backward(const at::Tensor& grad_out, at::TensorList values,
                                at::TensorList times, const at::Tensor& query_times,
                                const std::optional<at::Tensor>& lengths, c10::string_view modes,
                                size_t num_values_grad, bool query_grad);

// As resample_inputs, for every stream.
InterpInputs fuse_inputs(const FuseChecked& checked, at::TensorList values, at::TensorList times,
                         const at::Tensor& query_times, bool host_lengths);

// ---- voxelize and _voxelize_backward (csrc/checks/voxelize.cpp)

struct VoxelizeSizes {
  bool batched;         // points were (B, N, 3); else (N, 3), treated as B = 1
  c10::SymInt B, N, C;  // C = 0 without features
};

struct VoxelizeChecked {
  Reduce reduce;
  VoxelizeSizes sizes;
  // (B,) X, Y, Z for occupancy and count, (B,) C, X, Y, Z for the feature
  // reductions (B only when batched).
  std::vector<c10::SymInt> result_shape;
};

// Messages name the argument and what it got.
VoxelizeChecked check_voxelize(const at::Tensor& points, const std::optional<at::Tensor>& features,
                               const std::optional<at::Tensor>& lengths,
                               c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                               at::ArrayRef<double> origin, c10::string_view reduce,
                               const std::optional<at::Tensor>& voxel_size_tensor,
                               const std::optional<at::Tensor>& origin_tensor);

// The forward's check, then a reduce with a gradient (sum, mean, max), and
// grad and result shaped like voxelize's result.
VoxelizeChecked check_voxelize_backward(
    const at::Tensor& grad, const at::Tensor& points, const at::Tensor& features,
    const std::optional<at::Tensor>& lengths, c10::SymIntArrayRef grid_size,
    at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin, c10::string_view reduce,
    const at::Tensor& result, const std::optional<at::Tensor>& voxel_size_tensor,
    const std::optional<at::Tensor>& origin_tensor);

// The kernels' inputs after the check. `host_lengths`: also check the
// lengths' values, in [0, N] (the CPU).
VoxelInputs voxelize_inputs(const VoxelizeChecked& checked, const at::Tensor& points,
                            const std::optional<at::Tensor>& features,
                            const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                            const std::optional<at::Tensor>& voxel_size_tensor,
                            const std::optional<at::Tensor>& origin_tensor, bool host_lengths);

// ---- sample_windows and _sample_windows_backward (csrc/checks/sample_windows.cpp)

struct WindowSizes {
  c10::SymInt N, D, E, B, W;  // samples, channels, episodes, windows, queries per window
};

struct SampleWindowsChecked {
  WindowRule rule;
  WindowSizes sizes;  // the output is (B, W, D)
};

// values (N, D) any dtype (floating for linear and mean); times (N,) int64;
// offsets (E + 1,) int64; episode (B,) int64; query_times (B, W) int64; one
// device. interval > 0 for mean; tolerance >= -1 (-1: none); edge_tolerance >= 0.
SampleWindowsChecked check_sample_windows(const at::Tensor& values, const at::Tensor& times,
                                          const at::Tensor& offsets, const at::Tensor& episode,
                                          const at::Tensor& query_times, c10::string_view mode,
                                          int64_t interval, int64_t tolerance,
                                          int64_t edge_tolerance);

// The rule as the forward checks it; grad_out (B, W, D) floating, the same
// index tensors, and num_values = N (the rows of values).
SampleWindowsChecked check_sample_windows_backward(
    const at::Tensor& grad_out, const at::Tensor& times, const at::Tensor& offsets,
    const at::Tensor& episode, const at::Tensor& query_times, c10::string_view mode,
    int64_t interval, int64_t tolerance, int64_t edge_tolerance, const c10::SymInt& num_values);

// ---- anchor_windows (csrc/checks/anchor_windows.cpp)

// K streams' windows around B anchor rows.
struct AnchorWindowSizes {
  c10::SymInt E, B, N_anchor;
  std::vector<WindowSizes> streams;  // per stream: N, D (row elements), E, B, W
};

struct AnchorWindowsChecked {
  std::vector<WindowRule> rules;  // one per stream
  AnchorWindowSizes sizes;
};

// values[k] (N_k, *shape_k), times[k] (N_k,), offsets[k] (E + 1,), deltas[k]
// (W_k >= 1,) int64; anchor_offsets (E + 1,), anchor_times (N_anchor,), index
// (B,) int64; anchor_rows[j] (N_anchor, *shape_j) any dtype; K >= 1; one
// device. modes: one for all or K comma-separated; intervals and tolerances:
// empty (0 and -1 for all), one for all, or K.
AnchorWindowsChecked check_anchor_windows(at::TensorList values, at::TensorList times,
                                          at::TensorList offsets, at::TensorList deltas,
                                          const at::Tensor& anchor_offsets,
                                          const at::Tensor& anchor_times, const at::Tensor& index,
                                          at::TensorList anchor_rows, c10::string_view modes,
                                          c10::IntArrayRef intervals, c10::IntArrayRef tolerances,
                                          int64_t edge_tolerance);

// The output shape of stream k: (B, W_k, *values[k].shape[1:]).
std::vector<c10::SymInt> anchor_window_shape(const at::Tensor& values, const AnchorWindowSizes& n,
                                             size_t k);

// The output shape of an anchor-row table: (B, *rows.shape[1:]).
std::vector<c10::SymInt> anchor_row_shape(const at::Tensor& rows, const AnchorWindowSizes& n);

// ---- augment (csrc/checks/augment.cpp)

struct AugmentChecked {
  augment::Output output;
  c10::SymInt B, F, H, W, C, out_h, out_w;
};

// images (B, F, H, W, C) uint8 with C 1 or 3; params (B, 10) float32 on the
// images' device; height, width >= 1; output uint8 | float | float_chw.
AugmentChecked check_augment(const at::Tensor& images, const at::Tensor& params,
                             const c10::SymInt& height, const c10::SymInt& width,
                             c10::string_view output);

// The output shape: (B, F, out_h, out_w, C), or (B, F, C, out_h, out_w) for float_chw.
std::vector<c10::SymInt> augment_shape(const AugmentChecked& checked);

// The dtype the output has: uint8, or float32.
at::ScalarType augment_dtype(const AugmentChecked& checked);

// ---- draw_mixture (csrc/checks/draw_mixture.cpp)

struct DrawMixtureChecked {
  c10::SymInt B, S;  // the outputs are (B,); S stores
};

// base (1,) int64, batch_size >= 0, weights (S,) float64 with S >= 1 and
// counts (S,) int64, all on one device.
DrawMixtureChecked check_draw_mixture(const at::Tensor& base, const c10::SymInt& batch_size,
                                      const at::Tensor& weights, const at::Tensor& counts);

}  // namespace robocache
