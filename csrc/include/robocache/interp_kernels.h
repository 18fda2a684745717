// The kernels shared by resample (one stream) and fuse (K streams), per
// backend. resample.* and fuse.* validate their arguments and call these.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Optional.h>

#include <tuple>
#include <vector>

#include "robocache/stream.h"

namespace robocache {

// (B, T, sum D_k) in the values' dtype.
at::Tensor multi_stream_forward_cpu(const MultiStreamInputs& in, const char* op);

// grad_values[k] is (B, S_k, D_k) in the values' dtype, or an empty (0,)
// tensor where values_grad[k] is false; grad_query has query's shape, or is
// empty when query_grad is false.
std::tuple<std::vector<at::Tensor>, at::Tensor> multi_stream_backward_cpu(
    const MultiStreamInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad, const char* op);

#ifdef ROBOCACHE_WITH_CUDA
at::Tensor multi_stream_forward_cuda(const MultiStreamInputs& in, const char* op);
std::tuple<std::vector<at::Tensor>, at::Tensor> multi_stream_backward_cuda(
    const MultiStreamInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad, const char* op);
#endif

}  // namespace robocache
