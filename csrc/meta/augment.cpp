// Meta (shape) kernel of robocache::augment: the shared symbolic check, then
// allocation only.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include "robocache/checks.h"

namespace robocache {
namespace {

at::Tensor augment_meta(const at::Tensor& images, const at::Tensor& params, c10::SymInt height,
                        c10::SymInt width, c10::string_view output) {
  const auto checked = check_augment(images, params, height, width, output);
  return at::empty_symint(augment_shape(checked), images.options().dtype(augment_dtype(checked)));
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, Meta, m) {
  m.impl("augment", &augment_meta);
}

}  // namespace robocache
