// A JPEG frame's blocks into pixels: each block's dequantization and
// inverse DCT into its component's samples, then each pixel's upsampled
// components and colour (see jpeg.h).
#pragma once

#include <cstdint>

#include "host_device.h"
#include "jpeg.h"

namespace robocache::jpeg {

// The largest dequantized coefficient, and the largest value between the
// two passes, that an 8-bit image's blocks hold (both with room to spare:
// libjpeg's bounds are 2^11 and 2^13). Within them libjpeg-turbo's C and
// SIMD inverse DCTs agree (the SIMD ones work in 16 bits).
constexpr int32_t kMaxCoefficient = 8191;
constexpr int32_t kMaxBetweenPasses = 16383;

// A sample after the inverse DCT: x + 128 clamped to [0, 255], as
// libjpeg-turbo's SIMD inverse DCTs saturate (its C table agrees for x in
// [-512, 511], all that images within the bounds above give but for the
// coarsest quantization).
ROBOCACHE_HD uint8_t idct_limit(int32_t x) {
  return static_cast<uint8_t>(x < -128 ? 0 : x > 127 ? 255 : x + 128);
}

// One 1-D pass of the accurate integer inverse DCT (libjpeg's LL&M
// butterfly with 13-bit constants) on in[0], in[step], ..., in[7 * step]:
// the eight outputs, before their descaling, into out[0..7].
ROBOCACHE_HD void idct_pass(const int32_t* in, int step, int64_t* out) {
  constexpr int64_t k0_298631336 = 2446, k0_390180644 = 3196, k0_541196100 = 4433,
                    k0_765366865 = 6270, k0_899976223 = 7373, k1_175875602 = 9633,
                    k1_501321110 = 12299, k1_847759065 = 15137, k1_961570560 = 16069,
                    k2_053119869 = 16819, k2_562915447 = 20995, k3_072711026 = 25172;
  // Even part.
  int64_t z2 = in[2 * step], z3 = in[6 * step];
  int64_t z1 = (z2 + z3) * k0_541196100;
  const int64_t even2 = z1 - z3 * k1_847759065;
  const int64_t even3 = z1 + z2 * k0_765366865;
  z2 = in[0];
  z3 = in[4 * step];
  const int64_t even0 = (z2 + z3) * 8192, even1 = (z2 - z3) * 8192;
  const int64_t t10 = even0 + even3, t13 = even0 - even3, t11 = even1 + even2, t12 = even1 - even2;
  // Odd part.
  int64_t o0 = in[7 * step], o1 = in[5 * step], o2 = in[3 * step], o3 = in[step];
  z1 = o0 + o3;
  z2 = o1 + o2;
  z3 = o0 + o2;
  int64_t z4 = o1 + o3;
  const int64_t z5 = (z3 + z4) * k1_175875602;
  o0 *= k0_298631336;
  o1 *= k2_053119869;
  o2 *= k3_072711026;
  o3 *= k1_501321110;
  z1 *= -k0_899976223;
  z2 *= -k2_562915447;
  z3 = z3 * -k1_961570560 + z5;
  z4 = z4 * -k0_390180644 + z5;
  o0 += z1 + z3;
  o1 += z2 + z4;
  o2 += z2 + z3;
  o3 += z1 + z4;
  out[0] = t10 + o3;
  out[7] = t10 - o3;
  out[1] = t11 + o2;
  out[6] = t11 - o2;
  out[2] = t12 + o1;
  out[5] = t12 - o1;
  out[3] = t13 + o0;
  out[4] = t13 - o0;
}

// A block's coefficients (natural order) dequantized and inverse-DCT'd
// into 8x8 samples at `out` (rows `stride` bytes apart), as
// jpeg_idct_islow (its shortcuts for zero AC terms give the same values).
// False where the block is past the bounds above (a corrupt frame's), its
// samples then whatever they came to.
ROBOCACHE_HD bool idct_block(const int16_t* coefficients, const uint16_t* quant, uint8_t* out,
                             int64_t stride) {
  int32_t columns[64];
  int32_t in[64];
  int64_t pass[8];
  bool within = true;
  for (int i = 0; i < 64; ++i) {
    in[i] = static_cast<int32_t>(coefficients[i]) * static_cast<int32_t>(quant[i]);
    within &= in[i] >= -kMaxCoefficient && in[i] <= kMaxCoefficient;
  }
  // Columns, scaled up by 2 bits (PASS1_BITS) for the rows.
  ROBOCACHE_UNROLL
  for (int x = 0; x < 8; ++x) {
    idct_pass(in + x, 8, pass);
    ROBOCACHE_UNROLL
    for (int y = 0; y < 8; ++y) {
      const int32_t value = static_cast<int32_t>((pass[y] + (1 << 10)) >> 11);
      within &= value >= -kMaxBetweenPasses && value <= kMaxBetweenPasses;
      columns[y * 8 + x] = value;
    }
  }
  ROBOCACHE_UNROLL
  for (int y = 0; y < 8; ++y) {
    idct_pass(columns + y * 8, 1, pass);
    ROBOCACHE_UNROLL
    for (int x = 0; x < 8; ++x) {
      out[y * stride + x] = idct_limit(static_cast<int32_t>((pass[x] + (1 << 17)) >> 18));
    }
  }
  return within;
}

// Component c's sample at pixel (y, x) of the image, upsampled as libjpeg
// does; `samples` its plane, `stride` bytes a row.
ROBOCACHE_HD int32_t upsampled(const uint8_t* samples, int64_t stride, const Component& c,
                               int32_t y, int32_t x) {
  auto at = [&](int32_t row, int32_t column) -> int32_t { return samples[row * stride + column]; };
  switch (c.upsampling) {
    case kH2V1Fancy: {
      const int32_t column = x >> 1;
      const int32_t other =
          (x & 1) ? (column + 1 < c.width ? column + 1 : column) : (column > 0 ? column - 1 : 0);
      return (3 * at(y, column) + at(y, other) + 1 + (x & 1)) >> 2;
    }
    case kH1V2Fancy: {
      const int32_t row = y >> 1;
      const int32_t other =
          (y & 1) ? (row + 1 < c.height ? row + 1 : row) : (row > 0 ? row - 1 : 0);
      return (3 * at(row, x) + at(other, x) + 1 + (y & 1)) >> 2;
    }
    case kH2V2Fancy: {
      const int32_t row = y >> 1, column = x >> 1;
      const int32_t other_row =
          (y & 1) ? (row + 1 < c.height ? row + 1 : row) : (row > 0 ? row - 1 : 0);
      const int32_t other_column =
          (x & 1) ? (column + 1 < c.width ? column + 1 : column) : (column > 0 ? column - 1 : 0);
      const int32_t near = 3 * at(row, column) + at(other_row, column);
      const int32_t far = 3 * at(row, other_column) + at(other_row, other_column);
      return (3 * near + far + 8 - (x & 1)) >> 4;
    }
    case kH2V1Box:
      return at(y, x >> 1);
    case kH2V2Box:
      return at(y >> 1, x >> 1);
    default:
      return at(y, x);
  }
}

ROBOCACHE_HD uint8_t clamp_sample(int32_t x) {
  return static_cast<uint8_t>(x < 0 ? 0 : x > 255 ? 255 : x);
}

// libjpeg's YCbCr -> RGB in 16-bit fixed point: its tables' entries,
// computed as it computes them.
ROBOCACHE_HD void ycbcr_to_rgb(int32_t y, int32_t cb, int32_t cr, uint8_t* rgb) {
  constexpr int64_t kHalf = int64_t{1} << 15;
  constexpr int64_t kCrR = 91881, kCbB = 116130, kCrG = 46802, kCbG = 22554;  // FIX(1.402) ...
  const int64_t x_cb = cb - 128, x_cr = cr - 128;
  const int32_t r = static_cast<int32_t>((kCrR * x_cr + kHalf) >> 16);
  const int32_t b = static_cast<int32_t>((kCbB * x_cb + kHalf) >> 16);
  const int32_t g = static_cast<int32_t>((-kCbG * x_cb + kHalf - kCrG * x_cr) >> 16);
  rgb[0] = clamp_sample(y + r);
  rgb[1] = clamp_sample(y + g);
  rgb[2] = clamp_sample(y + b);
}

// Pixel (y, x) of a frame into `out` (`channels` of it: 1, grey; 3, RGB),
// from its planes' samples (`samples[c]`, `strides[c]` bytes a row).
ROBOCACHE_HD void write_pixel(const FrameLayout& frame, const uint8_t* const* samples,
                              const int64_t* strides, int32_t y, int32_t x, int channels,
                              uint8_t* out) {
  if (frame.components == 1) {
    const uint8_t grey = static_cast<uint8_t>(samples[0][y * strides[0] + x]);
    for (int k = 0; k < channels; ++k) {
      out[k] = grey;
    }
    return;
  }
  int32_t value[kMaxComponents];
  for (int c = 0; c < kMaxComponents; ++c) {
    value[c] = upsampled(samples[c], strides[c], frame.component[c], y, x);
  }
  if (frame.color == kRGB) {
    out[0] = static_cast<uint8_t>(value[0]);
    out[1] = static_cast<uint8_t>(value[1]);
    out[2] = static_cast<uint8_t>(value[2]);
  } else {
    ycbcr_to_rgb(value[0], value[1], value[2], out);
  }
}

}  // namespace robocache::jpeg
