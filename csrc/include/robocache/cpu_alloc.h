// Large CPU outputs on transparent huge pages: the voxelize grids, which
// their scatter touches at random (the resample output, written in order,
// gains nothing from them; docs/performance.md).
//
// A dense voxel grid is tens of MB that the allocator gets fresh from mmap
// on every call. With 4 KiB pages the kernel then takes one page fault per
// 4 KiB on first touch, which on a small machine can cost more than the op's
// own work (docs/performance.md). Random scatters into the grid also miss the
// TLB far less on 2 MiB pages. Where THP is "madvise" (a common default) the
// pages must be asked for, before they are first touched.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#include <unistd.h>
#endif

namespace robocache {

// Only outputs this large ask for huge pages: smaller ones may come from the
// allocator's heap, and gain little.
constexpr int64_t kHugePageMinBytes = int64_t(8) << 20;

// Asks the kernel to back [ptr, ptr + bytes) with huge pages. Advisory: a
// failure (no THP, another OS) leaves ordinary pages and changes no result.
inline void advise_huge_pages(void* ptr, int64_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes < kHugePageMinBytes)
    return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = (reinterpret_cast<uintptr_t>(ptr) + page - 1) / page * page;
  const auto end = (reinterpret_cast<uintptr_t>(ptr) + static_cast<uintptr_t>(bytes)) / page * page;
  if (end > begin)
    (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)ptr;
  (void)bytes;
#endif
}

// at::empty for an output that the caller writes in full (first touch).
inline at::Tensor empty_output(at::IntArrayRef sizes, const at::TensorOptions& options) {
  at::Tensor t = at::empty(sizes, options);
  advise_huge_pages(t.data_ptr(), static_cast<int64_t>(t.nbytes()));
  return t;
}

}  // namespace robocache
