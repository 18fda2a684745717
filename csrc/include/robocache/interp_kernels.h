// The interp kernels: resample (one stream) and fuse (K streams) share them,
// per backend (csrc/cpu/interp_kernels.cpp, csrc/cuda/interp_kernels.cu).
// resample.* and fuse.* validate their arguments and call these. Below them,
// the backward's buffers, which every backend sets up the same way.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <tuple>
#include <vector>

#include "robocache/interp_args.h"

namespace robocache {

// (B, T, sum D_k) in the values' dtype.
at::Tensor interp_forward_cpu(const InterpInputs& in);

// grad_values[k] is (B, S_k, D_k) in the values' dtype, or an empty (0,)
// tensor where values_grad[k] is false; grad_query has query's shape, or is
// empty when query_grad is false.
std::tuple<std::vector<at::Tensor>, at::Tensor> interp_backward_cpu(
    const InterpInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad);

#ifdef ROBOCACHE_WITH_CUDA
// `op` names the operator in errors (the CUDA launch-size check).
at::Tensor interp_forward_cuda(const InterpInputs& in, const char* op);
std::tuple<std::vector<at::Tensor>, at::Tensor> interp_backward_cuda(
    const InterpInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad, const char* op);
#endif

// The backward's buffers: grad_out in the values' dtype (its layout as the
// caller gave it), and per stream a zeroed (B, S_k, D_k) accumulator in the
// compute dtype (float, or double for double values), undefined where
// values_grad[k] is false. The query gradient accumulates in query_dtype:
// float for float times, double for double and int64 times (weight_t).
struct InterpGradBuffers {
  at::Tensor grad;
  std::vector<at::Tensor> acc;
  at::ScalarType query_dtype;

  // The accumulators' data pointers, nullptr where undefined.
  template <typename C>
  std::vector<C*> acc_ptrs() const {
    std::vector<C*> ptrs;
    for (const auto& a : acc)
      ptrs.push_back(a.defined() ? a.data_ptr<C>() : nullptr);
    return ptrs;
  }
};

inline InterpGradBuffers interp_grad_buffers(const InterpInputs& in, const at::Tensor& grad_out,
                                             const std::vector<bool>& values_grad) {
  const at::Tensor& v0 = in.values[0];
  const auto acc_dtype = v0.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  InterpGradBuffers buf;
  buf.grad = grad_out.to(v0.scalar_type());
  for (size_t k = 0; k < in.values.size(); ++k) {
    buf.acc.push_back(values_grad[k]
                          ? at::zeros(in.values[k].sizes(), v0.options().dtype(acc_dtype))
                          : at::Tensor());
  }
  buf.query_dtype = in.query.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  return buf;
}

// The backward's results from its buffers: the accumulators in the values'
// dtype (an empty (0,) tensor where none was asked), and the query gradient
// `grad_query`, (B, T) in query_dtype, in query's shape and dtype; an empty
// (0,) tensor when it was not asked (undefined grad_query).
inline std::tuple<std::vector<at::Tensor>, at::Tensor> interp_grad_results(
    const InterpInputs& in, const InterpGradBuffers& buf, at::Tensor grad_query) {
  const at::Tensor& v0 = in.values[0];
  std::vector<at::Tensor> grad_values;
  for (const auto& a : buf.acc) {
    grad_values.push_back(a.defined() ? a.to(v0.scalar_type()) : at::empty({0}, v0.options()));
  }
  if (!grad_query.defined())
    return {grad_values, at::empty({0}, in.query.options())};
  if (in.query.dim() == 1)
    grad_query = grad_query.sum(0);
  return {grad_values, grad_query.to(in.query.scalar_type())};
}

}  // namespace robocache
