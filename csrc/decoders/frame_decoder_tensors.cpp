// FrameDecoder's face to torch: a stream's encoded bytes and the rows to
// decode, checked and turned into the frames' targets.
#include <c10/cuda/CUDAStream.h>

#include <robocache/error.h>

#include "frame_decoder.h"

namespace robocache::decoders {

std::tuple<int64_t, std::string> FrameDecoder::decode(at::Tensor values, at::Tensor byte_offsets,
                                                      at::Tensor rows, at::Tensor out) {
  ROBOCACHE_CHECK_VALUE(out.is_cuda() && out.get_device() == device_,
                        "FrameDecoder.decode: out must be on cuda:", device_, "; got ",
                        out.device());
  std::vector<FrameTarget> targets =
      frame_targets(values, byte_offsets, rows, out, "FrameDecoder.decode");
  auto cuda_stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  FrameFailure failure = run(targets, cuda_stream.stream());
  return {failure.index, failure.why};
}

}  // namespace robocache::decoders
