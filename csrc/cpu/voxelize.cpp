// CPU kernels for robocache::voxelize and robocache::_voxelize_backward.
// Clouds run in parallel; the points of one cloud are visited in order, so
// every reduction (float sums included) is deterministic.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>

#include "robocache/error.h"
#include "robocache/checks.h"
#include "robocache/cpu_alloc.h"
#include "robocache/dispatch.h"
#include "robocache/voxel.h"
#include "robocache/parallel.h"

namespace robocache {
namespace {

// Points whose voxel indices are computed before any of them is scattered.
constexpr int64_t kPointsIndexedAhead = 256;

// Initializes and accumulates one pass over the points into uninitialized
// outputs; acc is (B, C, cells) and counts (B, cells), any of the three may be
// null when the reduce does not use it. Each cloud's grid is initialized by the
// thread that scatters into it, right before, so the pages are first touched
// there and are still in cache.
template <typename point_t, typename feat_t>
void accumulate(const VoxelInputs& in, compute_t<feat_t>* acc, int32_t* counts,
                point_t* occupancy) {
  using A = compute_t<feat_t>;
  const auto a = voxel_args<point_t, feat_t>(in);
  const int64_t cells = in.cells();
  const Reduce r = in.reduce;
  const A acc_init = r == Reduce::Max ? -std::numeric_limits<A>::infinity() : A(0);
  parallel_over(0, a.B, 1, [&](int64_t b_begin, int64_t b_end) {
    for (int64_t b = b_begin; b < b_end; ++b) {
      if (occupancy)
        std::fill_n(occupancy + b * cells, cells, point_t(0));
      if (counts)
        std::fill_n(counts + b * cells, cells, int32_t(0));
      if (acc)
        std::fill_n(acc + b * a.C * cells, a.C * cells, acc_init);
      // Voxel indices a chunk at a time, then the scatter: the scatter's
      // loads are then independent of any arithmetic, so the core keeps many
      // cache misses in flight instead of one per point.
      int64_t vox[kPointsIndexedAhead];
      for (int64_t n0 = 0; n0 < a.N; n0 += kPointsIndexedAhead) {
        const int64_t m = std::min(kPointsIndexedAhead, a.N - n0);
        for (int64_t k = 0; k < m; ++k)
          vox[k] = point_voxel(a, b, n0 + k);
        for (int64_t k = 0; k < m; ++k) {
          const int64_t v = vox[k];
          if (v < 0)
            continue;
          if (occupancy)
            occupancy[b * cells + v] = point_t(1);
          if (counts)
            counts[b * cells + v] += 1;
          if (acc) {
            const feat_t* f = a.features + b * a.f_bstride + (n0 + k) * a.f_nstride;
            A* dst = acc + b * a.C * cells + v;
            for (int64_t c = 0; c < a.C; ++c) {
              const A x = A(f[c * a.f_cstride]);
              A& slot = dst[c * cells];
              if (r == Reduce::Max) {
                // NaN propagates, like torch.amax.
                if (x > slot || x != x)
                  slot = x;
              } else {
                slot += x;
              }
            }
          }
        }
      }
    }
  });
}

at::Tensor voxelize_cpu(const at::Tensor& points, const std::optional<at::Tensor>& features,
                        const std::optional<at::Tensor>& lengths, at::IntArrayRef grid_size,
                        at::ArrayRef<double> voxel_size, at::ArrayRef<double> origin,
                        c10::string_view reduce, const std::optional<at::Tensor>& voxel_size_tensor,
                        const std::optional<at::Tensor>& origin_tensor) {
  const auto checked =
      check_voxelize(points, features, lengths, c10::fromIntArrayRefSlow(grid_size), voxel_size,
                     origin, reduce, voxel_size_tensor, origin_tensor);
  const auto in = voxelize_inputs(checked, points, features, lengths, grid_size, voxel_size, origin,
                                  voxel_size_tensor, origin_tensor, true);
  const int64_t B = in.B(), C = in.C(), cells = in.cells();
  at::Tensor result;
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_cpu", [&] {
    using point_t = scalar_t;
    switch (in.reduce) {
      case Reduce::Occupancy:
        result = empty_output({B, cells}, points.options());
        accumulate<point_t, float>(in, nullptr, nullptr, result.data_ptr<point_t>());
        break;
      case Reduce::Count:
        result = empty_output({B, cells}, points.options().dtype(at::kInt));
        accumulate<point_t, float>(in, nullptr, result.data_ptr<int32_t>(), nullptr);
        break;
      default:
        ROBOCACHE_DISPATCH_VALUE_TYPES(in.features.scalar_type(), "voxelize_cpu", [&] {
          using feat_t = scalar_t;
          using A = compute_t<feat_t>;
          const auto acc_opts = in.features.options().dtype(c10::CppTypeToScalarType<A>::value);
          at::Tensor acc = empty_output({B, C, cells}, acc_opts);
          at::Tensor counts;
          if (in.reduce != Reduce::Sum)
            counts = empty_output({B, 1, cells}, points.options().dtype(at::kInt));
          accumulate<point_t, feat_t>(in, acc.data_ptr<A>(),
                                      counts.defined() ? counts.data_ptr<int32_t>() : nullptr,
                                      nullptr);
          if (in.reduce == Reduce::Mean) {
            acc = acc.div(counts.clamp_min(1));
          } else if (in.reduce == Reduce::Max) {
            acc.masked_fill_(counts.eq(0), 0);  // empty voxels are 0
          }
          result = acc.to(in.features.scalar_type());
        });
    }
  });
  return result.view(in.result_shape());
}

template <typename point_t, typename feat_t>
void backward_impl(const VoxelInputs& in, const at::Tensor& grad, const at::Tensor& result,
                   at::Tensor& grad_features) {
  using A = compute_t<feat_t>;
  const auto a = voxel_args<point_t, feat_t>(in);
  const int64_t cells = in.cells(), C = a.C;
  const feat_t* g = grad.data_ptr<feat_t>();
  const feat_t* res = result.data_ptr<feat_t>();
  feat_t* gf = grad_features.data_ptr<feat_t>();
  parallel_over(0, a.B, 1, [&](int64_t b_begin, int64_t b_end) {
    std::vector<int32_t> counts, first;
    for (int64_t b = b_begin; b < b_end; ++b) {
      if (in.reduce == Reduce::Mean) {
        counts.assign(cells, 0);
        for (int64_t n = 0; n < a.N; ++n) {
          const int64_t v = point_voxel(a, b, n);
          if (v >= 0)
            counts[v] += 1;
        }
      } else if (in.reduce == Reduce::Max) {
        // The lowest-index point at each voxel's max takes its gradient.
        first.assign(C * cells, -1);
        for (int64_t n = 0; n < a.N; ++n) {
          const int64_t v = point_voxel(a, b, n);
          if (v < 0)
            continue;
          const feat_t* f = a.features + b * a.f_bstride + n * a.f_nstride;
          for (int64_t c = 0; c < C; ++c) {
            const int64_t e = c * cells + v;
            if (first[e] < 0 && A(f[c * a.f_cstride]) == A(res[b * C * cells + e]))
              first[e] = int32_t(n);
          }
        }
      }
      for (int64_t n = 0; n < a.N; ++n) {
        const int64_t v = point_voxel(a, b, n);
        feat_t* out = gf + (b * a.N + n) * C;
        for (int64_t c = 0; c < C; ++c) {
          A x = A(0);
          if (v >= 0) {
            const int64_t e = c * cells + v;
            x = voxel_point_grad(in.reduce, A(g[b * C * cells + e]), counts.data(), v, first.data(),
                                 e, n);
          }
          out[c] = feat_t(x);
        }
      }
    }
  });
}

at::Tensor voxelize_backward_cpu(const at::Tensor& grad, const at::Tensor& points,
                                 const at::Tensor& features,
                                 const std::optional<at::Tensor>& lengths,
                                 at::IntArrayRef grid_size, at::ArrayRef<double> voxel_size,
                                 at::ArrayRef<double> origin, c10::string_view reduce,
                                 const at::Tensor& result,
                                 const std::optional<at::Tensor>& voxel_size_tensor,
                                 const std::optional<at::Tensor>& origin_tensor) {
  const auto checked =
      check_voxelize_backward(grad, points, features, lengths, c10::fromIntArrayRefSlow(grid_size),
                              voxel_size, origin, reduce, result, voxel_size_tensor, origin_tensor);
  const auto in = voxelize_inputs(checked, points, features, lengths, grid_size, voxel_size, origin,
                                  voxel_size_tensor, origin_tensor, true);
  const int64_t B = in.B(), C = in.C();
  at::Tensor grad_features = at::empty({B, in.N(), C}, features.options());
  const at::Tensor g = grad.to(features.scalar_type()).contiguous().view({B, C, in.cells()});
  const at::Tensor res = result.contiguous().view({B, C, in.cells()});
  AT_DISPATCH_FLOATING_TYPES(points.scalar_type(), "voxelize_backward_cpu", [&] {
    using point_t = scalar_t;
    ROBOCACHE_DISPATCH_VALUE_TYPES(features.scalar_type(), "voxelize_backward_cpu", [&] {
      backward_impl<point_t, scalar_t>(in, g, res, grad_features);
    });
  });
  return in.batched ? grad_features : grad_features.squeeze(0);
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("voxelize", &voxelize_cpu);
  m.impl("_voxelize_backward", &voxelize_backward_cpu);
}

}  // namespace robocache
