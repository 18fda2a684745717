// CPU kernel of robocache::draw_mixture (the math: robocache/draws.h). The
// weights and counts are checked here, where reading them is free: weights
// finite and >= 0, not all 0; counts >= 0, and > 0 for a store of positive
// weight.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <tuple>

#include "robocache/checks.h"
#include "robocache/draws.h"
#include "robocache/error.h"
#include "robocache/parallel.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.draw_mixture";

void check_tables(const double* weights, const int64_t* counts, int64_t S) {
  bool any = false;
  for (int64_t s = 0; s < S; ++s) {
    ROBOCACHE_CHECK_VALUE(std::isfinite(weights[s]) && weights[s] >= 0, kOp,
                          ": weights must be finite and >= 0; weights[", s, "] is ", weights[s]);
    ROBOCACHE_CHECK_VALUE(counts[s] >= 0, kOp, ": counts must be >= 0; counts[", s, "] is ",
                          counts[s]);
    ROBOCACHE_CHECK_VALUE(weights[s] == 0 || counts[s] > 0, kOp, ": store ", s, " has weight ",
                          weights[s], " but no anchors (counts[", s, "] is 0)");
    any = any || weights[s] > 0;
  }
  ROBOCACHE_CHECK_VALUE(any, kOp, ": weights must not all be 0");
}

std::tuple<at::Tensor, at::Tensor> draw_mixture_cpu(const at::Tensor& base_in,
                                                    c10::SymInt batch_size,
                                                    const at::Tensor& weights_in,
                                                    const at::Tensor& counts_in) {
  const auto checked = check_draw_mixture(base_in, batch_size, weights_in, counts_in);
  const at::Tensor weights = weights_in.contiguous(), counts = counts_in.contiguous();
  const int64_t B = checked.B.expect_int(), S = weights.size(0);
  const double* w = weights.data_ptr<double>();
  const int64_t* n = counts.data_ptr<int64_t>();
  check_tables(w, n, S);
  const int64_t base = base_in.data_ptr<int64_t>()[0];
  at::Tensor store = at::empty({B}, counts.options()), position = at::empty({B}, counts.options());
  int64_t* store_out = store.data_ptr<int64_t>();
  int64_t* position_out = position.data_ptr<int64_t>();
  parallel_over(0, B, 1024, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      // Keys wrap around as int64 does (as on the GPU).
      const auto d = draws::draw(int64_t(uint64_t(base) + uint64_t(i)), w, n, S);
      store_out[i] = d.store;
      position_out[i] = d.position;
    }
  });
  return {store, position};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("draw_mixture", &draw_mixture_cpu);
}

}  // namespace robocache
