#include "frame_decoder.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <robocache/error.h>

#include <cmath>

namespace robocache::decoders {
namespace {

template <typename T>
T described(nvimgcodecStructureType_t type) {
  T value{};
  value.struct_type = type;
  value.struct_size = sizeof(T);
  value.struct_next = nullptr;
  return value;
}

void check(const NvImgCodec&, nvimgcodecStatus_t status, const char* what) {
  ROBOCACHE_CHECK(status == NVIMGCODEC_STATUS_SUCCESS, "robocache: nvImageCodec's ", what,
                  " failed: ", status_name(status));
}

// The output image of one frame: interleaved RGB or grey uint8, pitch-linear
// in device memory.
nvimgcodecImageInfo_t output_info(const FrameTarget& frame, cudaStream_t cuda_stream) {
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
  info.buffer = frame.out;
  info.buffer_kind = NVIMGCODEC_IMAGE_BUFFER_KIND_STRIDED_DEVICE;
  info.cuda_stream = cuda_stream;
  return info;
}

// Whether the frame ends as a whole JPEG does: a frame cut short goes to the
// decoder that reports it (the batched decode may fill in what is missing).
bool ends_whole(const FrameTarget& frame) {
  return frame.size >= 4 && frame.data[frame.size - 2] == 0xFF &&
         frame.data[frame.size - 1] == 0xD9;
}

std::string wrong_size(int64_t height, int64_t width, const FrameTarget& frame) {
  return message("the image is ", height, "x", width, "; its frames' shape says ", frame.height,
                 "x", frame.width);
}

}  // namespace

FrameDecoder::FrameDecoder(std::string library, std::string nvjpeg_library, int64_t device,
                           double hardware_share, int64_t cpu_threads, std::string options)
    : api_(NvImgCodec::load(library)),
      library_(library),
      nvjpeg_library_(nvjpeg_library),
      options_(options),
      device_(device),
      hardware_share_(hardware_share),
      cpu_threads_(cpu_threads) {
  ROBOCACHE_CHECK_VALUE(hardware_share >= 0.0 && hardware_share <= 1.0,
                        "FrameDecoder: hardware_share must be in [0, 1]; got ", hardware_share);
  ROBOCACHE_CHECK_VALUE(cpu_threads >= 0, "FrameDecoder: cpu_threads must be >= 0; got ",
                        cpu_threads);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto create =
      described<nvimgcodecInstanceCreateInfo_t>(NVIMGCODEC_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  create.load_builtin_modules = 1;
  create.load_extension_modules = 1;  // the nvJPEG extension, beside the library
  check(api_, api_.InstanceCreate(&instance_, &create), "instance creation");
  uses_hardware_ = hardware_share > 0.0;
  if (!nvjpeg_library.empty()) {
    batched_hardware_ = uses_hardware_ ? load_batched(true) : nullptr;
    batched_cuda_ = hardware_share < 1.0 ? load_batched(false) : nullptr;
  }
  try {
    cuda_decoder_ = make_decoder(NVIMGCODEC_BACKEND_KIND_HYBRID_CPU_GPU);
    if (uses_hardware_ && batched_hardware_ == nullptr) {
      hardware_decoder_ = make_decoder(NVIMGCODEC_BACKEND_KIND_HW_GPU_ONLY);
    }
  } catch (...) {
    if (cuda_decoder_ != nullptr) {
      api_.DecoderDestroy(cuda_decoder_);
    }
    api_.InstanceDestroy(instance_);
    throw;
  }
}

std::unique_ptr<BatchedJpeg> FrameDecoder::load_batched(bool hardware) {
  std::string why;
  try {
    return std::make_unique<BatchedJpeg>(nvjpeg_library_, device_, hardware);
  } catch (const c10::Error& e) {
    why = e.what_without_backtrace();
  } catch (const std::exception& e) {
    why = e.what();
  }
  batched_error_ += (batched_error_.empty() ? "" : "; ") +
                    message(hardware ? "on the hardware engines: " : "on the SMs: ", why);
  return nullptr;
}

nvimgcodecDecoder_t FrameDecoder::make_decoder(nvimgcodecBackendKind_t kind) {
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
  exec.device_id = static_cast<int>(device_);
  exec.max_num_cpu_threads = static_cast<int>(cpu_threads_);
  exec.pre_init = 1;
  exec.num_backends = static_cast<int>(backends.size());
  exec.backends = backends.data();
  nvimgcodecDecoder_t decoder = nullptr;
  check(
      api_,
      api_.DecoderCreate(instance_, &decoder, &exec, options_.empty() ? nullptr : options_.c_str()),
      "decoder creation");
  return decoder;
}

c10::intrusive_ptr<FrameDecoder> FrameDecoder::sibling(int64_t i) {
  ROBOCACHE_CHECK_VALUE(i >= 0, "FrameDecoder.sibling: i must be >= 0; got ", i);
  if (i == 0) {
    return c10::intrusive_ptr<FrameDecoder>::reclaim_copy(this);
  }
  std::lock_guard<std::mutex> lock(siblings_mutex_);
  while (static_cast<int64_t>(siblings_.size()) < i) {
    siblings_.push_back(c10::make_intrusive<FrameDecoder>(library_, nvjpeg_library_, device_,
                                                          hardware_share_, cpu_threads_, options_));
  }
  return siblings_[i - 1];
}

FrameDecoder::~FrameDecoder() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  batched_hardware_.reset();  // nvJPEG's handles, on their device
  batched_cuda_.reset();
  for (auto image : images_) {
    api_.ImageDestroy(image);
  }
  for (auto code_stream : code_streams_) {
    api_.CodeStreamDestroy(code_stream);
  }
  if (hardware_decoder_ != nullptr) {
    api_.DecoderDestroy(hardware_decoder_);
  }
  if (cuda_decoder_ != nullptr) {
    api_.DecoderDestroy(cuda_decoder_);
  }
  if (instance_ != nullptr) {
    api_.InstanceDestroy(instance_);
  }
}

void FrameDecoder::decode_parts(std::vector<Part>& parts) {
  auto params = described<nvimgcodecDecodeParams_t>(NVIMGCODEC_STRUCTURE_TYPE_DECODE_PARAMS);
  params.apply_exif_orientation = 0;  // the pixels as stored, as the host decoders give them
  nvimgcodecStatus_t submitted = NVIMGCODEC_STATUS_SUCCESS;
  for (auto& part : parts) {  // every part submitted before any is waited for
    submitted = api_.DecoderDecode(part.decoder, part.code_streams.data(), part.images.data(),
                                   static_cast<int>(part.frames.size()), &params, &part.future);
    if (submitted != NVIMGCODEC_STATUS_SUCCESS) {
      break;
    }
  }
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
  check(api_, submitted, "decode");
  check(api_, waited, "wait for a decode");
}

FrameFailure FrameDecoder::prepare(size_t i, const FrameTarget& frame, cudaStream_t cuda_stream) {
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
  auto info = output_info(frame, cuda_stream);
  check(api_, api_.ImageCreate(instance_, &images_[i], &info), "image creation");
  return {};
}

FrameFailure FrameDecoder::decode_batched(BatchedJpeg& batched,
                                          const std::vector<FrameTarget>& frames,
                                          const std::vector<size_t>& group, int64_t channels,
                                          cudaStream_t cuda_stream,
                                          std::vector<size_t>& elsewhere) {
  batched_targets_.clear();
  batched_frames_.clear();
  for (size_t i : group) {
    const FrameTarget& frame = frames[i];
    JpegHeader header;
    // A frame nvJPEG does not read, or cut short, or of other than one or
    // three components, goes to nvImageCodec, which names what is wrong.
    if (!ends_whole(frame) || !batched.header(frame, &header) ||
        (header.components != 1 && header.components != 3)) {
      elsewhere.push_back(i);
      continue;
    }
    if (header.height != frame.height || header.width != frame.width) {
      return {static_cast<int64_t>(i), wrong_size(header.height, header.width, frame)};
    }
    batched_targets_.push_back(&frame);
    batched_frames_.push_back(i);
  }
  if (batched.decode(batched_targets_, channels, cuda_stream)) {
    for (size_t i : batched_frames_) {
      statuses_[i] = NVIMGCODEC_PROCESSING_STATUS_SUCCESS;
    }
  } else {  // nvImageCodec decodes the batch, and names a frame that does not decode
    elsewhere.insert(elsewhere.end(), batched_frames_.begin(), batched_frames_.end());
  }
  return {};
}

FrameFailure FrameDecoder::run(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream) {
  const size_t n = frames.size();
  if (n == 0) {
    return {};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  while (code_streams_.size() < n) {
    code_streams_.push_back(nullptr);
    images_.push_back(nullptr);
  }
  statuses_.assign(n, NVIMGCODEC_PROCESSING_STATUS_UNKNOWN);
  // Of each channel count's frames, the engines' share first, then the
  // CUDA decoder's: each in one batched call where nvJPEG's loaded, the
  // frames it does not take through nvImageCodec's CUDA decoder.
  // nvImageCodec's frames go in one part a decoder and output format (the
  // engines take one format a call).
  std::vector<Part> parts;
  for (int64_t channels : {int64_t{1}, int64_t{3}}) {
    std::vector<size_t> group;
    for (size_t i = 0; i < n; ++i) {
      if (frames[i].channels == channels) {
        group.push_back(i);
      }
    }
    size_t split =
        uses_hardware_
            ? static_cast<size_t>(std::llround(hardware_share_ * static_cast<double>(group.size())))
            : 0;
    std::vector<size_t> engines_share(group.begin(), group.begin() + split);
    std::vector<size_t> cuda_share(group.begin() + split, group.end());
    for (auto [share, batched] : {std::pair{&engines_share, batched_hardware_.get()},
                                  std::pair{&cuda_share, batched_cuda_.get()}}) {
      if (batched == nullptr || share->empty()) {
        continue;
      }
      std::vector<size_t> elsewhere;
      FrameFailure failure =
          decode_batched(*batched, frames, *share, channels, cuda_stream, elsewhere);
      if (failure.index >= 0) {
        return failure;
      }
      share->clear();
      // What the batched decode did not take goes to nvImageCodec's CUDA decoder.
      cuda_share.insert(cuda_share.end(), elsewhere.begin(), elsewhere.end());
    }
    Part engines{hardware_decoder_}, cuda{cuda_decoder_};
    for (auto [share, part] :
         {std::pair{&engines_share, &engines}, std::pair{&cuda_share, &cuda}}) {
      for (size_t i : *share) {
        FrameFailure failure = prepare(i, frames[i], cuda_stream);
        if (failure.index >= 0) {
          return failure;
        }
        part->add(i, code_streams_, images_);
      }
    }
    for (Part* part : {&engines, &cuda}) {
      if (!part->frames.empty()) {
        parts.push_back(std::move(*part));
      }
    }
  }
  decode_parts(parts);
  // What the engines did not decode (a sampling they lack, or a batch one
  // corrupt frame failed) goes to the CUDA decoder, once.
  std::vector<Part> again(1, Part{cuda_decoder_});
  for (const auto& part : parts) {
    if (part.decoder != hardware_decoder_) {
      continue;
    }
    for (size_t i : part.frames) {
      if (statuses_[i] != NVIMGCODEC_PROCESSING_STATUS_SUCCESS) {
        again[0].add(i, code_streams_, images_);
      }
    }
  }
  if (!again[0].frames.empty()) {
    decode_parts(again);
  }
  for (size_t i = 0; i < n; ++i) {
    if (statuses_[i] != NVIMGCODEC_PROCESSING_STATUS_SUCCESS) {
      return {static_cast<int64_t>(i),
              message("nvImageCodec: ", processing_status_name(statuses_[i]))};
    }
  }
  return {};
}

void check_encoded(const at::Tensor& values, const at::Tensor& byte_offsets, const char* where) {
  ROBOCACHE_CHECK_VALUE(values.device().is_cpu() && values.scalar_type() == at::kByte &&
                            values.dim() == 1 && values.is_contiguous(),
                        where,
                        ": values must be the frames' bytes, a contiguous (n,) uint8 "
                        "tensor in host memory; got ",
                        values.scalar_type(), " on ", values.device());
  ROBOCACHE_CHECK_VALUE(byte_offsets.device().is_cpu() && byte_offsets.scalar_type() == at::kLong &&
                            byte_offsets.dim() == 1 && byte_offsets.is_contiguous() &&
                            byte_offsets.numel() >= 1,
                        where,
                        ": byte_offsets must be a contiguous (N + 1,) int64 tensor in "
                        "host memory");
}

std::tuple<int64_t, std::string> FrameDecoder::decode(at::Tensor values, at::Tensor byte_offsets,
                                                      at::Tensor rows, at::Tensor out) {
  check_encoded(values, byte_offsets, "FrameDecoder.decode");
  ROBOCACHE_CHECK_VALUE(rows.device().is_cpu() && rows.scalar_type() == at::kLong &&
                            rows.dim() == 1 && rows.is_contiguous(),
                        "FrameDecoder.decode: rows must be a contiguous (N,) int64 host tensor");
  ROBOCACHE_CHECK_VALUE(out.is_cuda() && out.get_device() == device_ &&
                            out.scalar_type() == at::kByte && out.dim() == 4 &&
                            out.is_contiguous() && out.size(0) == rows.numel() &&
                            (out.size(3) == 1 || out.size(3) == 3),
                        "FrameDecoder.decode: out must be a contiguous (N, H, W, C) uint8 "
                        "tensor on cuda:",
                        device_, " with C of 1 or 3, N = rows");
  const int64_t frames = byte_offsets.numel() - 1;
  const int64_t* bounds = byte_offsets.data_ptr<int64_t>();
  const int64_t* wanted = rows.data_ptr<int64_t>();
  const uint8_t* bytes = values.data_ptr<uint8_t>();
  const int64_t frame_bytes = out.numel() == 0 ? 0 : out[0].numel();
  std::vector<FrameTarget> targets;
  targets.reserve(rows.numel());
  for (int64_t i = 0; i < rows.numel(); ++i) {
    int64_t row = wanted[i];
    ROBOCACHE_CHECK_VALUE(row >= 0 && row < frames, "FrameDecoder.decode: row ", row,
                          " is not a frame of the ", frames, " the byte offsets hold");
    int64_t begin = bounds[row], end = bounds[row + 1];
    ROBOCACHE_CHECK_VALUE(0 <= begin && begin <= end && end <= values.numel(),
                          "FrameDecoder.decode: the byte offsets of row ", row,
                          " lie outside the values");
    targets.push_back({bytes + begin, static_cast<size_t>(end - begin),
                       out.data_ptr<uint8_t>() + i * frame_bytes, out.size(1), out.size(2),
                       out.size(3)});
  }
  auto cuda_stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_));
  if (uses_hardware_ && !targets.empty()) {
    // The hardware engines write as soon as they are called, whatever the
    // stream has queued: the work queued there (which may still use out's
    // memory) is waited for first.
    C10_CUDA_CHECK(cudaStreamSynchronize(cuda_stream.stream()));
  }
  FrameFailure failure = run(targets, cuda_stream.stream());
  return {failure.index, failure.why};
}

}  // namespace robocache::decoders
