// The copies of mapped rows from pinned host memory to the device buffers
// that the sampler's CUDA graphs cut them from, and the ring of pinned slots
// they are read into: torch.classes.robocache.RowStaging and RowRing (CUDA
// builds only).
#if defined(ROBOCACHE_WITH_CUDA)

#include "row_staging.h"

#include "register.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "robocache/error.h"

namespace robocache::io {

namespace {

// Destroys `event` quietly: at exit the CUDA runtime may be going already.
void destroy_event(c10::DeviceIndex device, cudaEvent_t event) noexcept {
  try {
    c10::cuda::CUDAGuard guard(device);
    C10_CUDA_CHECK_WARN(cudaEventDestroy(event));  // its resources go once its work is done
  } catch (...) {
  }
}

// Whether `stream` is being captured into a CUDA graph.
bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

RowStaging::RowStaging(std::vector<at::Tensor> targets) : targets_(std::move(targets)) {
  ROBOCACHE_CHECK_VALUE(!targets_.empty(), "RowStaging: targets must not be empty");
  for (size_t k = 0; k < targets_.size(); ++k) {
    const at::Tensor& target = targets_[k];
    ROBOCACHE_CHECK_VALUE(
        target.is_cuda() && target.device() == targets_[0].device() &&
            target.scalar_type() == at::kByte && target.is_contiguous(),
        "RowStaging: targets[", k, "] must be a contiguous uint8 tensor on the GPU of targets[0] (",
        targets_[0].device(), "); got ", target.scalar_type(), " on ", target.device());
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
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming));
  // What the current stream has queued so far (the targets' fill): the
  // first copy must not overtake it.
  cut();
}

RowStaging::~RowStaging() {
  for (cudaEvent_t event : {read_, copied_}) {
    if (event != nullptr) {
      destroy_event(device_, event);
    }
  }
}

void RowStaging::copy(const std::vector<at::Tensor>& sources, const std::vector<int64_t>& sizes,
                      cudaEvent_t copied) {
  ROBOCACHE_CHECK_VALUE(sources.size() == targets_.size() && sizes.size() == targets_.size(),
                        "RowStaging.copy: sources and sizes must have one entry a target (",
                        targets_.size(), "); got ", sources.size(), " and ", sizes.size());
  for (size_t k = 0; k < sources.size(); ++k) {
    const at::Tensor& source = sources[k];
    ROBOCACHE_CHECK_VALUE(
        source.is_cpu() && source.scalar_type() == at::kByte && source.is_contiguous(),
        "RowStaging.copy: sources[", k, "] must be a contiguous uint8 host tensor; got ",
        source.scalar_type(), " on ", source.device());
    ROBOCACHE_CHECK_VALUE(source.numel() == targets_[k].numel(), "RowStaging.copy: sources[", k,
                          "] must be laid out as targets[", k, "] (", targets_[k].numel(),
                          " bytes); got ", source.numel(), " bytes");
    ROBOCACHE_CHECK_VALUE(sizes[k] >= 0 && sizes[k] <= source.numel(), "RowStaging.copy: sizes[", k,
                          "] must be within 0..", source.numel(), "; got ", sizes[k]);
  }
  c10::cuda::CUDAGuard guard(device_);
  const cudaStream_t side = copy_stream_->stream();
  C10_CUDA_CHECK(cudaStreamWaitEvent(side, read_, 0));
  for (size_t k = 0; k < sources.size(); ++k) {
    if (sizes[k] == 0) {
      continue;
    }
    C10_CUDA_CHECK(cudaMemcpyAsync(targets_[k].data_ptr(), sources[k].data_ptr(),
                                   static_cast<size_t>(sizes[k]), cudaMemcpyHostToDevice, side));
  }
  C10_CUDA_CHECK(cudaEventRecord(copied, side));
  C10_CUDA_CHECK(cudaEventRecord(copied_, side));
}

void RowStaging::await_copy() {
  c10::cuda::CUDAGuard guard(device_);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
  C10_CUDA_CHECK(
      cudaStreamWaitEvent(stream, copied_, capturing(stream) ? cudaEventWaitExternal : 0));
}

void RowStaging::cut() {
  c10::cuda::CUDAGuard guard(device_);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_).stream();
  C10_CUDA_CHECK(
      cudaEventRecordWithFlags(read_, stream, capturing(stream) ? cudaEventRecordExternal : 0));
}

RowRing::RowRing(std::vector<std::vector<at::Tensor>> slots, int64_t device)
    : slots_(std::move(slots)) {
  ROBOCACHE_CHECK_VALUE(!slots_.empty() && !slots_[0].empty(),
                        "RowRing: slots must hold at least one slot of one buffer");
  for (size_t s = 0; s < slots_.size(); ++s) {
    ROBOCACHE_CHECK_VALUE(slots_[s].size() == slots_[0].size(), "RowRing: slot ", s, " holds ",
                          slots_[s].size(), " buffers, slot 0 ", slots_[0].size());
    for (size_t f = 0; f < slots_[s].size(); ++f) {
      const at::Tensor& buffer = slots_[s][f];
      ROBOCACHE_CHECK_VALUE(buffer.is_cpu() && buffer.is_pinned() &&
                                buffer.scalar_type() == at::kByte && buffer.is_contiguous(),
                            "RowRing: slots[", s, "][", f,
                            "] must be a contiguous uint8 pinned host tensor");
    }
  }
  ROBOCACHE_CHECK_VALUE(device >= 0 && device < c10::cuda::device_count(),
                        "RowRing: device must be a GPU's index; got ", device);
  device_ = static_cast<c10::DeviceIndex>(device);
  c10::cuda::CUDAGuard guard(device_);
  copied_.reserve(slots_.size());
  for (size_t s = 0; s < slots_.size(); ++s) {
    cudaEvent_t event = nullptr;
    C10_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    copied_.push_back(event);
  }
}

RowRing::~RowRing() {
  // The slots' memory goes back to torch's pinned allocator once this ring
  // lets it go: not before the copies from it are done.
  for (cudaEvent_t event : copied_) {
    try {
      c10::cuda::CUDAGuard guard(device_);
      C10_CUDA_CHECK_WARN(cudaEventSynchronize(event));
    } catch (...) {
    }
    destroy_event(device_, event);
  }
}

void RowRing::check_slot(int64_t slot, const char* where) const {
  ROBOCACHE_CHECK_VALUE(slot >= 0 && slot < slots(), where, ": slot must be in 0..", slots() - 1,
                        "; got ", slot);
}

void RowRing::take(int64_t slot) {
  check_slot(slot, "RowRing.take");
  if (!ready(slot)) {
    c10::cuda::CUDAGuard guard(device_);
    C10_CUDA_CHECK(cudaEventSynchronize(copied_[static_cast<size_t>(slot)]));
  }
}

bool RowRing::ready(int64_t slot) {
  check_slot(slot, "RowRing.ready");
  c10::cuda::CUDAGuard guard(device_);
  const cudaError_t state = cudaEventQuery(copied_[static_cast<size_t>(slot)]);
  if (state == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not ready is no error: clear it
    return false;
  }
  C10_CUDA_CHECK(state);
  return true;
}

void RowRing::used(int64_t slot, int64_t cuda_stream) {
  check_slot(slot, "RowRing.used");
  c10::cuda::CUDAGuard guard(device_);
  const cudaStream_t stream = cuda_stream == -1 ? c10::cuda::getCurrentCUDAStream(device_).stream()
                                                : reinterpret_cast<cudaStream_t>(cuda_stream);
  C10_CUDA_CHECK(cudaEventRecord(copied_[static_cast<size_t>(slot)], stream));
}

void RowRing::copy(int64_t slot, const c10::intrusive_ptr<RowStaging>& staging,
                   const std::vector<int64_t>& sizes) {
  check_slot(slot, "RowRing.copy");
  ROBOCACHE_CHECK_VALUE(staging->device() == device_, "RowRing.copy: staging copies to GPU ",
                        staging->device(), ", the ring's slots are for GPU ", device_);
  staging->copy(slots_[static_cast<size_t>(slot)], sizes, copied_[static_cast<size_t>(slot)]);
}

void RowRing::await_copy(int64_t slot) {
  check_slot(slot, "RowRing.await_copy");
  c10::cuda::CUDAGuard guard(device_);
  C10_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                     copied_[static_cast<size_t>(slot)], 0));
}

void register_row_staging(torch::Library& m) {
  m.class_<RowStaging>("RowStaging")
      .def(torch::init<std::vector<at::Tensor>>())
      .def("await_copy", &RowStaging::await_copy)
      .def("cut", &RowStaging::cut);
  m.class_<RowRing>("RowRing")
      .def(torch::init<std::vector<std::vector<at::Tensor>>, int64_t>())
      .def("take", &RowRing::take)
      .def("ready", &RowRing::ready)
      .def("used", &RowRing::used)
      .def("copy", &RowRing::copy)
      .def("stage", &RowRing::stage);
}

}  // namespace robocache::io

#endif  // ROBOCACHE_WITH_CUDA
