#include "kernel_jpeg.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <robocache/error.h>
#include <robocache/jpeg_batch.h>

#include <algorithm>
#include <cstring>

#include "../frames/host_jpeg.h"

namespace robocache::decoders {
namespace {

constexpr int64_t kAlign = 256;

int64_t aligned(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

// A buffer of at least `bytes`: `buffer` kept where it is large enough,
// else a new one half again as large (the old one's work is done: wait()).
void reserve(at::Tensor& buffer, int64_t bytes, const at::TensorOptions& options) {
  if (!buffer.defined() || buffer.numel() < bytes) {
    buffer = at::empty({bytes + bytes / 2}, options);
  }
}

}  // namespace

KernelJpeg::KernelJpeg(int64_t device) : device_(device) {
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  // Waited for by blocking: a spinning wait would take a core the training
  // loop's threads may share.
  C10_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming | cudaEventBlockingSync));
}

KernelJpeg::~KernelJpeg() {
  if (done_ != nullptr) {
    if (!launched_.empty()) {
      cudaEventSynchronize(done_);  // the buffers are in use until then
    }
    cudaEventDestroy(done_);
  }
}

void KernelJpeg::launch(const std::vector<FrameTarget>& frames, const std::vector<size_t>& take,
                        const std::vector<jpeg::HeaderRead>& reads, cudaStream_t cuda_stream) {
  using jpeg::FrameJob;
  using jpeg::Plane;
  ROBOCACHE_CHECK(launched_.empty(), "KernelJpeg: a batch launched was not waited for");
  if (take.empty()) {
    return;
  }
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  const int64_t n = static_cast<int64_t>(take.size());
  int64_t plane_count = 0, byte_count = 0, blocks = 0, largest = 0;
  for (size_t i : take) {
    const jpeg::FrameLayout& layout = reads[i].layout;
    plane_count += layout.components;
    byte_count += static_cast<int64_t>(frames[i].size);
    for (int c = 0; c < layout.components; ++c) {
      blocks += int64_t{layout.component[c].blocks_x} * layout.component[c].blocks_y;
    }
    largest = std::max(largest, int64_t{layout.width} * layout.height);
  }
  // Staged and copied in one call: the jobs, the planes, the bytes.
  const int64_t planes_at = aligned(n * static_cast<int64_t>(sizeof(FrameJob)));
  const int64_t bytes_at = planes_at + aligned(plane_count * static_cast<int64_t>(sizeof(Plane)));
  const int64_t staged = aligned(bytes_at + byte_count);
  statuses_at_ = staged;
  const int64_t coefficients_at = staged + aligned(n * 4);
  const int64_t samples_at = coefficients_at + aligned(blocks * 64 * 2);
  reserve(staging_, staged + aligned(n * 4),
          at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  {
    // The device memory is the work stream's in torch's allocator (the
    // thread's current stream may be another's), so it is handed to no
    // other stream while this one's work may still use it.
    c10::cuda::CUDAStreamGuard on_stream(
        c10::cuda::getStreamFromExternal(cuda_stream, static_cast<c10::DeviceIndex>(device_)));
    reserve(workspace_, samples_at + blocks * 64,
            at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device_));
  }
  uint8_t* host = staging_.data_ptr<uint8_t>();
  uint8_t* device = workspace_.data_ptr<uint8_t>();
  auto* jobs = reinterpret_cast<FrameJob*>(host);
  auto* planes = reinterpret_cast<Plane*>(host + planes_at);
  int64_t plane = 0, byte = 0, block = 0;
  for (int64_t j = 0; j < n; ++j) {
    const size_t i = take[static_cast<size_t>(j)];
    const jpeg::HeaderRead& read = reads[i];
    const FrameTarget& frame = frames[i];
    FrameJob& job = jobs[j];
    job.layout = read.layout;
    job.bytes = byte;
    job.size = static_cast<int64_t>(frame.size);
    job.out = frame.out;
    job.channels = static_cast<int32_t>(frame.channels);
    job.plane = static_cast<int32_t>(plane);
    std::memcpy(host + bytes_at + byte, frame.data, frame.size);
    byte += job.size;
    for (int c = 0; c < read.layout.components; ++c, ++plane) {
      const jpeg::Component& component = read.layout.component[c];
      Plane& p = planes[plane];
      p.frame = static_cast<int32_t>(j);
      p.coefficients = block * 64;
      p.samples = block * 64;
      p.first_block = block;
      p.blocks_x = component.blocks_x;
      p.blocks_y = component.blocks_y;
      std::memcpy(p.quant, read.quant[c], sizeof(p.quant));
      block += int64_t{component.blocks_x} * component.blocks_y;
    }
  }
  // From the first call queued on, the batch counts as launched: wait() or
  // settle() then waits for what was queued before the buffers are reused.
  launched_ = take;
  try {
    C10_CUDA_CHECK(cudaMemcpyAsync(device, host, static_cast<size_t>(bytes_at + byte_count),
                                   cudaMemcpyHostToDevice, cuda_stream));
    C10_CUDA_CHECK(cudaMemsetAsync(device + coefficients_at, 0, static_cast<size_t>(blocks * 128),
                                   cuda_stream));
    jpeg::KernelBatch batch{reinterpret_cast<const FrameJob*>(device),
                            static_cast<int32_t>(n),
                            largest,
                            reinterpret_cast<const Plane*>(device + planes_at),
                            static_cast<int32_t>(plane_count),
                            blocks,
                            device + bytes_at,
                            reinterpret_cast<int16_t*>(device + coefficients_at),
                            device + samples_at,
                            reinterpret_cast<int32_t*>(device + staged)};
    jpeg::launch_decode(batch, cuda_stream);
    C10_CUDA_CHECK(cudaMemcpyAsync(host + staged, device + staged, static_cast<size_t>(n * 4),
                                   cudaMemcpyDeviceToHost, cuda_stream));
    C10_CUDA_CHECK(cudaEventRecord(done_, cuda_stream));
  } catch (...) {
    cudaEventRecord(done_, cuda_stream);  // best effort: the first error is the one thrown
    settle();
    throw;
  }
}

void KernelJpeg::settle() noexcept {
  if (!launched_.empty()) {
    cudaEventSynchronize(done_);  // its error is not the one thrown
    launched_.clear();
  }
}

FrameFailure KernelJpeg::wait() {
  if (launched_.empty()) {
    return {};
  }
  const cudaError_t waited = cudaEventSynchronize(done_);
  std::vector<size_t> launched;
  launched.swap(launched_);
  C10_CUDA_CHECK(waited);
  const auto* statuses =
      reinterpret_cast<const int32_t*>(staging_.data_ptr<uint8_t>() + statuses_at_);
  FrameFailure first;
  for (size_t j = 0; j < launched.size(); ++j) {
    if (statuses[j] != jpeg::kDecoded &&
        (first.index < 0 || static_cast<int64_t>(launched[j]) < first.index)) {
      first = {static_cast<int64_t>(launched[j]), scan_failure(statuses[j])};
    }
  }
  return first;
}

}  // namespace robocache::decoders
