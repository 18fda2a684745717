// FrameDecoder's side of nvImageCodec: its decoders, each frame's handles,
// and the parts of a batch decoded in one call of one decoder.
#include <robocache/error.h>

#include "frame_decoder.h"

namespace robocache::decoders {
namespace {

// The output image of one frame: interleaved RGB or grey uint8, pitch-linear
// in device memory (its target), or in host memory at `host`.
nvimgcodecImageInfo_t output_info(const FrameTarget& frame, cudaStream_t cuda_stream,
                                  uint8_t* host) {
  auto info = described<nvimgcodecImageInfo_t>(NVIMGCODEC_STRUCTURE_TYPE_IMAGE_INFO);
  bool grey = frame.channels == 1;
  info.color_spec = grey ? NVIMGCODEC_COLORSPEC_GRAY : NVIMGCODEC_COLORSPEC_SRGB;
  info.chroma_subsampling = grey ? NVIMGCODEC_SAMPLING_GRAY : NVIMGCODEC_SAMPLING_444;
  info.sample_format = grey ? NVIMGCODEC_SAMPLEFORMAT_I_Y : NVIMGCODEC_SAMPLEFORMAT_I_RGB;
  info.orientation = described<nvimgcodecOrientation_t>(NVIMGCODEC_STRUCTURE_TYPE_ORIENTATION);
  info.num_planes = 1;
  auto& plane = info.plane_info[0];
  plane = described<nvimgcodecImagePlaneInfo_t>(NVIMGCODEC_STRUCTURE_TYPE_IMAGE_PLANE_INFO);
  plane.width = static_cast<uint32_t>(frame.width);
  plane.height = static_cast<uint32_t>(frame.height);
  plane.num_channels = static_cast<uint32_t>(frame.channels);
  plane.row_stride = static_cast<size_t>(frame.width * frame.channels);
  plane.sample_type = NVIMGCODEC_SAMPLE_DATA_TYPE_UINT8;
  plane.precision = 0;
  info.buffer = host != nullptr ? host : frame.out;
  info.buffer_kind = host != nullptr ? NVIMGCODEC_IMAGE_BUFFER_KIND_STRIDED_HOST
                                     : NVIMGCODEC_IMAGE_BUFFER_KIND_STRIDED_DEVICE;
  info.cuda_stream = cuda_stream;
  return info;
}

}  // namespace

nvimgcodecDecoder_t FrameDecoder::make_decoder(nvimgcodecBackendKind_t kind,
                                               const std::string& options) {
  // One backend, no fallback: nvImageCodec then hands it every frame of a
  // call (with a fallback, it fixes the first backend's share of a batch
  // at the first call, and later, larger batches spill over).
  auto backend = described<nvimgcodecBackend_t>(NVIMGCODEC_STRUCTURE_TYPE_BACKEND);
  backend.kind = kind;
  backend.params = described<nvimgcodecBackendParams_t>(NVIMGCODEC_STRUCTURE_TYPE_BACKEND_PARAMS);
  backend.params.load_hint = 1.0f;
  backend.params.load_hint_policy = NVIMGCODEC_LOAD_HINT_POLICY_FIXED;
  std::vector<nvimgcodecBackend_t> backends{backend};
  auto exec = described<nvimgcodecExecutionParams_t>(NVIMGCODEC_STRUCTURE_TYPE_EXECUTION_PARAMS);
  // The host's decoder touches no device: nvImageCodec then queues no work
  // of its own on the frames' CUDA stream.
  exec.device_id = kind == NVIMGCODEC_BACKEND_KIND_CPU_ONLY ? NVIMGCODEC_DEVICE_CPU_ONLY
                                                            : static_cast<int>(device_);
  exec.max_num_cpu_threads = static_cast<int>(cpu_threads_);
  exec.pre_init = 1;
  exec.num_backends = static_cast<int>(backends.size());
  exec.backends = backends.data();
  nvimgcodecDecoder_t decoder = nullptr;
  check_status(
      api_.DecoderCreate(instance_, &decoder, &exec, options.empty() ? nullptr : options.c_str()),
      "decoder creation");
  return decoder;
}

nvimgcodecStatus_t FrameDecoder::submit_parts(std::vector<Part>& parts) {
  auto params = described<nvimgcodecDecodeParams_t>(NVIMGCODEC_STRUCTURE_TYPE_DECODE_PARAMS);
  params.apply_exif_orientation = 0;  // the pixels as stored, as the host decoders give them
  for (auto& part : parts) {          // every part submitted before any is waited for
    auto submitted =
        api_.DecoderDecode(part.decoder, part.code_streams.data(), part.images.data(),
                           static_cast<int>(part.frames.size()), &params, &part.future);
    if (submitted != NVIMGCODEC_STATUS_SUCCESS) {
      return submitted;
    }
  }
  return NVIMGCODEC_STATUS_SUCCESS;
}

nvimgcodecStatus_t FrameDecoder::wait_parts(std::vector<Part>& parts) {
  nvimgcodecStatus_t waited = NVIMGCODEC_STATUS_SUCCESS;
  for (auto& part : parts) {
    if (part.future == nullptr) {
      continue;
    }
    auto w = api_.FutureWaitForAll(part.future);
    std::vector<nvimgcodecProcessingStatus_t> found(part.frames.size(),
                                                    NVIMGCODEC_PROCESSING_STATUS_UNKNOWN);
    size_t reported = found.size();
    auto got = api_.FutureGetProcessingStatus(part.future, found.data(), &reported);
    api_.FutureDestroy(part.future);
    part.future = nullptr;
    if (w != NVIMGCODEC_STATUS_SUCCESS) {
      waited = w;
    } else if (got != NVIMGCODEC_STATUS_SUCCESS) {
      waited = got;
    }
    for (size_t j = 0; j < part.frames.size() && j < reported; ++j) {
      statuses_[part.frames[j]] = found[j];
    }
  }
  return waited;
}

void FrameDecoder::decode_parts(std::vector<Part>& parts) {
  auto submitted = submit_parts(parts);
  auto waited = wait_parts(parts);
  check_status(submitted, "decode");
  check_status(waited, "wait for a decode");
}

FrameFailure FrameDecoder::prepare(size_t i, const FrameTarget& frame, cudaStream_t cuda_stream,
                                   uint8_t* host) {
  // Handles are re-pointed in place (fewer objects made and destroyed).
  auto status = api_.CodeStreamCreateFromHostMem(instance_, &code_streams_[i], frame.data,
                                                 frame.size, nullptr);
  if (status != NVIMGCODEC_STATUS_SUCCESS) {
    return {static_cast<int64_t>(i),
            message("not an image nvImageCodec reads (", status_name(status), ")")};
  }
  auto found = described<nvimgcodecImageInfo_t>(NVIMGCODEC_STRUCTURE_TYPE_IMAGE_INFO);
  status = api_.CodeStreamGetImageInfo(code_streams_[i], &found);
  if (status != NVIMGCODEC_STATUS_SUCCESS) {
    return {static_cast<int64_t>(i),
            message("its header does not parse (", status_name(status), ")")};
  }
  if (found.plane_info[0].height != frame.height || found.plane_info[0].width != frame.width) {
    return {static_cast<int64_t>(i),
            wrong_size(found.plane_info[0].height, found.plane_info[0].width, frame)};
  }
  auto info = output_info(frame, cuda_stream, host);
  check_status(api_.ImageCreate(instance_, &images_[i], &info), "image creation");
  return {};
}

}  // namespace robocache::decoders
