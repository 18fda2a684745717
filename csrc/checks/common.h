// What the per-op checks (csrc/checks/<op>.cpp) share: the mode parser, the
// dtype tests, the index-tensor check, the checks shared by resample and
// fuse (one stream, the backward's grad_out and query gradient) and by
// sample_windows and anchor_windows (the window rule), and the CPU's check
// of lengths' values. Internal to csrc/checks/.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/SymInt.h>
#include <c10/util/string_view.h>

#include <string>

#include "robocache/checks.h"
#include "robocache/error.h"
#include "robocache/mode.h"

namespace robocache {

// The one parser of every op's mode argument: one of `modes` (mean for the
// window ops only); `op` and `arg` name the caller in the message.
Mode parse_mode(c10::string_view mode, ModeSet modes, const char* op, const char* arg = "mode");

inline std::string shape_str(const at::Tensor& t) {
  return message(t.sym_sizes());
}

// float32, float64, float16 or bfloat16.
inline bool is_value_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kHalf || t == at::kBFloat16;
}

// float32, float64 or int64.
inline bool is_time_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kLong;
}

// An int64 tensor of `dim` dimensions (`shape` names them in the message) on
// the device of `reference` (`reference_name` names it).
void check_index_tensor(const at::Tensor& t, const char* name, int64_t dim, const char* shape,
                        const at::Tensor& reference, const char* reference_name, const char* op);

// The window ops' values live where their index (times, offsets) is, or, when
// the index is on a CUDA device, in pinned host memory: the kernel reads it
// there directly, through the address unified addressing gives it.
void check_values_device(const at::Tensor& values, const std::string& name, const at::Tensor& index,
                         const char* op);

// Where the lengths can be read for free (the CPU), reject any entry outside
// [lo, hi]; `bound` names hi in the message ("S", "N").
void check_lengths_in_range(const at::Tensor& lengths, int64_t lo, int64_t hi, const char* bound,
                            const std::string& op);

// resample's inputs of one stream, with its sizes; fuse checks each of its
// streams with it. `op` names the caller in messages ("robocache.resample",
// "robocache.fuse: stream 3", ...).
ResampleSizes check_resample_stream(const at::Tensor& values, const at::Tensor& times,
                                    const at::Tensor& query_times,
                                    const std::optional<at::Tensor>& lengths,
                                    const std::string& op);

// grad_out of a resample or fuse backward must have the forward output's
// shape (B, T, D_total).
void check_grad_out(const at::Tensor& grad_out, const c10::SymInt& B, const c10::SymInt& T,
                    const c10::SymInt& D_total, const std::string& op);

// A query gradient needs floating-point query times.
void check_query_grad(const at::Tensor& query_times, bool query_grad, const std::string& op);

// The rule of sample_windows (and of each stream of anchor_windows) from the
// operator's scalar arguments, validated.
WindowRule window_rule(c10::string_view mode, int64_t interval, int64_t tolerance,
                       int64_t edge_tolerance, const char* op);

}  // namespace robocache
