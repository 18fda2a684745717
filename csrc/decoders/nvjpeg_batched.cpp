#include "nvjpeg_batched.h"

#include <c10/cuda/CUDAGuard.h>
#include <dlfcn.h>

#include <robocache/error.h>

#include "frame_decoder.h"

namespace robocache::decoders {
namespace {

// nvJPEG's values (nvjpeg.h, CUDA 12 and 13).
constexpr int kStatusSuccess = 0;
constexpr int kBackendGpuHybrid = 2;
constexpr int kBackendHardware = 3;
constexpr unsigned kFlagsUpsamplingWithInterpolation = 1u << 5;
constexpr int kOutputY = 2;
constexpr int kOutputRgbInterleaved = 5;
constexpr int kMaxComponents = 4;
// Batches are padded to a multiple of this (repeating their first frame),
// so that the batch size a state is initialized for changes seldom.
constexpr int kBatchGrain = 64;

template <typename F>
void resolve(void* library, const char* name, F& out, const std::string& path) {
  out = reinterpret_cast<F>(dlsym(library, name));
  ROBOCACHE_CHECK(out != nullptr, "robocache: ", path, " has no ", name);
}

}  // namespace

BatchedJpeg::BatchedJpeg(const std::string& path, int64_t device, bool hardware) {
  void* library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    ROBOCACHE_CHECK(false, "robocache: cannot load nvJPEG from ", path, ": ",
                    why ? why : "unknown error");
  }
  // The library stays loaded for the life of the process.
  resolve(library, "nvjpegCreateEx", create_, path);
  resolve(library, "nvjpegDestroy", destroy_, path);
  resolve(library, "nvjpegJpegStateCreate", state_create_, path);
  resolve(library, "nvjpegJpegStateDestroy", state_destroy_, path);
  resolve(library, "nvjpegGetImageInfo", image_info_, path);
  resolve(library, "nvjpegDecodeBatchedInitialize", initialize_, path);
  resolve(library, "nvjpegDecodeBatched", decode_, path);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  int status = create_(hardware ? kBackendHardware : kBackendGpuHybrid, nullptr, nullptr,
                       kFlagsUpsamplingWithInterpolation, &handle_);
  ROBOCACHE_CHECK(status == kStatusSuccess, "robocache: nvJPEG's handle was not made (status ",
                  status, ")");
  for (auto& state : states_) {
    status = state_create_(handle_, &state);
    if (status != kStatusSuccess) {
      release();
      ROBOCACHE_CHECK(false, "robocache: nvJPEG's state was not made (status ", status, ")");
    }
  }
}

BatchedJpeg::~BatchedJpeg() {
  release();
}

void BatchedJpeg::release() {
  for (auto& state : states_) {
    if (state != nullptr) {
      state_destroy_(state);
      state = nullptr;
    }
  }
  if (handle_ != nullptr) {
    destroy_(handle_);
    handle_ = nullptr;
  }
}

bool BatchedJpeg::header(const FrameTarget& frame, JpegHeader* found) {
  int components = 0, subsampling = 0;
  int widths[kMaxComponents] = {0}, heights[kMaxComponents] = {0};
  if (image_info_(handle_, frame.data, frame.size, &components, &subsampling, widths, heights) !=
      kStatusSuccess) {
    return false;
  }
  *found = {components, heights[0], widths[0]};
  return true;
}

bool BatchedJpeg::decode(const std::vector<const FrameTarget*>& frames, int64_t channels,
                         cudaStream_t cuda_stream) {
  if (frames.empty()) {
    return true;
  }
  const int which = channels == 1 ? 0 : 1;
  const int n = static_cast<int>(frames.size());
  const int padded = (n + kBatchGrain - 1) / kBatchGrain * kBatchGrain;
  data_.resize(padded);
  lengths_.resize(padded);
  images_.assign(padded, Image{});
  for (int i = 0; i < padded; ++i) {
    // The padding writes the first frame's pixels again, into its own output.
    const FrameTarget& frame = *frames[i < n ? i : 0];
    data_[i] = frame.data;
    lengths_[i] = frame.size;
    images_[i].channel[0] = frame.out;
    images_[i].pitch[0] = static_cast<size_t>(frame.width * frame.channels);
  }
  if (batch_[which] != padded) {
    int status = initialize_(handle_, states_[which], padded, 1,
                             channels == 1 ? kOutputY : kOutputRgbInterleaved);
    if (status != kStatusSuccess) {
      batch_[which] = 0;
      return false;
    }
    batch_[which] = padded;
  }
  int status =
      decode_(handle_, states_[which], data_.data(), lengths_.data(), images_.data(), cuda_stream);
  if (status != kStatusSuccess) {
    batch_[which] = 0;  // a failed batch is reset by initializing again
    return false;
  }
  return true;
}

}  // namespace robocache::decoders
