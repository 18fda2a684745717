// Rows read into a ring of pinned host buffers (RowRing), copied to the
// device buffers that the sampler's CUDA graphs cut them from (RowStaging;
// CUDA builds only): a batch's buffers are copied on a CUDA stream of
// their own once the last cut has read the targets, and a stream (or a CUDA
// graph) that cuts them waits for the copy on the GPU. Only taking a ring
// slot that the GPU still copies from waits on the host.
#pragma once

#if defined(ROBOCACHE_WITH_CUDA)

#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>

#include <optional>
#include <vector>

namespace robocache::io {

class RowStaging : public torch::CustomClassHolder {
 public:
  // targets[k]: the device buffer (uint8, contiguous, all on one GPU) that
  // buffer k of each staged batch is copied into.
  explicit RowStaging(std::vector<at::Tensor> targets);
  ~RowStaging() override;
  RowStaging(const RowStaging&) = delete;
  RowStaging& operator=(const RowStaging&) = delete;

  // Copies the first sizes[k] bytes of sources[k] (contiguous uint8 pinned
  // host tensors, each as large as targets[k]) into targets[k], once the
  // last cut has read them, and records `copied` after the copies (any
  // thread may call it). The sources must stay allocated until `copied` is
  // done (a RowRing's slots do).
  void copy(const std::vector<at::Tensor>& sources, const std::vector<int64_t>& sizes,
            cudaEvent_t copied);

  // The device's current stream waits for the last copy into the targets.
  // Called while a CUDA graph is captured, the wait is the graph's: each
  // launch of it waits for the copy queued last before the launch.
  void await_copy();

  // The device's current stream has queued the cut that reads the targets:
  // the next copy waits for it. Called while a CUDA graph is captured, each
  // launch of the graph marks it.
  void cut();

  c10::DeviceIndex device() const { return device_; }

 private:
  std::vector<at::Tensor> targets_;
  c10::DeviceIndex device_ = 0;
  std::optional<c10::cuda::CUDAStream> copy_stream_;
  cudaEvent_t read_ = nullptr;    // the last cut
  cudaEvent_t copied_ = nullptr;  // the last copy
};

// A ring of pinned slots that batches' rows are read into, slot s holding
// one buffer a finder: each slot is read into again only once the GPU is
// done copying from it (an event a slot, recorded after the copies).
class RowRing : public torch::CustomClassHolder {
 public:
  // slots[s][f]: slot s's buffer of finder f (contiguous uint8 pinned host
  // tensors); `device`: the GPU that copies from them.
  RowRing(std::vector<std::vector<at::Tensor>> slots, int64_t device);
  ~RowRing() override;
  RowRing(const RowRing&) = delete;
  RowRing& operator=(const RowRing&) = delete;

  // Returns once the GPU is done with slot `slot`'s last copies (waiting on
  // the host only where it is not).
  void take(int64_t slot);
  // Whether the GPU is done with slot `slot`'s last copies.
  bool ready(int64_t slot);
  // The work queued on `cuda_stream` (a CUDA stream's handle, as
  // torch.cuda.Stream.cuda_stream; -1: the device's current stream) copies
  // from slot `slot`.
  void used(int64_t slot, int64_t cuda_stream);
  // The first sizes[f] bytes of slot `slot`'s buffers copied into
  // `staging`'s targets (RowStaging::copy); the slot is free once they are.
  void copy(int64_t slot, const c10::intrusive_ptr<RowStaging>& staging,
            const std::vector<int64_t>& sizes);
  // The device's current stream waits for slot `slot`'s last copy.
  void await_copy(int64_t slot);
  // copy(), then await_copy().
  void stage(int64_t slot, const c10::intrusive_ptr<RowStaging>& staging,
             const std::vector<int64_t>& sizes) {
    copy(slot, staging, sizes);
    await_copy(slot);
  }

  c10::DeviceIndex device() const { return device_; }
  int64_t slots() const { return static_cast<int64_t>(slots_.size()); }
  int64_t finders() const { return static_cast<int64_t>(slots_[0].size()); }
  // Slot `slot` (any batch number: taken modulo the slots) and its buffers.
  int64_t slot_of(int64_t batch) const { return batch % slots(); }
  const std::vector<at::Tensor>& buffers(int64_t slot) const {
    return slots_[static_cast<size_t>(slot)];
  }

 private:
  void check_slot(int64_t slot, const char* where) const;

  std::vector<std::vector<at::Tensor>> slots_;
  std::vector<cudaEvent_t> copied_;  // never recorded: done
  c10::DeviceIndex device_ = 0;
};

}  // namespace robocache::io

#endif  // ROBOCACHE_WITH_CUDA
