// The kernels of robocache::augment (the launches: augment.cu; the math:
// robocache/augment.h). A thread per output pixel, a block's pixels within
// one image. The first pass writes the geometry and the jitter before
// contrast to a uint8 buffer and adds the block's grey to its image's sum
// (whole numbers, int64 atomics: exact and deterministic); the second reads
// them back, applies contrast and the rest, and writes the output form.
#pragma once

#include <cstdint>

#include "robocache/augment.h"

namespace robocache {

template <int kBlock>
__global__ void augment_first_pass_kernel(const uint8_t* __restrict__ images,
                                          const float* __restrict__ params, int64_t F,
                                          int64_t height, int64_t width, int C, int64_t out_h,
                                          int64_t out_w, int64_t blocks_per_image,
                                          uint8_t* __restrict__ first,
                                          unsigned long long* __restrict__ grey_sums) {
  using namespace augment;
  const int64_t n = int64_t(blockIdx.x) / blocks_per_image;
  const int64_t pixel = (int64_t(blockIdx.x) % blocks_per_image) * kBlock + threadIdx.x;
  const int64_t pixels = out_h * out_w;
  const float* p = params + (n / F) * kNumParams;
  unsigned long long grey = 0;
  if (pixel < pixels) {
    const Geometry g = geometry(p, height, width, out_h, out_w);
    float v[3];
    geometric_pixel(images + n * height * width * C, width, C, g, pixel / out_w, pixel % out_w, v);
    jitter(v, C, p, 0, contrast_position(p), 0.0f);
    grey = static_cast<unsigned long long>(grey_of(v, C));
    uint8_t* target = first + (n * pixels + pixel) * C;
    for (int c = 0; c < C; ++c)
      target[c] = uint8_t(v[c]);
  }
  __shared__ unsigned long long partial[kBlock / 32];
  for (int offset = 16; offset > 0; offset /= 2)
    grey += __shfl_down_sync(0xffffffffu, grey, offset);
  if (threadIdx.x % 32 == 0)
    partial[threadIdx.x / 32] = grey;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned long long total = 0;
    for (int w = 0; w < kBlock / 32; ++w)
      total += partial[w];
    atomicAdd(grey_sums + n, total);
  }
}

template <typename out_t>
__global__ void augment_second_pass_kernel(const uint8_t* __restrict__ first,
                                           const float* __restrict__ params,
                                           const unsigned long long* __restrict__ grey_sums,
                                           int64_t F, int C, int64_t pixels, int64_t total,
                                           augment::Output form, out_t* __restrict__ out) {
  using namespace augment;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total)
    return;
  const int64_t n = i / pixels, pixel = i % pixels;
  const float* p = params + (n / F) * kNumParams;
  float v[3];
  for (int c = 0; c < C; ++c)
    v[c] = float(first[i * C + c]);
  const float mean = float(double(grey_sums[n]) / double(pixels));
  jitter(v, C, p, contrast_position(p), 4, mean);
  // As torch's CUDA division by a number: times its reciprocal.
  const float to_unit = 1.0f / 255.0f;
  for (int c = 0; c < C; ++c) {
    if (form == Output::Uint8)
      out[i * C + c] = out_t(v[c]);
    else if (form == Output::Float)
      out[i * C + c] = out_t(v[c] * to_unit);
    else
      out[(n * C + c) * pixels + pixel] = out_t(v[c] * to_unit);
  }
}

}  // namespace robocache
