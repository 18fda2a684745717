// Meta (shape) kernel of robocache::draw_mixture: the shared symbolic check,
// then allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "robocache/checks.h"

namespace robocache {
namespace {

std::tuple<at::Tensor, at::Tensor> draw_mixture_meta(const at::Tensor& base, c10::SymInt batch_size,
                                                     const at::Tensor& weights,
                                                     const at::Tensor& counts) {
  const auto checked = check_draw_mixture(base, batch_size, weights, counts);
  return {at::empty_symint({checked.B}, counts.options()),
          at::empty_symint({checked.B}, counts.options())};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("draw_mixture", &draw_mixture_meta);
}

}  // namespace robocache
