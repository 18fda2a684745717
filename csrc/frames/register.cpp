// torch.classes.robocache.JpegDecoder: robocache's own JPEG decoder, with
// no library of another's. decode() writes frames into host memory with
// the host's steps (every build), or into device memory with the CUDA
// kernels (CUDA builds); both give the same pixels, libjpeg-turbo's.
#include <ATen/Parallel.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <robocache/error.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "frame_targets.h"
#include "host_jpeg.h"
#include "jpeg_header.h"

#if defined(ROBOCACHE_WITH_CUDA)
#include <c10/cuda/CUDAStream.h>

#include "../decoders/kernel_jpeg.h"
#endif

namespace robocache::decoders {
namespace {

constexpr const char* kWhere = "JpegDecoder.decode";

class JpegDecoder : public torch::CustomClassHolder {
 public:
  // Frames `rows` of a stream's bytes (values, byte_offsets: host memory)
  // decoded into out (N, H, W, C) uint8, C of 1 or 3, in host memory or
  // (CUDA builds) device memory, there ordered on the current CUDA stream
  // with the host waiting for the frames' outcomes. Returns (-1, "") or the
  // first frame that did not decode and why.
  std::tuple<int64_t, std::string> decode(at::Tensor values, at::Tensor byte_offsets,
                                          at::Tensor rows, at::Tensor out) {
    std::vector<FrameTarget> targets = frame_targets(values, byte_offsets, rows, out, kWhere);
    if (out.is_cpu()) {
      return on_host(targets);
    }
#if defined(ROBOCACHE_WITH_CUDA)
    ROBOCACHE_CHECK_VALUE(out.is_cuda(), kWhere, ": out must be in host or CUDA memory; got ",
                          out.device());
    return on_gpu(targets, out.get_device());
#else
    ROBOCACHE_CHECK_VALUE(false, kWhere, ": out must be in host memory (this build of robocache ",
                          "has no CUDA kernels); got ", out.device());
    return {};
#endif
  }

 private:
  static std::tuple<int64_t, std::string> on_host(const std::vector<FrameTarget>& targets) {
    std::vector<std::string> why(targets.size());
    at::parallel_for(0, static_cast<int64_t>(targets.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        why[static_cast<size_t>(i)] = decode_on_host(targets[static_cast<size_t>(i)]);
      }
    });
    for (size_t i = 0; i < why.size(); ++i) {
      if (!why[i].empty()) {
        return {static_cast<int64_t>(i), why[i]};
      }
    }
    return {-1, ""};
  }

#if defined(ROBOCACHE_WITH_CUDA)
  std::tuple<int64_t, std::string> on_gpu(const std::vector<FrameTarget>& targets, int64_t device) {
    std::vector<jpeg::HeaderRead> reads(targets.size());
    std::vector<size_t> take;
    for (size_t i = 0; i < targets.size(); ++i) {
      jpeg::read_header(targets[i].data, static_cast<int64_t>(targets[i].size), reads[i]);
      std::string refused = refusal(reads[i], targets[i]);
      if (!refused.empty()) {
        return {static_cast<int64_t>(i), refused};
      }
      take.push_back(i);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    auto& kernels = kernels_[device];
    if (!kernels) {
      kernels = std::make_unique<KernelJpeg>(device);
    }
    auto cuda_stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device));
    kernels->launch(targets, take, reads, cuda_stream.stream());
    FrameFailure failure = kernels->wait();
    return {failure.index, failure.why};
  }

  std::mutex mutex_;  // one batch at a time a decoder: its buffers are reused
  std::map<int64_t, std::unique_ptr<KernelJpeg>> kernels_;
#endif
};

}  // namespace
}  // namespace robocache::decoders

TORCH_LIBRARY_FRAGMENT(robocache, m) {
  m.class_<robocache::decoders::JpegDecoder>("JpegDecoder")
      .def(torch::init<>())
      .def("decode", &robocache::decoders::JpegDecoder::decode);
}
