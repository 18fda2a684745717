// CPU kernels for robocache::resample and robocache::_resample_backward.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "robocache/checks.h"
#include "robocache/dispatch.h"
#include "robocache/interp.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.resample";

// Element strides of a (B, N) or shared (N,) time tensor.
struct Stamps {
  int64_t batch_stride;  // 0 when shared by the batch
  int64_t stride;
};

Stamps stamps_of(const at::Tensor& t) {
  return t.dim() == 2 ? Stamps{t.stride(0), t.stride(1)} : Stamps{0, t.stride(0)};
}

template <typename value_t, typename stamp_t>
void forward_impl(const at::Tensor& values, const at::Tensor& times, const at::Tensor& query,
                  const at::Tensor& lengths, at::Tensor& out, Mode mode) {
  using C = compute_t<value_t>;
  const int64_t B = values.size(0), S = values.size(1), D = values.size(2);
  const int64_t T = out.size(1);
  const value_t* v = values.data_ptr<value_t>();
  const stamp_t* ts = times.data_ptr<stamp_t>();
  const stamp_t* qs = query.data_ptr<stamp_t>();
  const int64_t* len = lengths.defined() ? lengths.data_ptr<int64_t>() : nullptr;
  value_t* o = out.data_ptr<value_t>();
  const Stamps tv = stamps_of(times), qv = stamps_of(query);
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(D, 1));

  at::parallel_for(0, B * T, grain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / T, t = i - b * T;
      const int64_t L = len ? clamp_length(len[b], S) : S;
      const auto loc = locate(ts + b * tv.batch_stride, tv.stride, L,
                              qs[b * qv.batch_stride + t * qv.stride], mode);
      value_t* __restrict__ dst = o + i * D;
      if (loc.nan) {
        std::fill(dst, dst + D, value_t(std::numeric_limits<C>::quiet_NaN()));
        continue;
      }
      const value_t* __restrict__ r0 = v + (b * S + loc.i0) * D;
      const value_t* __restrict__ r1 = v + (b * S + loc.i1) * D;
      const C w = C(loc.w);
      if (w == C(0)) {
        std::copy(r0, r0 + D, dst);
      } else {
        for (int64_t d = 0; d < D; ++d) {
          const C a = C(r0[d]);
          dst[d] = value_t(a + w * (C(r1[d]) - a));
        }
      }
    }
  });
}

// Deterministic: each batch row accumulates its own gradient rows serially.
template <typename value_t, typename stamp_t>
void backward_impl(const at::Tensor& grad, const at::Tensor& values, const at::Tensor& times,
                   const at::Tensor& query, const at::Tensor& lengths, Mode mode,
                   compute_t<value_t>* gv, weight_t<stamp_t>* gq) {
  using C = compute_t<value_t>;
  using W = weight_t<stamp_t>;
  const int64_t B = values.size(0), S = values.size(1), D = values.size(2);
  const int64_t T = grad.size(1);
  const value_t* g = grad.data_ptr<value_t>();
  const value_t* v = values.data_ptr<value_t>();
  const stamp_t* ts = times.data_ptr<stamp_t>();
  const stamp_t* qs = query.data_ptr<stamp_t>();
  const int64_t* len = lengths.defined() ? lengths.data_ptr<int64_t>() : nullptr;
  const Stamps tv = stamps_of(times), qv = stamps_of(query);

  at::parallel_for(0, B, 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t L = len ? clamp_length(len[b], S) : S;
      for (int64_t t = 0; t < T; ++t) {
        const auto loc = locate(ts + b * tv.batch_stride, tv.stride, L,
                                qs[b * qv.batch_stride + t * qv.stride], mode);
        if (loc.nan) continue;
        const value_t* gr = g + (b * T + t) * D;
        if (gv) {
          C* a0 = gv + (b * S + loc.i0) * D;
          C* a1 = gv + (b * S + loc.i1) * D;
          const C w = C(loc.w);
          for (int64_t d = 0; d < D; ++d) {
            const C gd = C(gr[d]);
            a0[d] += gd - w * gd;
            a1[d] += w * gd;
          }
        }
        if (gq && loc.dt != W(0)) {
          const value_t* r0 = v + (b * S + loc.i0) * D;
          const value_t* r1 = v + (b * S + loc.i1) * D;
          C acc = C(0);
          for (int64_t d = 0; d < D; ++d) acc += C(gr[d]) * (C(r1[d]) - C(r0[d]));
          gq[b * T + t] = W(acc) / loc.dt;
        }
      }
    }
  });
}

at::Tensor resample_cpu(const at::Tensor& values_in, const at::Tensor& times,
                        const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
                        c10::string_view mode_str) {
  const Mode mode = parse_mode(mode_str, kOp);
  check_resample_inputs(values_in, times, query_times, lengths, kOp);
  if (lengths.has_value()) check_lengths_values_cpu(*lengths, values_in.size(1), kOp);
  const at::Tensor values = values_in.contiguous();
  at::Tensor out = at::empty({values.size(0), query_times.size(-1), values.size(2)},
                             values.options());
  if (out.numel() == 0) return out;
  const at::Tensor len = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  ROBOCACHE_DISPATCH_VALUE_TYPES(values.scalar_type(), "resample_cpu", [&] {
    using value_t = scalar_t;
    ROBOCACHE_DISPATCH_TIME_TYPES(times.scalar_type(), "resample_cpu", [&] {
      forward_impl<value_t, scalar_t>(values, times, query_times, len, out, mode);
    });
  });
  return out;
}

std::tuple<at::Tensor, at::Tensor> resample_backward_cpu(
    const at::Tensor& grad_out, const at::Tensor& values_in, const at::Tensor& times,
    const at::Tensor& query_times, const std::optional<at::Tensor>& lengths,
    c10::string_view mode_str, bool values_grad, bool query_grad) {
  const Mode mode = parse_mode(mode_str, kOp);
  check_resample_inputs(values_in, times, query_times, lengths, kOp);
  TORCH_CHECK_VALUE(!query_grad || at::isFloatingType(query_times.scalar_type()), kOp,
                    ": query_times of dtype ", query_times.scalar_type(),
                    " cannot receive a gradient");
  const int64_t B = values_in.size(0), S = values_in.size(1), D = values_in.size(2);
  const int64_t T = query_times.size(-1);
  TORCH_CHECK_VALUE(grad_out.sizes() == at::IntArrayRef({B, T, D}), kOp,
                    ": grad_out must have shape ", at::IntArrayRef({B, T, D}), "; got ",
                    grad_out.sizes());
  if (lengths.has_value()) check_lengths_values_cpu(*lengths, S, kOp);

  const at::Tensor values = values_in.contiguous();
  const at::Tensor grad = grad_out.to(values.scalar_type()).contiguous();
  const at::Tensor len = lengths.has_value() ? lengths->contiguous() : at::Tensor();
  const auto acc_dtype = values.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto w_dtype = times.scalar_type() == at::kFloat ? at::kFloat : at::kDouble;
  at::Tensor gv = values_grad ? at::zeros({B, S, D}, values.options().dtype(acc_dtype))
                              : at::empty({0}, values.options());
  at::Tensor gq = query_grad ? at::zeros({B, T}, query_times.options().dtype(w_dtype))
                             : at::empty({0}, query_times.options());
  if ((values_grad || query_grad) && B * T > 0) {
    ROBOCACHE_DISPATCH_VALUE_TYPES(values.scalar_type(), "resample_backward_cpu", [&] {
      using value_t = scalar_t;
      ROBOCACHE_DISPATCH_TIME_TYPES(times.scalar_type(), "resample_backward_cpu", [&] {
        using stamp_t = scalar_t;
        backward_impl<value_t, stamp_t>(
            grad, values, times, query_times, len, mode,
            values_grad ? gv.data_ptr<compute_t<value_t>>() : nullptr,
            query_grad ? gq.data_ptr<weight_t<stamp_t>>() : nullptr);
      });
    });
  }
  if (values_grad) gv = gv.to(values.scalar_type());
  if (query_grad) {
    if (query_times.dim() == 1) gq = gq.sum(0);
    gq = gq.to(query_times.scalar_type());
  }
  return {gv, gq};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("resample", &resample_cpu);
  m.impl("_resample_backward", &resample_backward_cpu);
}

}  // namespace robocache
