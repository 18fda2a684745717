// CPU kernel of robocache::augment (the math: robocache/augment.h). The
// parameters are checked here, where reading them is free: a crop inside
// the frame, factors >= 0, a hue in [-0.5, 0.5], an order that is a
// permutation. Frames run in parallel, each in stages over whole images:
// the resize separably (rows, then columns) with each window's filter
// weights tabled once, the rotation reading the resized image, the jitter
// before contrast, the image's mean grey, then contrast and the rest. The
// sums are resized_crop_pixel's and rotated_pixel's, in their order, so the
// values are the CUDA kernel's.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "robocache/augment.h"
#include "robocache/checks.h"
#include "robocache/error.h"
#include "robocache/parallel.h"

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

// rintf for |v| < 2^22 under the default rounding (to nearest, ties to
// even): the addition rounds away the fraction. Unlike rintf it vectorises
// without SSE4.1.
inline float round_to_even(float v) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23
  return (v + kShift) - kShift;
}

// One axis of a window's resize: output i reads the source taps [first[i],
// first[i] + count[i]) with weights[i * taps + j], the normalised weights
// resized_crop_pixel computes per pixel, here once per window.
struct AxisFilter {
  bool identity = false;
  int64_t taps = 0;
  std::vector<int64_t> first, count;
  std::vector<float> weights;

  void build(const ResizeAxis& a, int64_t out) {
    identity = a.in == out;  // the weights are then 1 and 0: a copy
    first.resize(out);
    count.resize(out);
    std::vector<float> centers(out);
    taps = 0;
    for (int64_t i = 0; i < out; ++i) {
      resize_span(a, i, first[i], count[i], centers[i]);
      taps = std::max(taps, count[i]);
    }
    weights.assign(out * taps, 0.0f);
    for (int64_t i = 0; i < out; ++i) {
      const float total = resize_total(a, first[i], count[i], centers[i]);
      for (int64_t j = 0; j < count[i]; ++j)
        weights[i * taps + j] = resize_weight(a, j, first[i], centers[i]) / total;
    }
  }
};

// The crop's rows resized along x: (crop height, out_w, C), not rounded.
template <int C>
void resize_rows(const uint8_t* image, int64_t width, const Geometry& g, const AxisFilter& fx,
                 float* rows) {
  const int64_t n = g.out_w * C;
  for (int64_t r = 0; r < g.ay.in; ++r) {
    const uint8_t* row = image + ((g.top + r) * width + g.left) * C;
    float* target = rows + r * n;
    if (fx.identity) {
      for (int64_t k = 0; k < n; ++k)
        target[k] = float(row[k]);
      continue;
    }
    for (int64_t x = 0; x < g.out_w; ++x) {
      const float* w = fx.weights.data() + x * fx.taps;
      const uint8_t* taps = row + fx.first[x] * C;
      float line[C] = {};
      for (int64_t j = 0; j < fx.count[x]; ++j)
        for (int c = 0; c < C; ++c)
          line[c] += w[j] * float(taps[j * C + c]);
      for (int c = 0; c < C; ++c)
        target[x * C + c] = line[c];
    }
  }
}

// The rows resized along y and rounded: the resized crop, (out_h, out_w, C).
template <int C>
void resize_columns(const float* rows, const Geometry& g, const AxisFilter& fy, float* resized) {
  const int64_t n = g.out_w * C;
  for (int64_t y = 0; y < g.out_h; ++y) {
    float* target = resized + y * n;
    if (fy.identity) {
      const float* row = rows + y * n;
      for (int64_t k = 0; k < n; ++k)
        target[k] = round_to_even(row[k]);
      continue;
    }
    std::fill(target, target + n, 0.0f);
    const float* w = fy.weights.data() + y * fy.taps;
    for (int64_t i = 0; i < fy.count[y]; ++i) {
      const float* row = rows + (fy.first[y] + i) * n;
      const float wy = w[i];
      for (int64_t k = 0; k < n; ++k)
        target[k] += wy * row[k];
    }
    for (int64_t k = 0; k < n; ++k)
      target[k] = round_to_even(target[k]);
  }
}

template <int C>
struct BufferTaps {
  const float* image;
  int64_t width;
  void operator()(int64_t y, int64_t x, float* tap) const {
    for (int c = 0; c < C; ++c)
      tap[c] = image[(y * width + x) * C + c];
  }
};

template <int C>
void rotate(const float* resized, const Geometry& g, float* rotated) {
  const BufferTaps<C> taps{resized, g.out_w};
  for (int64_t y = 0; y < g.out_h; ++y)
    for (int64_t x = 0; x < g.out_w; ++x)
      rotated_pixel(g, C, y, x, taps, rotated + (y * g.out_w + x) * C);
}

// Whether any jitter op at positions [first, last) of the row's order is applied.
bool jitters(const float* p, int first, int last) {
  for (int k = first; k < last; ++k)
    if (!std::isnan(p[kBrightness + jitter_at(p[kOrder], k)]))
      return true;
  return false;
}

template <int C>
void jitter_image(float* values, const float* p, int64_t pixels) {
  const int split = contrast_position(p);
  if (jitters(p, 0, split))
    for (int64_t i = 0; i < pixels; ++i)
      jitter(values + i * C, C, p, 0, split, 0.0f);
  if (split == 4)
    return;
  int64_t grey_sum = 0;
  for (int64_t i = 0; i < pixels; ++i)
    grey_sum += int64_t(grey_of(values + i * C, C));
  const float mean = float(double(grey_sum) / double(pixels));
  for (int64_t i = 0; i < pixels; ++i)
    jitter(values + i * C, C, p, split, 4, mean);
}

template <int C, typename out_t>
void write_image(const float* values, Output form, int64_t pixels, out_t* out) {
  if (form == Output::Uint8) {
    for (int64_t k = 0; k < pixels * C; ++k)
      out[k] = out_t(values[k]);
  } else if (form == Output::Float) {
    for (int64_t k = 0; k < pixels * C; ++k)
      out[k] = out_t(values[k] / 255.0f);
  } else {
    for (int c = 0; c < C; ++c)
      for (int64_t i = 0; i < pixels; ++i)
        out[c * pixels + i] = out_t(values[i * C + c] / 255.0f);
  }
}

template <int C, typename out_t>
void augment_images(const at::Tensor& images, const at::Tensor& params, at::Tensor& out,
                    Output form, int64_t out_h, int64_t out_w) {
  const int64_t F = images.size(1), H = images.size(2), W = images.size(3);
  const int64_t pixels = out_h * out_w;
  const uint8_t* src = images.data_ptr<uint8_t>();
  const float* par = params.data_ptr<float>();
  out_t* dst = out.data_ptr<out_t>();
  parallel_over(0, images.size(0) * F, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> rows(H * out_w * C), resized(pixels * C), rotated;
    AxisFilter fy, fx;
    int64_t filters_of = -1;  // the window the filters were built for
    for (int64_t n = begin; n < end; ++n) {
      const int64_t b = n / F;
      const float* p = par + b * kNumParams;
      const Geometry g = geometry(p, H, W, out_h, out_w);
      if (b != filters_of) {
        fy.build(g.ay, out_h);
        fx.build(g.ax, out_w);
        filters_of = b;
      }
      resize_rows<C>(src + n * H * W * C, W, g, fx, rows.data());
      resize_columns<C>(rows.data(), g, fy, resized.data());
      float* values = resized.data();
      if (g.rotates) {
        rotated.resize(pixels * C);
        rotate<C>(resized.data(), g, rotated.data());
        values = rotated.data();
      }
      jitter_image<C>(values, p, pixels);
      write_image<C>(values, form, pixels, dst + n * pixels * C);
    }
  });
}

template <typename out_t>
void augment_images(const at::Tensor& images, const at::Tensor& params, at::Tensor& out,
                    Output form, int64_t out_h, int64_t out_w) {
  if (images.size(4) == 1)
    augment_images<1, out_t>(images, params, out, form, out_h, out_w);
  else
    augment_images<3, out_t>(images, params, out, form, out_h, out_w);
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
