// Rows read into pinned host memory, copied to the device buffers that the
// sampler's CUDA graphs cut them from: torch.classes.robocache.RowStaging
// (CUDA builds only). One call a batch copies every buffer, with no Python
// object per copy: the copies are queued on a CUDA stream of their own
// once the last cut has read the buffers, and the device's current stream
// waits for them on the GPU. Nothing waits on the host.
#if defined(ROBOCACHE_WITH_CUDA)

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/core/Tensor.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <optional>
#include <vector>

#include "robocache/error.h"

namespace robocache::io {

class RowStaging : public torch::CustomClassHolder {
 public:
  // targets[k]: the device buffer (uint8, contiguous, all on one GPU) that
  // buffer k of each staged batch is copied into.
  explicit RowStaging(std::vector<at::Tensor> targets) : targets_(std::move(targets)) {
    ROBOCACHE_CHECK_VALUE(!targets_.empty(), "RowStaging: targets must not be empty");
    for (size_t k = 0; k < targets_.size(); ++k) {
      const at::Tensor& target = targets_[k];
      ROBOCACHE_CHECK_VALUE(target.is_cuda() && target.device() == targets_[0].device() &&
                                target.scalar_type() == at::kByte && target.is_contiguous(),
                            "RowStaging: targets[", k,
                            "] must be a contiguous uint8 tensor on the GPU of targets[0] (",
                            targets_[0].device(), "); got ", target.scalar_type(), " on ",
                            target.device());
    }
    device_ = targets_[0].device().index();
    c10::cuda::CUDAGuard guard(device_);
    copy_stream_ = c10::cuda::getStreamFromPool(false, device_);
    for (const at::Tensor& target : targets_) {
      // The copies write the targets: their memory is not handed out again
      // before the copies queued when they are freed are done.
      c10::cuda::CUDACachingAllocator::recordStream(target.storage().data_ptr(), *copy_stream_);
    }
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&read_, cudaEventDisableTiming));
    // What the current stream has queued so far (the targets' fill): the
    // first copy must not overtake it.
    cut();
  }

  ~RowStaging() override {
    if (read_ == nullptr) {
      return;
    }
    try {  // at exit the CUDA runtime may be going already
      c10::cuda::CUDAGuard guard(device_);
      C10_CUDA_CHECK_WARN(cudaEventDestroy(read_));  // its resources go once its work is done
    } catch (...) {
    }
  }

  RowStaging(const RowStaging&) = delete;
  RowStaging& operator=(const RowStaging&) = delete;

  // Copies the first sizes[k] bytes of sources[k] (contiguous uint8 pinned
  // host tensors) into targets[k], once the last cut has read them; records
  // `copied` (a CUDA event's handle, as torch.cuda.Event.cuda_event) after
  // the copies, and makes the device's current stream wait for it.
  void stage(const std::vector<at::Tensor>& sources, const std::vector<int64_t>& sizes,
             int64_t copied) {
    ROBOCACHE_CHECK_VALUE(sources.size() == targets_.size() && sizes.size() == targets_.size(),
                          "RowStaging.stage: sources and sizes must have one entry a target (",
                          targets_.size(), "); got ", sources.size(), " and ", sizes.size());
    ROBOCACHE_CHECK_VALUE(copied != 0, "RowStaging.stage: copied must be a created CUDA event");
    for (size_t k = 0; k < sources.size(); ++k) {
      const at::Tensor& source = sources[k];
      ROBOCACHE_CHECK_VALUE(
          source.is_cpu() && source.scalar_type() == at::kByte && source.is_contiguous(),
          "RowStaging.stage: sources[", k, "] must be a contiguous uint8 host tensor; got ",
          source.scalar_type(), " on ", source.device());
      ROBOCACHE_CHECK_VALUE(source.numel() == targets_[k].numel(), "RowStaging.stage: sources[", k,
                            "] must be laid out as targets[", k, "] (", targets_[k].numel(),
                            " bytes); got ", source.numel(), " bytes");
      ROBOCACHE_CHECK_VALUE(sizes[k] >= 0 && sizes[k] <= source.numel(), "RowStaging.stage: sizes[",
                            k, "] must be within 0..", source.numel(), "; got ", sizes[k]);
    }
    c10::cuda::CUDAGuard guard(device_);
    const cudaStream_t copy = copy_stream_->stream();
    C10_CUDA_CHECK(cudaStreamWaitEvent(copy, read_, 0));
    for (size_t k = 0; k < sources.size(); ++k) {
      if (sizes[k] == 0) {
        continue;
      }
      const at::Tensor& source = sources[k];
      C10_CUDA_CHECK(cudaMemcpyAsync(targets_[k].data_ptr(), source.data_ptr(),
                                     static_cast<size_t>(sizes[k]), cudaMemcpyHostToDevice, copy));
      // Pinned memory from torch's allocator is handed out again only once
      // this copy is done, should the caller let it go first.
      const c10::DataPtr& block = source.storage().data_ptr();
      at::getHostAllocator(at::kCUDA)->record_event(block.get(), block.get_context(),
                                                    copy_stream_->unwrap());
    }
    const auto event = reinterpret_cast<cudaEvent_t>(copied);
    C10_CUDA_CHECK(cudaEventRecord(event, copy));
    C10_CUDA_CHECK(
        cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(), event, 0));
  }

  // The device's current stream has queued the cut that reads the targets:
  // the next copy waits for it.
  void cut() {
    c10::cuda::CUDAGuard guard(device_);
    C10_CUDA_CHECK(cudaEventRecord(read_, c10::cuda::getCurrentCUDAStream(device_).stream()));
  }

 private:
  std::vector<at::Tensor> targets_;
  c10::DeviceIndex device_ = 0;
  std::optional<c10::cuda::CUDAStream> copy_stream_;
  cudaEvent_t read_ = nullptr;
};

}  // namespace robocache::io

TORCH_LIBRARY_FRAGMENT(robocache, m) {
  using robocache::io::RowStaging;
  m.class_<RowStaging>("RowStaging")
      .def(torch::init<std::vector<at::Tensor>>())
      .def("stage", &RowStaging::stage)
      .def("cut", &RowStaging::cut);
}

#endif  // ROBOCACHE_WITH_CUDA
