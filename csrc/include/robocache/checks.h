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

#include "robocache/interp.h"

namespace robocache {

// Parse the mode argument; `op` and `arg` name the caller in the message.
Mode parse_mode(c10::string_view mode, const char* op, const char* arg = "mode");

struct ResampleSizes {
  c10::SymInt B, S, T, D;
};

// Validate resample's inputs and return its sizes. `op` names the operator in
// messages ("robocache.resample", "robocache.fuse: stream 3", ...).
ResampleSizes check_resample_inputs(const at::Tensor& values, const at::Tensor& times,
                                    const at::Tensor& query_times,
                                    const std::optional<at::Tensor>& lengths,
                                    const std::string& op);

// On the CPU the lengths can be read for free: reject any outside [1, S].
void check_lengths_values_cpu(const at::Tensor& lengths, int64_t S, const std::string& op);

}  // namespace robocache
