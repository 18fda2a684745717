// The CPU interp kernels, shared by resample (one stream) and fuse (K streams).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <limits>

#include "robocache/dispatch.h"
#include "robocache/interp.h"
#include "robocache/interp_kernels.h"
#include "robocache/parallel.h"

namespace robocache {
namespace {

template <typename value_t, typename stamp_t>
std::vector<InterpSource<value_t, stamp_t>> sources_of(const InterpInputs& in) {
  std::vector<InterpSource<value_t, stamp_t>> s;
  for (size_t k = 0; k < in.values.size(); ++k)
    s.push_back(
        interp_source<value_t, stamp_t>(in.values[k], in.times[k], in.lengths[k], in.modes[k]));
  return s;
}

template <typename value_t, typename stamp_t>
void write_channels(const InterpSource<value_t, stamp_t>& s, const Location<weight_t<stamp_t>>& loc,
                    int64_t b, value_t* __restrict__ dst) {
  using C = compute_t<value_t>;
  if (loc.nan) {
    std::fill(dst, dst + s.D, value_t(std::numeric_limits<C>::quiet_NaN()));
    return;
  }
  const value_t* __restrict__ r0 = s.values + b * s.v_bstride + loc.i0 * s.v_sstride;
  const value_t* __restrict__ r1 = s.values + b * s.v_bstride + loc.i1 * s.v_sstride;
  const C w = C(loc.w);
  if (w == C(0)) {
    std::copy(r0, r0 + s.D, dst);
    return;
  }
  // The quick pass: blend's quick result for every channel, with no branch in
  // the loop so that the compiler vectorises it, and a note of whether any
  // result is not finite (an OR, which vectorises too). A finite result is
  // blend's exactly; where one is not, the exact pass writes the row again
  // with blend, value by value (as the CUDA kernel does, blend_quick_lanes).
  int non_finite = 0;
  for (int64_t d = 0; d < s.D; ++d) {
    const C v0 = C(r0[d]);
    const C r = blend_quick(v0, C(r1[d]) - v0, w);
    non_finite |= int(!is_finite(r));
    dst[d] = value_t(r);
  }
  if (C10_LIKELY(non_finite == 0))
    return;
  for (int64_t d = 0; d < s.D; ++d)
    dst[d] = value_t(blend(C(r0[d]), C(r1[d]), w));
}

template <typename value_t, typename stamp_t>
void forward_impl(const InterpInputs& in, const std::vector<int64_t>& cols, at::Tensor& out) {
  const auto sources = sources_of<value_t, stamp_t>(in);
  const auto q = interp_query<stamp_t>(in.query);
  const int64_t T = out.size(1), row_len = out.size(2);
  value_t* o = out.data_ptr<value_t>();
  const int64_t grain = std::max<int64_t>(1, 2048 / std::max<int64_t>(row_len, 1));
  parallel_over(0, out.size(0) * T, grain, [&](int64_t begin, int64_t end) {
    // Each stream's search starts from the previous query's answer: sorted
    // queries then cost a step or two each instead of log2(S).
    std::vector<int64_t> hints(sources.size(), -1);
    for (int64_t i = begin; i < end; ++i) {
      const int64_t b = i / T, t = i - b * T;
      for (size_t k = 0; k < sources.size(); ++k) {
        write_channels(sources[k], locate_query(sources[k], q, b, t, &hints[k]), b,
                       o + i * row_len + cols[k]);
      }
    }
  });
}

// Deterministic: each batch row accumulates its own gradient rows, in order.
template <typename value_t, typename stamp_t>
void backward_impl(const InterpInputs& in, const std::vector<int64_t>& cols, const at::Tensor& grad,
                   const std::vector<compute_t<value_t>*>& gv, weight_t<stamp_t>* gq) {
  using C = compute_t<value_t>;
  using W = weight_t<stamp_t>;
  const auto sources = sources_of<value_t, stamp_t>(in);
  const auto q = interp_query<stamp_t>(in.query);
  const int64_t B = grad.size(0), T = grad.size(1), row_len = grad.size(2);
  const value_t* g = grad.data_ptr<value_t>();
  parallel_over(0, B, 1, [&](int64_t b_begin, int64_t b_end) {
    std::vector<int64_t> hints(sources.size(), -1);  // as in forward_impl
    for (int64_t b = b_begin; b < b_end; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        W slope = W(0);
        for (size_t k = 0; k < sources.size(); ++k) {
          const auto& s = sources[k];
          const auto loc = locate_query(s, q, b, t, &hints[k]);
          if (loc.nan)
            continue;
          const value_t* gr = g + (b * T + t) * row_len + cols[k];
          const C w = C(loc.w);
          if (gv[k]) {
            C* a0 = gv[k] + (b * s.S + loc.i0) * s.D;
            C* a1 = gv[k] + (b * s.S + loc.i1) * s.D;
            for (int64_t d = 0; d < s.D; ++d) {
              const C gd = C(gr[d]);
              a0[d] += gd - w * gd;
              a1[d] += w * gd;
            }
          }
          if (gq && loc.dt != W(0)) {
            const value_t* r0 = s.values + b * s.v_bstride + loc.i0 * s.v_sstride;
            const value_t* r1 = s.values + b * s.v_bstride + loc.i1 * s.v_sstride;
            C acc = C(0);
            for (int64_t d = 0; d < s.D; ++d)
              acc += C(gr[d]) * (C(r1[d]) - C(r0[d]));
            slope += W(acc) / loc.dt;
          }
        }
        if (gq)
          gq[b * T + t] = slope;
      }
    }
  });
}

}  // namespace

at::Tensor interp_forward_cpu(const InterpInputs& in) {
  int64_t total = 0;
  const auto cols = column_offsets(in, &total);
  const at::Tensor& v0 = in.values[0];
  at::Tensor out = at::empty({v0.size(0), in.query.size(-1), total}, v0.options());
  if (out.numel() == 0)
    return out;
  ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_forward_cpu", [&] {
    using value_t = scalar_t;
    ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_forward_cpu",
                                  [&] { forward_impl<value_t, scalar_t>(in, cols, out); });
  });
  return out;
}

std::tuple<std::vector<at::Tensor>, at::Tensor> interp_backward_cpu(
    const InterpInputs& in, const at::Tensor& grad_out, const std::vector<bool>& values_grad,
    bool query_grad) {
  int64_t total = 0;
  const auto cols = column_offsets(in, &total);
  const at::Tensor& v0 = in.values[0];
  const int64_t B = v0.size(0), T = in.query.size(-1);
  const auto buf = interp_grad_buffers(in, grad_out, values_grad);
  const at::Tensor grad = buf.grad.contiguous();
  at::Tensor gq =
      query_grad ? at::zeros({B, T}, in.query.options().dtype(buf.query_dtype)) : at::Tensor();
  if (B * T > 0) {
    ROBOCACHE_DISPATCH_VALUE_TYPES(v0.scalar_type(), "robocache_backward_cpu", [&] {
      using value_t = scalar_t;
      ROBOCACHE_DISPATCH_TIME_TYPES(in.query.scalar_type(), "robocache_backward_cpu", [&] {
        using stamp_t = scalar_t;
        backward_impl<value_t, stamp_t>(in, cols, grad, buf.acc_ptrs<compute_t<value_t>>(),
                                        query_grad ? gq.data_ptr<weight_t<stamp_t>>() : nullptr);
      });
    });
  }
  return interp_grad_results(in, buf, gq);
}

}  // namespace robocache
