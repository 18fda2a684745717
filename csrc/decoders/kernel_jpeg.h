// The host's side of robocache's CUDA JPEG decoder for one device: a
// batch's frames (their headers read) laid out with their bytes in pinned
// memory, copied to the device in one call, decoded by the three launches
// of csrc/cuda/jpeg_decode.cu, and each frame's outcome read back. No
// Python and no nvImageCodec: the host's work a frame is its header read
// and a copy of its bytes.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "../frames/frame_targets.h"
#include "../frames/jpeg_header.h"

namespace robocache::decoders {

class KernelJpeg {
 public:
  explicit KernelJpeg(int64_t device);
  ~KernelJpeg();
  KernelJpeg(const KernelJpeg&) = delete;
  KernelJpeg& operator=(const KernelJpeg&) = delete;

  // Queues the decode of frames[i] for each i of `take`, whose headers
  // `reads[i]` took (refusal() said ""), on `cuda_stream`, into their
  // targets in device memory; the work queued there before it comes first.
  // Then wait() before the next launch. Where it throws, it has waited for
  // what it queued.
  void launch(const std::vector<FrameTarget>& frames, const std::vector<size_t>& take,
              const std::vector<jpeg::HeaderRead>& reads, cudaStream_t cuda_stream);
  // Waits on the host for the frames launched; the first that did not
  // decode (its index in the batch), or none.
  FrameFailure wait();
  // Waits for the frames launched, throwing nothing: for a caller unwinding
  // from another error, before the buffers are reused.
  void settle() noexcept;

 private:
  int64_t device_;
  at::Tensor staging_;    // pinned: the jobs, planes and bytes; the statuses come back here
  at::Tensor workspace_;  // device: the same, the statuses, coefficients and samples
  cudaEvent_t done_ = nullptr;
  std::vector<size_t> launched_;  // the batch's frames, in launch order
  int64_t statuses_at_ = 0;       // where the statuses lie in staging_
};

}  // namespace robocache::decoders
