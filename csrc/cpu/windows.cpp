// CPU kernels of robocache::sample_windows and its backward. The episode
// indices and offsets are validated here (reading them is free on the CPU);
// times are taken as sorted within each episode (EpisodeStore checks that
// when it is built).
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <cstring>
#include <vector>

#include "robocache/error.h"
#include "robocache/checks.h"
#include "robocache/parallel.h"
#include "windows_cpu.h"

namespace robocache {

PackedIndex packed_index(const at::Tensor& times, const at::Tensor& offsets,
                         const at::Tensor& episode, const at::Tensor& query_times,
                         const WindowSizes& n, const char* op) {
  PackedIndex packed{times.contiguous(),       offsets.contiguous(), episode.contiguous(),
                     query_times.contiguous(), n.N.expect_int(),     n.E.expect_int(),
                     n.B.expect_int(),         n.W.expect_int()};
  const int64_t* off = packed.offsets.data_ptr<int64_t>();
  ROBOCACHE_CHECK_VALUE(off[0] >= 0 && off[packed.E] <= packed.N, op,
                        ": offsets must lie in [0, N = ", packed.N, "]; got offsets[0] = ", off[0],
                        " and offsets[E] = ", off[packed.E]);
  for (int64_t e = 0; e < packed.E; ++e) {
    ROBOCACHE_CHECK_VALUE(off[e] <= off[e + 1], op, ": offsets must be non-decreasing; offsets[", e,
                          "] = ", off[e], " > offsets[", e + 1, "] = ", off[e + 1]);
  }
  const int64_t* ep = packed.episode.data_ptr<int64_t>();
  for (int64_t b = 0; b < packed.B; ++b) {
    ROBOCACHE_CHECK_VALUE(ep[b] >= 0 && ep[b] < packed.E, op, ": episode[", b, "] = ", ep[b],
                          " is not an episode of this stream (there are ", packed.E, ")");
  }
  return packed;
}

namespace {

constexpr const char* kOp = "robocache.sample_windows";

// Raw pointers of the index tensors, read once per call.
struct PackedIndexView {
  const int64_t *times, *offsets, *episode, *query;
  int64_t W;

  explicit PackedIndexView(const PackedIndex& packed)
      : times(packed.times.data_ptr<int64_t>()),
        offsets(packed.offsets.data_ptr<int64_t>()),
        episode(packed.episode.data_ptr<int64_t>()),
        query(packed.query.data_ptr<int64_t>()),
        W(packed.W) {}

  // Calls f(m, pick) for the queries m of windows [b_begin, b_end).
  template <typename F>
  void for_each_pick(const WindowRule& rule, int64_t b_begin, int64_t b_end, F&& f) const {
    for (int64_t b = b_begin; b < b_end; ++b) {
      const int64_t e = episode[b], a = offsets[e], z = offsets[e + 1];
      for (int64_t m = b * W; m < (b + 1) * W; ++m)
        f(m, pick_window(times, a, z, query[m], rule));
    }
  }
};

template <typename value_t>
void blend_rows(const WindowPick& p, const value_t* values, int64_t D, value_t* dst) {
  using C = at::opmath_type<value_t>;
  if (p.hi > p.lo) {
    for (int64_t d = 0; d < D; ++d) {
      C sum = C(0);
      for (int64_t i = p.lo; i < p.hi; ++i)
        sum += C(values[i * D + d]);
      dst[d] = value_t(sum / C(p.hi - p.lo));
    }
  } else {
    const C w = C(p.w);
    for (int64_t d = 0; d < D; ++d)
      dst[d] = value_t(blend(C(values[p.i0 * D + d]), C(values[p.i1 * D + d]), w));
  }
}

}  // namespace

void fill_windows(const at::Tensor& values, const PackedIndex& packed, const WindowRule& rule,
                  at::Tensor& out, at::Tensor& is_pad, at::Tensor& age) {
  const at::Tensor v = values.contiguous();
  const int64_t D = packed.B * packed.W > 0 ? out.numel() / (packed.B * packed.W) : 0;
  bool* pad_ptr = is_pad.data_ptr<bool>();
  int64_t* age_ptr = age.data_ptr<int64_t>();
  const bool blends = mode_blends(rule.mode);
  const size_t row_bytes = size_t(D) * v.element_size();
  const auto* src = static_cast<const char*>(v.data_ptr());
  auto* dst = static_cast<char*>(out.data_ptr());
  const PackedIndexView view(packed);
  // Windows split between threads, 64 KiB of output each at least: a
  // smaller share costs less than waking a thread for it.
  const int64_t grain = std::max<int64_t>(
      1, (int64_t{1} << 16) / std::max<int64_t>(1, packed.W * int64_t(row_bytes)));
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, blends ? values.scalar_type() : at::kFloat, "sample_windows", [&] {
        parallel_over(0, packed.B, grain, [&](int64_t b_begin, int64_t b_end) {
          view.for_each_pick(rule, b_begin, b_end, [&](int64_t m, const WindowPick& p) {
            pad_ptr[m] = p.pad;
            age_ptr[m] = p.age;
            char* row = dst + m * row_bytes;
            if (p.empty) {
              std::memset(row, 0, row_bytes);
            } else if (blends && (p.hi > p.lo || p.w > 0.0)) {
              blend_rows(p, reinterpret_cast<const scalar_t*>(src), D,
                         reinterpret_cast<scalar_t*>(row));
            } else {
              std::memcpy(row, src + p.i0 * row_bytes, row_bytes);
            }
          });
        });
      });
}

namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> sample_windows_cpu(
    const at::Tensor& values, const at::Tensor& times, const at::Tensor& offsets,
    const at::Tensor& episode, const at::Tensor& query_times, c10::string_view mode,
    int64_t interval, int64_t tolerance, int64_t edge_tolerance) {
  const auto checked = check_sample_windows(values, times, offsets, episode, query_times, mode,
                                            interval, tolerance, edge_tolerance);
  const WindowRule& rule = checked.rule;
  const WindowSizes& n = checked.sizes;
  const PackedIndex packed = packed_index(times, offsets, episode, query_times, n, kOp);
  const int64_t D = n.D.expect_int();
  at::Tensor out = at::empty({packed.B, packed.W, D}, values.options());
  at::Tensor is_pad = at::empty({packed.B, packed.W}, values.options().dtype(at::kBool));
  at::Tensor age = at::empty({packed.B, packed.W}, values.options().dtype(at::kLong));
  fill_windows(values, packed, rule, out, is_pad, age);
  return {out, is_pad, age};
}

at::Tensor sample_windows_backward_cpu(const at::Tensor& grad_out, const at::Tensor& times,
                                       const at::Tensor& offsets, const at::Tensor& episode,
                                       const at::Tensor& query_times, c10::string_view mode,
                                       int64_t interval, int64_t tolerance, int64_t edge_tolerance,
                                       c10::SymInt num_values) {
  const auto checked =
      check_sample_windows_backward(grad_out, times, offsets, episode, query_times, mode, interval,
                                    tolerance, edge_tolerance, num_values);
  const WindowRule& rule = checked.rule;
  const WindowSizes& n = checked.sizes;
  const int64_t N = n.N.expect_int();
  const PackedIndex packed = packed_index(times, offsets, episode, query_times, n, kOp);
  const int64_t D = n.D.expect_int();
  const at::Tensor g = grad_out.contiguous();
  at::Tensor grad_values;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, grad_out.scalar_type(), "sample_windows_backward", [&] {
        using C = at::opmath_type<scalar_t>;
        at::Tensor acc =
            at::zeros({N, D}, grad_out.options().dtype(c10::CppTypeToScalarType<C>::value));
        C* acc_ptr = acc.data_ptr<C>();
        const scalar_t* g_ptr = g.data_ptr<scalar_t>();
        // Each query located once; then channels split between threads,
        // queries in order: deterministic sums.
        std::vector<WindowPick> picks(size_t(packed.B * packed.W));
        const PackedIndexView view(packed);
        parallel_over(0, packed.B, 1, [&](int64_t b_begin, int64_t b_end) {
          view.for_each_pick(rule, b_begin, b_end,
                             [&](int64_t m, const WindowPick& p) { picks[size_t(m)] = p; });
        });
        // 16 channels a part at least: parts apart by a cache line or so.
        parallel_over(0, D, 16, [&](int64_t d_begin, int64_t d_end) {
          for (int64_t m = 0; m < packed.B * packed.W; ++m) {
            for_each_source(picks[size_t(m)], [&](int64_t row, double weight) {
              for (int64_t d = d_begin; d < d_end; ++d)
                acc_ptr[row * D + d] += C(weight) * C(g_ptr[m * D + d]);
            });
          }
        });
        grad_values =
            acc.scalar_type() == grad_out.scalar_type() ? acc : acc.to(grad_out.scalar_type());
      });
  return grad_values;
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("sample_windows", &sample_windows_cpu);
  m.impl("_sample_windows_backward", &sample_windows_backward_cpu);
}

}  // namespace robocache
