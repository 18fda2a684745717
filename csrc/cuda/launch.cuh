// What every CUDA launch of robocache shares: the block size, and the grid
// size with its check against CUDA's limit.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAException.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "robocache/error.h"

namespace robocache {

// Threads per block, for every kernel.
constexpr int kThreads = 256;

// Blocks for `items` work items, `per_block` a block, and at least one. A
// grid holds at most 2^31 - 1 blocks; past that the call raises, naming the
// `count` `what` asked for (e.g. "too many queries for one launch (n)").
inline unsigned int grid_blocks(int64_t items, int64_t per_block, const char* op, const char* what,
                                int64_t count) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  ROBOCACHE_CHECK(blocks <= int64_t(0x7fffffff), op, ": too many ", what, " for one launch (",
                  count, ")");
  return static_cast<unsigned int>(std::max<int64_t>(blocks, 1));
}

// The address a kernel reads `t` at: its own for device memory; for pinned
// host memory, the device address CUDA maps it at (with unified addressing,
// the host address itself). The shared checks admit only these two.
inline const void* device_address(const at::Tensor& t) {
  if (!t.is_cpu())
    return t.data_ptr();
  void* address = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&address, t.data_ptr(), 0));
  return address;
}

// Whether p is a multiple of `bytes` (for vector loads and stores).
inline bool aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

// The widest copy chunk (16, 8, 4, 2 or 1 bytes) that divides a row of
// row_bytes and both the source's and the destination's addresses.
inline int64_t copy_chunk_bytes(const void* src, const void* dst, int64_t row_bytes) {
  for (int64_t chunk = 16; chunk > 1; chunk /= 2)
    if (row_bytes % chunk == 0 && aligned(src, size_t(chunk)) && aligned(dst, size_t(chunk)))
      return chunk;
  return 1;
}

// A thread per element, for n elements.
inline unsigned int grid_blocks(int64_t n, const char* op) {
  return grid_blocks(n, kThreads, op, "elements", n);
}

}  // namespace robocache
