// Shared math of robocache::augment, host and device: the resized crop,
// the rotation and the four colour adjustments of one output pixel.
//
// Each step computes what torchvision's v2 functional transforms compute on
// a uint8 image, in float32, and rounds or truncates where they convert back
// to uint8:
//   resized_crop(top, left, h, w, size, bilinear, antialias=True)  rounds;
//   rotate(angle, bilinear, fill=0)                                 rounds;
//   adjust_brightness / contrast / saturation                       truncate;
//   adjust_hue                                   truncates x * 255.999.
// The rotation reads the resized crop at its four bilinear taps, each
// computed on the fly: one pass over the source, the same values as the two
// transforms one after the other.
#pragma once

#include <cmath>
#include <cstdint>

#include "robocache/host_device.h"

namespace robocache {
namespace augment {

// Columns of the per-window parameter table (float32, one row a window).
// Jitter factors that are NaN are not applied. kOrder holds the jitter's
// order as four base-4 digits, the first op in the highest: 0 brightness,
// 1 contrast, 2 saturation, 3 hue.
enum Param : int {
  kTop = 0,
  kLeft,
  kCropHeight,
  kCropWidth,
  kAngle,
  kBrightness,
  kContrast,
  kSaturation,
  kHue,
  kOrder,
  kNumParams
};
enum Jitter : int { kJitterBrightness = 0, kJitterContrast, kJitterSaturation, kJitterHue };

// What the op writes: uint8 (H, W, C), float32 (H, W, C) in [0, 1], or
// float32 (C, H, W) in [0, 1].
enum class Output : int32_t { Uint8 = 0, Float = 1, FloatChw = 2 };

// The k-th jitter op of a parameter row's order.
ROBOCACHE_HD int jitter_at(float order, int k) {
  return (int(order) >> (2 * (3 - k))) & 3;
}

// The position of contrast in the order (4: not applied). Ops before it run
// in the first pass, contrast and the ones after it in the second, once the
// image's mean grey is known.
ROBOCACHE_HD int contrast_position(const float* p) {
  if (p[kContrast] != p[kContrast])  // NaN
    return 4;
  for (int k = 0; k < 4; ++k)
    if (jitter_at(p[kOrder], k) == kJitterContrast)
      return k;
  return 4;
}

// One axis of the antialiased bilinear resize (PyTorch's
// _upsample_bilinear2d_aa, align_corners=False): a triangle filter widened
// by the scale when downsampling.
struct ResizeAxis {
  float scale, support, invscale;
  int64_t in;
};

ROBOCACHE_HD ResizeAxis resize_axis(int64_t in, int64_t out) {
  ResizeAxis a;
  a.in = in;
  a.scale = float(in) / float(out);
  a.support = a.scale >= 1.0f ? a.scale : 1.0f;
  a.invscale = a.scale >= 1.0f ? 1.0f / a.scale : 1.0f;
  return a;
}

// The source taps [first, first + count) of output index i, and the filter's centre.
ROBOCACHE_HD void resize_span(const ResizeAxis& a, int64_t i, int64_t& first, int64_t& count,
                              float& center) {
  center = a.scale * (float(i) + 0.5f);
  first = int64_t(center - a.support + 0.5f);
  if (first < 0)
    first = 0;
  int64_t last = int64_t(center + a.support + 0.5f);
  if (last > a.in)
    last = a.in;
  count = last - first;
}

ROBOCACHE_HD float resize_weight(const ResizeAxis& a, int64_t j, int64_t first, float center) {
  const float x = fabsf((float(j + first) - center + 0.5f) * a.invscale);
  return x < 1.0f ? 1.0f - x : 0.0f;
}

// The sum of a span's weights, by which each weight is divided (as
// PyTorch's kernels normalise: the rounding of ties then agrees more often).
ROBOCACHE_HD float resize_total(const ResizeAxis& a, int64_t first, int64_t count, float center) {
  float total = 0.0f;
  for (int64_t j = 0; j < count; ++j)
    total += resize_weight(a, j, first, center);
  return total == 0.0f ? 1.0f : total;
}

// The resized crop at pixel (y, x), every channel, rounded as a uint8 image's.
// `image` is the source (height, width, C) uint8 image; the crop's top-left
// corner is (top, left) and its size is the axes' `in`. The CPU kernel
// computes the same sums separably, with each span's weights tabled once.
ROBOCACHE_HD void resized_crop_pixel(const uint8_t* image, int64_t width, int C, int64_t top,
                                     int64_t left, const ResizeAxis& ay, const ResizeAxis& ax,
                                     int64_t y, int64_t x, float* out) {
  int64_t y0, ny, x0, nx;
  float cy, cx;
  resize_span(ay, y, y0, ny, cy);
  resize_span(ax, x, x0, nx, cx);
  const float total_y = resize_total(ay, y0, ny, cy);
  const float total_x = resize_total(ax, x0, nx, cx);
  float acc[3] = {0.0f, 0.0f, 0.0f};
  for (int64_t i = 0; i < ny; ++i) {
    const float wy = resize_weight(ay, i, y0, cy) / total_y;
    const uint8_t* row = image + ((top + y0 + i) * width + left + x0) * C;
    float line[3] = {0.0f, 0.0f, 0.0f};
    for (int64_t j = 0; j < nx; ++j) {
      const float wx = resize_weight(ax, j, x0, cx) / total_x;
      for (int c = 0; c < C; ++c)
        line[c] += wx * float(row[j * C + c]);
    }
    for (int c = 0; c < C; ++c)
      acc[c] += wy * line[c];
  }
  for (int c = 0; c < C; ++c)
    out[c] = rintf(acc[c]);
}

// The crop, resize and rotation of output pixel (y, x) of an out_h x out_w
// image: the resized crop read at the rotated position, bilinear, zero
// outside, and attenuated at the border as torchvision's fill=0 is.
struct Geometry {
  int64_t top, left, out_h, out_w;
  ResizeAxis ay, ax;
  bool rotates;
  float cos_a, sin_a;
};

// The parameter row's geometry on a height x width source. The box is
// clamped into the source, so that no row of parameters can read outside it.
ROBOCACHE_HD Geometry geometry(const float* p, int64_t height, int64_t width, int64_t out_h,
                               int64_t out_w) {
  Geometry g;
  int64_t h = int64_t(p[kCropHeight]), w = int64_t(p[kCropWidth]);
  h = h < 1 ? 1 : (h > height ? height : h);
  w = w < 1 ? 1 : (w > width ? width : w);
  int64_t top = int64_t(p[kTop]), left = int64_t(p[kLeft]);
  top = top < 0 ? 0 : (top > height - h ? height - h : top);
  left = left < 0 ? 0 : (left > width - w ? width - w : left);
  g.top = top;
  g.left = left;
  g.out_h = out_h;
  g.out_w = out_w;
  g.ay = resize_axis(h, out_h);
  g.ax = resize_axis(w, out_w);
  g.rotates = p[kAngle] != 0.0f;
  g.cos_a = 1.0f;
  g.sin_a = 0.0f;
  if (g.rotates) {  // in double, as torchvision's matrix, then float32
    const double radians = double(p[kAngle]) * 3.14159265358979323846 / 180.0;
    g.cos_a = float(cos(radians));
    g.sin_a = float(sin(radians));
  }
  return g;
}

// Output pixel (y, x) of the rotation of the out_h x out_w resized crop,
// whose pixel (ty, tx) `resized(ty, tx, tap)` writes to tap[0, C).
template <typename Resized>
ROBOCACHE_HD void rotated_pixel(const Geometry& g, int C, int64_t y, int64_t x,
                                const Resized& resized, float* out) {
  // torchvision's inverse rotation about the image's centre, in pixel centres.
  const float xc = float(x) - 0.5f * float(g.out_w - 1);
  const float yc = float(y) - 0.5f * float(g.out_h - 1);
  const float sx = g.cos_a * xc - g.sin_a * yc + 0.5f * float(g.out_w - 1);
  const float sy = g.sin_a * xc + g.cos_a * yc + 0.5f * float(g.out_h - 1);
  const float fx = floorf(sx), fy = floorf(sy);
  const int64_t x0 = int64_t(fx), y0 = int64_t(fy);
  const float wx1 = sx - fx, wy1 = sy - fy;
  float acc[3] = {0.0f, 0.0f, 0.0f}, mask = 0.0f, tap[3];
  for (int dy = 0; dy < 2; ++dy) {
    const int64_t ty = y0 + dy;
    if (ty < 0 || ty >= g.out_h)
      continue;
    for (int dx = 0; dx < 2; ++dx) {
      const int64_t tx = x0 + dx;
      if (tx < 0 || tx >= g.out_w)
        continue;
      const float w = (dy ? wy1 : 1.0f - wy1) * (dx ? wx1 : 1.0f - wx1);
      resized(ty, tx, tap);
      for (int c = 0; c < C; ++c)
        acc[c] += w * tap[c];
      mask += w;
    }
  }
  for (int c = 0; c < C; ++c)
    out[c] = rintf(acc[c] * mask);
}

// The resized crop's pixels computed on the fly from the source image.
struct ResizedCropTaps {
  const uint8_t* image;
  int64_t width;
  int C;
  const Geometry* g;
  ROBOCACHE_HD void operator()(int64_t y, int64_t x, float* tap) const {
    resized_crop_pixel(image, width, C, g->top, g->left, g->ay, g->ax, y, x, tap);
  }
};

ROBOCACHE_HD void geometric_pixel(const uint8_t* image, int64_t width, int C, const Geometry& g,
                                  int64_t y, int64_t x, float* out) {
  if (!g.rotates) {
    resized_crop_pixel(image, width, C, g.top, g.left, g.ay, g.ax, y, x, out);
    return;
  }
  rotated_pixel(g, C, y, x, ResizedCropTaps{image, width, C, &g}, out);
}

// ---- colour, on values in [0, 255] that are whole numbers

ROBOCACHE_HD float to_uint8_value(float v) {
  return truncf(fminf(fmaxf(v, 0.0f), 255.0f));
}

// torchvision's grey: 0.2989 r + 0.587 g + 0.114 b, rounded down.
ROBOCACHE_HD float grey_of(const float* v, int C) {
  if (C == 1)
    return v[0];
  return floorf(fmaf(v[2], 0.114f, fmaf(v[1], 0.587f, v[0] * 0.2989f)));
}

// image * ratio + other * (1 - ratio), as uint8.
ROBOCACHE_HD float blend(float image, float other, float ratio) {
  const float alpha = float(1.0 - double(ratio));
  return to_uint8_value(fmaf(other, alpha, image * ratio));
}

ROBOCACHE_HD void shift_hue(float* v, float hue) {
  const float k = float(1.0 / 255.0);
  const float r = v[0] * k, g = v[1] * k, b = v[2] * k;
  const float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
  const bool equal = maxc == minc;
  const float range = maxc - minc;
  const float s = range / (equal ? 1.0f : maxc);
  const float divisor = equal ? 1.0f : range;
  const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
  float h;
  if (maxc == r)
    h = bc - gc;
  else if (maxc == g)
    h = (rc + 2.0f) - bc;
  else
    h = (gc + 4.0f) - rc;
  h = fmodf(h * float(1.0 / 6.0) + 1.0f, 1.0f);
  h = h + hue;
  h = h - floorf(h);
  const float h6 = h * 6.0f;
  const float fi = floorf(h6);
  const float f = h6 - fi;
  int i = int(fi) % 6;
  if (i < 0)
    i += 6;
  const float sxf = s * f, one_minus_s = 1.0f - s;
  const float q = fminf(fmaxf((1.0f - sxf) * maxc, 0.0f), 1.0f);
  const float t = fminf(fmaxf((sxf + one_minus_s) * maxc, 0.0f), 1.0f);
  const float p = fminf(fmaxf(one_minus_s * maxc, 0.0f), 1.0f);
  const float rs[6] = {maxc, q, p, p, t, maxc};
  const float gs[6] = {t, maxc, maxc, q, p, p};
  const float bs[6] = {p, p, t, maxc, maxc, q};
  const float scale = float(255.0 + 1.0 - 1e-3);
  v[0] = truncf(rs[i] * scale);
  v[1] = truncf(gs[i] * scale);
  v[2] = truncf(bs[i] * scale);
}

// The jitter ops at positions [first, last) of the row's order; contrast
// blends with `mean_grey`, the image's mean grey before it.
ROBOCACHE_HD void jitter(float* v, int C, const float* p, int first, int last, float mean_grey) {
  for (int k = first; k < last; ++k) {
    const int op = jitter_at(p[kOrder], k);
    const float factor = p[kBrightness + op];
    if (factor != factor)  // NaN: not applied
      continue;
    if (op == kJitterBrightness) {
      for (int c = 0; c < C; ++c)
        v[c] = to_uint8_value(v[c] * factor);
    } else if (op == kJitterContrast) {
      for (int c = 0; c < C; ++c)
        v[c] = blend(v[c], mean_grey, factor);
    } else if (C == 3 && op == kJitterSaturation) {
      const float grey = grey_of(v, C);
      for (int c = 0; c < C; ++c)
        v[c] = blend(v[c], grey, factor);
    } else if (C == 3 && op == kJitterHue) {
      shift_hue(v, factor);
    }
  }
}

}  // namespace augment
}  // namespace robocache
