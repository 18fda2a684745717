// robocache's CUDA JPEG decode, in three kernels over a batch: each frame's
// scan entropy-decoded by one thread of a warp (the warp builds its Huffman
// tables first), each block's inverse DCT by a thread, each pixel's
// upsampling and colour by a thread. The math is robocache/jpeg.h's, shared
// with the host decoder.
#pragma once

#include <cstdint>

#include "robocache/jpeg_entropy.h"
#include "robocache/jpeg_pixels.h"
#include "robocache/jpeg_batch.h"

namespace robocache::jpeg {

constexpr int kWarp = 32;

// A frame's layout copied into shared memory by the threads of a block.
__device__ __forceinline__ void copy_layout(const FrameLayout& from, FrameLayout& to, int thread,
                                            int threads) {
  const int32_t* source = reinterpret_cast<const int32_t*>(&from);
  int32_t* target = reinterpret_cast<int32_t*>(&to);
  for (int i = thread; i < static_cast<int>(sizeof(FrameLayout) / 4); i += threads) {
    target[i] = source[i];
  }
}

// Block f: frame f's scan, its coefficients written into its planes'.
__global__ void __launch_bounds__(kWarp)
    decode_scans(const FrameJob* __restrict__ jobs, const Plane* __restrict__ planes,
                 const uint8_t* __restrict__ bytes, int16_t* __restrict__ coefficients,
                 int32_t* __restrict__ statuses) {
  __shared__ FrameLayout frame;
  __shared__ HuffmanTable tables[kMaxTables];
  __shared__ uint8_t order[kNaturalOrderEntries];
  __shared__ int32_t values[kMaxTables];
  const int lane = static_cast<int>(threadIdx.x);
  const FrameJob& job = jobs[blockIdx.x];
  copy_layout(job.layout, frame, lane, kWarp);
  fill_natural_order(order, lane, kWarp);
  __syncwarp();
  const uint8_t* data = bytes + job.bytes;
  if (lane < frame.tables) {
    values[lane] = build_codes(data + frame.table_at[lane], tables[lane]);
  }
  __syncwarp();
  for (int t = 0; t < frame.tables; ++t) {
    copy_values(data + frame.table_at[t], tables[t], values[t], lane, kWarp);
  }
  __syncwarp();
  for (int t = 0; t < frame.tables; ++t) {
    fill_lookup(data + frame.table_at[t], tables[t], lane, kWarp);
  }
  __syncwarp();
  if (lane == 0) {
    int16_t* out[kMaxComponents] = {nullptr, nullptr, nullptr};
    for (int c = 0; c < frame.components; ++c) {
      out[c] = coefficients + planes[job.plane + c].coefficients;
    }
    statuses[blockIdx.x] = decode_scan(data, job.size, frame, tables, order, out);
  }
}

// A thread a block of the batch's planes; a block past an 8-bit image's
// bounds fails its frame, unless its scan failed first.
__global__ void inverse_dcts(const Plane* __restrict__ planes, int32_t plane_count, int64_t blocks,
                             const int16_t* __restrict__ coefficients,
                             uint8_t* __restrict__ samples, int32_t* __restrict__ statuses) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= blocks) {
    return;
  }
  // The plane holding block b: the last whose first block is at most b.
  int32_t low = 0, high = plane_count - 1;
  while (low < high) {
    const int32_t middle = (low + high + 1) / 2;
    if (planes[middle].first_block <= b) {
      low = middle;
    } else {
      high = middle - 1;
    }
  }
  const Plane& plane = planes[low];
  const int64_t i = b - plane.first_block;
  const int64_t by = i / plane.blocks_x, bx = i - by * plane.blocks_x;
  const int64_t stride = int64_t{plane.blocks_x} * 8;
  if (!idct_block(coefficients + plane.coefficients + i * 64, plane.quant,
                  samples + plane.samples + by * 8 * stride + bx * 8, stride) &&
      statuses[plane.frame] == kDecoded) {
    statuses[plane.frame] = kOutOfRange;
  }
}

// Block (x, f): pixels of frame f, a thread each.
__global__ void write_pixels(const FrameJob* __restrict__ jobs, const Plane* __restrict__ planes,
                             const uint8_t* __restrict__ samples) {
  __shared__ FrameLayout frame;
  const FrameJob& job = jobs[blockIdx.y];
  copy_layout(job.layout, frame, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x));
  __syncthreads();
  const int64_t pixel = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (pixel >= int64_t{frame.width} * frame.height) {
    return;
  }
  const int32_t y = static_cast<int32_t>(pixel / frame.width);
  const int32_t x = static_cast<int32_t>(pixel - int64_t{y} * frame.width);
  const uint8_t* rows[kMaxComponents] = {nullptr, nullptr, nullptr};
  int64_t strides[kMaxComponents] = {0, 0, 0};
  for (int c = 0; c < frame.components; ++c) {
    const Plane& plane = planes[job.plane + c];
    rows[c] = samples + plane.samples;
    strides[c] = int64_t{plane.blocks_x} * 8;
  }
  write_pixel(frame, rows, strides, y, x, job.channels, job.out + pixel * job.channels);
}

}  // namespace robocache::jpeg
