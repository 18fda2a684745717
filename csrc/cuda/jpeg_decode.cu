// The launches of robocache's CUDA JPEG decode (jpeg_kernels.cuh) for a
// batch laid out by the host (robocache/jpeg_batch.h), each checked, on the
// caller's CUDA stream; the caller holds a device guard.
#include <c10/cuda/CUDAException.h>

#include <algorithm>
#include <mutex>
#include <set>

#include "jpeg_kernels.cuh"
#include "launch.cuh"

namespace robocache::jpeg {
namespace {

// The scans' blocks stay on their SMs for a frame's whole entropy decode.
// An SM set up for little shared memory (the most L1) must drain before it
// takes a block that needs much, as a training step's matrix and
// convolution kernels do; so the scans ask for the most shared memory
// too, and such blocks can run beside them. Once a device.
void prefer_shared_memory() {
  static std::mutex mutex;
  static std::set<int> devices;
  int device = 0;
  C10_CUDA_CHECK(cudaGetDevice(&device));
  std::lock_guard<std::mutex> lock(mutex);
  if (devices.insert(device).second) {
    C10_CUDA_CHECK(cudaFuncSetAttribute(decode_scans,
                                        cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
  }
}

}  // namespace

void launch_decode(const KernelBatch& batch, cudaStream_t cuda_stream) {
  if (batch.frames == 0) {
    return;
  }
  constexpr const char* kWhere = "robocache's JPEG decoder";
  prefer_shared_memory();
  decode_scans<<<batch.frames, kWarp, 0, cuda_stream>>>(batch.jobs, batch.planes, batch.bytes,
                                                        batch.coefficients, batch.statuses);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  inverse_dcts<<<grid_blocks(batch.blocks, 128, kWhere, "blocks", batch.blocks), 128, 0,
                 cuda_stream>>>(batch.planes, batch.plane_count, batch.blocks, batch.coefficients,
                                batch.samples, batch.statuses);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // A grid row a frame, at most 65535 rows a launch.
  constexpr int32_t kFramesPerLaunch = 65535;
  const unsigned int columns =
      grid_blocks(batch.largest, kThreads, kWhere, "pixels", batch.largest);
  for (int32_t first = 0; first < batch.frames; first += kFramesPerLaunch) {
    const int32_t frames = std::min(kFramesPerLaunch, batch.frames - first);
    write_pixels<<<dim3(columns, static_cast<unsigned int>(frames)), kThreads, 0, cuda_stream>>>(
        batch.jobs + first, batch.planes, batch.samples);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace robocache::jpeg
