// The symbolic check of robocache::augment, shared by the CPU, CUDA and Meta
// kernels (sizes only: no data is read, so it runs under fake tensors).
#include "common.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.augment";

augment::Output parse_output(c10::string_view output) {
  if (output == "uint8")
    return augment::Output::Uint8;
  if (output == "float")
    return augment::Output::Float;
  if (output == "float_chw")
    return augment::Output::FloatChw;
  ROBOCACHE_CHECK_VALUE(false, kOp, ": output must be 'uint8', 'float' or 'float_chw'; got '",
                        output, "'");
  return augment::Output::Uint8;
}

}  // namespace

AugmentChecked check_augment(const at::Tensor& images, const at::Tensor& params,
                             const c10::SymInt& height, const c10::SymInt& width,
                             c10::string_view output) {
  const char* op = kOp;
  const augment::Output form = parse_output(output);
  ROBOCACHE_CHECK_TYPE(images.scalar_type() == at::kByte, op, ": images must be uint8; got ",
                       images.scalar_type());
  ROBOCACHE_CHECK_VALUE(images.dim() == 5, op,
                        ": images must be 5-D (B, F, H, W, C): F frames of B windows; got shape ",
                        shape_str(images));
  ROBOCACHE_CHECK_TYPE(params.scalar_type() == at::kFloat, op, ": params must be float32; got ",
                       params.scalar_type());
  ROBOCACHE_CHECK_VALUE(params.dim() == 2, op, ": params must be 2-D (B, ",
                        int64_t(augment::kNumParams), "); got shape ", shape_str(params));
  ROBOCACHE_CHECK_VALUE(params.device() == images.device(), op,
                        ": params must be on the images' device (", images.device(), "); got ",
                        params.device());
  AugmentChecked c{form,
                   images.sym_size(0),
                   images.sym_size(1),
                   images.sym_size(2),
                   images.sym_size(3),
                   images.sym_size(4),
                   height,
                   width};
  ROBOCACHE_SYM_CHECK(c.C.sym_eq(1) | c.C.sym_eq(3), op,
                      ": images must have 1 or 3 channels (the last axis); got shape ",
                      shape_str(images));
  ROBOCACHE_SYM_CHECK(c.H.sym_ge(1) & c.W.sym_ge(1), op,
                      ": images must be at least 1 x 1 pixels; got shape ", shape_str(images));
  ROBOCACHE_SYM_CHECK(params.sym_size(0).sym_eq(c.B), op,
                      ": params must have a row per window (B = ", c.B, "); got shape ",
                      shape_str(params));
  ROBOCACHE_SYM_CHECK(params.sym_size(1).sym_eq(augment::kNumParams), op, ": params must have ",
                      int64_t(augment::kNumParams), " columns; got shape ", shape_str(params));
  ROBOCACHE_SYM_CHECK(height.sym_ge(1) & width.sym_ge(1), op,
                      ": height and width must be >= 1; got ", height, " and ", width);
  return c;
}

std::vector<c10::SymInt> augment_shape(const AugmentChecked& c) {
  if (c.output == augment::Output::FloatChw)
    return {c.B, c.F, c.C, c.out_h, c.out_w};
  return {c.B, c.F, c.out_h, c.out_w, c.C};
}

at::ScalarType augment_dtype(const AugmentChecked& c) {
  return c.output == augment::Output::Uint8 ? at::kByte : at::kFloat;
}

}  // namespace robocache
