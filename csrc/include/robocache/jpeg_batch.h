// A batch of JPEG frames as robocache's CUDA kernels decode it
// (csrc/cuda/jpeg_kernels.cuh): each frame's job, its components' planes,
// and the buffers the kernels read and write, all in device memory. The
// host side (csrc/decoders/kernel_jpeg.cpp) fills it from each frame's
// header read.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "jpeg.h"

namespace robocache::jpeg {

struct FrameJob {
  FrameLayout layout;
  int64_t bytes;  // offset of its bytes in the batch's
  int64_t size;
  uint8_t* out;      // its pixels, (height, width, channels) in device memory
  int32_t channels;  // 1 (grey) or 3 (RGB)
  int32_t plane;     // its first component's plane
};

struct KernelBatch {
  const FrameJob* jobs;
  int32_t frames;
  int64_t largest;  // the pixels of its largest frame
  const Plane* planes;
  int32_t plane_count;
  int64_t blocks;  // of every plane
  const uint8_t* bytes;
  int16_t* coefficients;  // blocks * 64, zeroed before the launch
  uint8_t* samples;       // blocks * 64
  int32_t* statuses;      // a ScanStatus a frame
};

// The batch's three launches on `cuda_stream`: the scans' entropy decode
// (a warp a frame), the inverse DCT (a thread a block) and the pixels (a
// thread a pixel). The caller holds a device guard.
void launch_decode(const KernelBatch& batch, cudaStream_t cuda_stream);

}  // namespace robocache::jpeg
