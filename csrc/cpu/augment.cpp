// CPU kernel of robocache::augment (the math: robocache/augment.h). The
// parameters are checked here, where reading them is free: a crop inside
// the frame, factors >= 0, a hue in [-0.5, 0.5], an order that is a
// permutation. Images run in parallel; each in two passes: the geometry and
// the jitter before contrast, then contrast (with the image's mean grey)
// and the rest.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <cmath>
#include <vector>

#include "robocache/augment.h"
#include "robocache/checks.h"
#include "robocache/error.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.augment";
using namespace augment;

void check_params(const float* p, int64_t b, int64_t height, int64_t width) {
  const float top = p[kTop], left = p[kLeft], h = p[kCropHeight], w = p[kCropWidth];
  for (const float v : {top, left, h, w})
    ROBOCACHE_CHECK_VALUE(std::isfinite(v) && v == std::floor(v), kOp, ": params[", b,
                          "]: the crop (top, left, height, width) must be whole numbers; got (",
                          double(top), ", ", double(left), ", ", double(h), ", ", double(w), ")");
  ROBOCACHE_CHECK_VALUE(top >= 0 && left >= 0 && h >= 1 && w >= 1 && top + h <= float(height) &&
                            left + w <= float(width),
                        kOp, ": params[", b, "]: the crop (top ", double(top), ", left ",
                        double(left), ", height ", double(h), ", width ", double(w),
                        ") must lie inside the ", height, " x ", width, " frames");
  ROBOCACHE_CHECK_VALUE(std::isfinite(p[kAngle]), kOp, ": params[", b,
                        "]: the angle must be finite; got ", double(p[kAngle]));
  const char* names[] = {"brightness", "contrast", "saturation"};
  for (int k = 0; k < 3; ++k) {
    const float f = p[kBrightness + k];
    ROBOCACHE_CHECK_VALUE(std::isnan(f) || (std::isfinite(f) && f >= 0), kOp, ": params[", b,
                          "]: the ", names[k], " factor must be >= 0 (or NaN: none); got ",
                          double(f));
  }
  const float hue = p[kHue];
  ROBOCACHE_CHECK_VALUE(std::isnan(hue) || (hue >= -0.5f && hue <= 0.5f), kOp, ": params[", b,
                        "]: the hue shift must lie in [-0.5, 0.5] (or NaN: none); got ",
                        double(hue));
  const float order = p[kOrder];
  bool valid = order >= 0 && order < 256 && order == std::floor(order);
  int seen = 0;
  for (int k = 0; valid && k < 4; ++k)
    seen |= 1 << jitter_at(order, k);
  ROBOCACHE_CHECK_VALUE(valid && seen == 15, kOp, ": params[", b,
                        "]: the jitter order must be a permutation of the four ops, as base-4 "
                        "digits (0 to 255); got ",
                        double(order));
}

template <typename out_t>
void write_pixel(out_t* out, Output form, const float* v, int C, int64_t pixel, int64_t pixels) {
  for (int c = 0; c < C; ++c) {
    if (form == Output::Uint8)
      out[pixel * C + c] = out_t(v[c]);
    else if (form == Output::Float)
      out[pixel * C + c] = out_t(v[c] / 255.0f);
    else
      out[c * pixels + pixel] = out_t(v[c] / 255.0f);
  }
}

template <typename out_t>
void augment_images(const at::Tensor& images, const at::Tensor& params, at::Tensor& out,
                    Output form, int64_t out_h, int64_t out_w) {
  const int64_t B = images.size(0), F = images.size(1), H = images.size(2), W = images.size(3);
  const int C = int(images.size(4));
  const int64_t pixels = out_h * out_w;
  const uint8_t* src = images.data_ptr<uint8_t>();
  const float* par = params.data_ptr<float>();
  out_t* dst = out.data_ptr<out_t>();
  at::parallel_for(0, B * F, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> first(pixels * C);
    for (int64_t n = begin; n < end; ++n) {
      const float* p = par + (n / F) * kNumParams;
      const uint8_t* image = src + n * H * W * C;
      const Geometry g = geometry(p, H, W, out_h, out_w);
      const int split = contrast_position(p);
      int64_t grey_sum = 0;
      float v[3];
      for (int64_t y = 0; y < out_h; ++y) {
        for (int64_t x = 0; x < out_w; ++x) {
          geometric_pixel(image, W, C, g, y, x, v);
          jitter(v, C, p, 0, split, 0.0f);
          grey_sum += int64_t(grey_of(v, C));
          for (int c = 0; c < C; ++c)
            first[(y * out_w + x) * C + c] = v[c];
        }
      }
      const float mean = float(double(grey_sum) / double(pixels));
      out_t* target = dst + n * pixels * C;
      for (int64_t i = 0; i < pixels; ++i) {
        for (int c = 0; c < C; ++c)
          v[c] = first[i * C + c];
        jitter(v, C, p, split, 4, mean);
        write_pixel(target, form, v, C, i, pixels);
      }
    }
  });
}

at::Tensor augment_cpu(const at::Tensor& images_in, const at::Tensor& params_in, c10::SymInt height,
                       c10::SymInt width, c10::string_view output) {
  const auto checked = check_augment(images_in, params_in, height, width, output);
  const at::Tensor images = images_in.contiguous(), params = params_in.contiguous();
  const int64_t B = images.size(0), H = images.size(2), W = images.size(3);
  const float* par = params.data_ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    check_params(par + b * kNumParams, b, H, W);
  at::Tensor out =
      at::empty_symint(augment_shape(checked), images.options().dtype(augment_dtype(checked)));
  if (out.numel() == 0)
    return out;
  const int64_t out_h = height.expect_int(), out_w = width.expect_int();
  if (checked.output == Output::Uint8)
    augment_images<uint8_t>(images, params, out, checked.output, out_h, out_w);
  else
    augment_images<float>(images, params, out, checked.output, out_h, out_w);
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CPU, m) {
  m.impl("augment", &augment_cpu);
}

}  // namespace robocache
