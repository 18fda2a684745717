// Input validation shared by every backend (CPU, CUDA, Meta).
//
// The checks work on symbolic sizes, so the Meta kernels can run them under
// torch.compile(dynamic=True) without specializing shapes: equalities between
// sizes become deferred runtime asserts, not guards.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/Optional.h>
#include <c10/util/string_view.h>
#include <ATen/core/List.h>

#include <string>
#include <vector>

#include "robocache/interp.h"
#include "robocache/interp_args.h"
#include "robocache/voxel.h"

namespace robocache {

// The mode argument of any operator: one of `modes` (mean for the window
// ops only); `op` and `arg` name the caller in the message.
Mode parse_mode(c10::string_view mode, ModeSet modes, const char* op, const char* arg = "mode");

struct ResampleSizes {
  c10::SymInt B, S, T, D;
};

// Validate resample's inputs and return its sizes. `op` names the operator in
// messages ("robocache.resample", "robocache.fuse: stream 3", ...).
ResampleSizes check_resample_inputs(const at::Tensor& values, const at::Tensor& times,
                                    const at::Tensor& query_times,
                                    const std::optional<at::Tensor>& lengths,
                                    const std::string& op);

struct InterpSizes {
  c10::SymInt B, T, D_total;
};

// Validate K >= 1 streams (each as resample's inputs) and their agreement:
// one values dtype, one times dtype, one device, one batch size. Messages
// name the stream index.
InterpSizes check_interp_inputs(at::TensorList values, at::TensorList times,
                                const at::Tensor& query_times,
                                const std::vector<std::optional<at::Tensor>>& lengths,
                                const std::string& op);

// lengths as given to fuse: None, or (K, B) int64 with one row per stream;
// returns each stream's (B,) row (validated with that stream's inputs).
std::vector<std::optional<at::Tensor>> lengths_per_stream(const std::optional<at::Tensor>& lengths,
                                                          size_t K, const std::string& op);

// modes as given to fuse: one mode for every stream, or K comma-separated modes.
std::vector<Mode> modes_per_stream(c10::string_view modes, size_t K, const std::string& op);

// grad_out of a backward must have the forward output's shape (B, T, D_total).
void check_grad_out(const at::Tensor& grad_out, const c10::SymInt& B, const c10::SymInt& T,
                    const c10::SymInt& D_total, const std::string& op);

// A query gradient needs floating-point query times.
void check_query_grad(const at::Tensor& query_times, bool query_grad, const std::string& op);

Reduce parse_reduce(c10::string_view reduce, const char* op);

struct VoxelizeSizes {
  bool batched;         // points were (B, N, 3); else (N, 3), treated as B = 1
  c10::SymInt B, N, C;  // C = 0 without features
};

// Validate voxelize's arguments; messages name the argument and what it got.
VoxelizeSizes check_voxelize_inputs(const at::Tensor& points,
                                    const std::optional<at::Tensor>& features,
                                    const std::optional<at::Tensor>& lengths,
                                    c10::SymIntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                    at::ArrayRef<double> origin, Reduce reduce,
                                    const std::string& op,
                                    const std::optional<at::Tensor>& voxel_size_tensor = {},
                                    const std::optional<at::Tensor>& origin_tensor = {});

// The voxelize result's shape: (B,) X, Y, Z for occupancy and count,
// (B,) C, X, Y, Z for the feature reductions (B only when batched).
std::vector<c10::SymInt> voxelize_result_shape(const VoxelizeSizes& n,
                                               c10::SymIntArrayRef grid_size, Reduce reduce);

// Where the lengths can be read for free (the CPU), reject any entry outside
// [lo, hi]; `bound` names hi in the message ("S", "N").
void check_lengths_in_range(const at::Tensor& lengths, int64_t lo, int64_t hi, const char* bound,
                            const std::string& op);

// The entry points' whole validation, shared by the CPU and CUDA kernels of
// each operator. `host_lengths`: also check the lengths' values (CPU only;
// CUDA never reads device data on the host).
InterpInputs resample_inputs(const at::Tensor& values, const at::Tensor& times,
                             const at::Tensor& query_times,
                             const std::optional<at::Tensor>& lengths, c10::string_view mode,
                             bool host_lengths);
// fuse's whole symbolic check, shared by CPU, CUDA and Meta: its sizes, and
// each stream's lengths row and mode.
struct FuseChecked {
  InterpSizes sizes;
  std::vector<std::optional<at::Tensor>> lengths;
  std::vector<Mode> modes;
};
FuseChecked check_fuse_inputs(at::TensorList values, at::TensorList times,
                              const at::Tensor& query_times,
                              const std::optional<at::Tensor>& lengths, c10::string_view modes);
InterpInputs fuse_inputs(at::TensorList values, at::TensorList times, const at::Tensor& query_times,
                         const std::optional<at::Tensor>& lengths, c10::string_view modes,
                         bool host_lengths);
// A resample/fuse backward's grad_out (the forward output's shape), its
// values_grad flags (one per stream) and query_grad.
void check_backward_args(const InterpInputs& in, const at::Tensor& grad_out, size_t num_values_grad,
                         bool query_grad, const char* op);

VoxelInputs voxelize_inputs(const at::Tensor& points, const std::optional<at::Tensor>& features,
                            const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                            at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                            c10::string_view reduce,
                            const std::optional<at::Tensor>& voxel_size_tensor,
                            const std::optional<at::Tensor>& origin_tensor, bool host_lengths);
// voxelize's backward, on symbolic sizes (CPU, CUDA and Meta): a reduce with a
// gradient, and grad and result shaped like voxelize's result.
void check_voxelize_grad(const at::Tensor& grad, const at::Tensor& result, const VoxelizeSizes& n,
                         c10::SymIntArrayRef grid_size, Reduce reduce, const std::string& op);
// The same, on a backend's validated inputs.
void check_voxelize_backward_args(const VoxelInputs& in, const at::Tensor& grad,
                                  const at::Tensor& result, c10::string_view reduce);

}  // namespace robocache
