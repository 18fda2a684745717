#include "pinned_staging.h"

#include <ATen/core/CachingHostAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAStream.h>

#include "frame_decoder.h"

namespace robocache::decoders {

void PinnedStaging::reserve(const std::vector<FrameTarget>& frames,
                            const std::vector<size_t>& share, int64_t device) {
  device_ = device;
  frames_.clear();
  offsets_.clear();
  size_t total = 0;
  for (size_t i : share) {
    frames_.push_back(&frames[i]);
    offsets_.push_back(total);
    total += frames[i].pixel_bytes();
  }
  // A new block: the last one goes back to the allocator, which hands it
  // out again only once its copies are done.
  block_ = at::getHostAllocator(at::kCUDA)->allocate(total);
  base_ = static_cast<uint8_t*>(block_.get());
}

void PinnedStaging::copy(cudaStream_t cuda_stream) {
  if (block_.get() != nullptr) {
    // The allocator records its event on this CUDA stream when the block
    // goes back to it, below: right after the copies.
    auto copying =
        c10::cuda::getStreamFromExternal(cuda_stream, static_cast<c10::DeviceIndex>(device_));
    at::getHostAllocator(at::kCUDA)->record_event(block_.get(), block_.get_context(),
                                                  copying.unwrap());
  }
  size_t j = 0;
  while (j < frames_.size()) {
    // The run of frames whose targets lie end to end, as their pixels do here.
    uint8_t* out = frames_[j]->out;
    size_t bytes = frames_[j]->pixel_bytes();
    size_t next = j + 1;
    while (next < frames_.size() && frames_[next]->out == out + bytes) {
      bytes += frames_[next]->pixel_bytes();
      ++next;
    }
    C10_CUDA_CHECK(cudaMemcpyAsync(out, host(j), bytes, cudaMemcpyHostToDevice, cuda_stream));
    j = next;
  }
  block_.clear();
  base_ = nullptr;
  frames_.clear();
}

}  // namespace robocache::decoders
