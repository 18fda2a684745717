// Frames decoded on the host into pinned memory, then copied to their
// targets in device memory, on a CUDA stream, in as few copies as the
// targets' layout allows (one where they lie end to end). The pinned memory
// comes from torch's caching host allocator, which reuses it only once the
// copies queued on that stream are done: no host wait.
#pragma once

#include <c10/core/Allocator.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace robocache::decoders {

struct FrameTarget;

class PinnedStaging {
 public:
  // Room for the pixels of frames[share[0]], frames[share[1]], ..., in that
  // order (each frame's target is its device memory and size); room still
  // held from a call not copied goes back to the allocator.
  void reserve(const std::vector<FrameTarget>& frames, const std::vector<size_t>& share,
               int64_t device);
  // Where the j-th frame's pixels go on the host.
  uint8_t* host(size_t j) const { return base_ + offsets_[j]; }
  // Each frame's pixels copied to its target, ordered on `cuda_stream`; the
  // room goes back to the allocator, which reuses it once the copies are
  // done.
  void copy(cudaStream_t cuda_stream);

 private:
  at::DataPtr block_;
  uint8_t* base_ = nullptr;
  int64_t device_ = 0;
  std::vector<const FrameTarget*> frames_;
  std::vector<size_t> offsets_;
};

}  // namespace robocache::decoders
