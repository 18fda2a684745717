#include "frame_decoder.h"

#include "../frames/host_jpeg.h"

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <robocache/error.h>

#include <algorithm>
#include <cmath>

namespace robocache::decoders {
namespace {

// Whether the frame ends as a whole JPEG does: a frame cut short goes to the
// decoder that reports it (the batched decode may fill in what is missing).
bool ends_whole(const FrameTarget& frame) {
  return frame.size >= 4 && frame.data[frame.size - 2] == 0xFF &&
         frame.data[frame.size - 1] == 0xD9;
}

// libjpeg-turbo's pixels as Pillow decodes them: the accurate inverse DCT,
// and chroma upsampled by interpolation.
constexpr const char* kHostOptions = " :fancy_upsampling=1 :fast_idct=0";

}  // namespace

FrameDecoder::FrameDecoder(std::string library, std::string nvjpeg_library, int64_t device,
                           double hardware_share, double host_share, int64_t cpu_threads,
                           std::string options, bool kernels)
    : api_(NvImgCodec::load(library)),
      library_(library),
      nvjpeg_library_(nvjpeg_library),
      options_(options),
      device_(device),
      hardware_share_(hardware_share),
      host_share_(host_share),
      cpu_threads_(cpu_threads) {
  ROBOCACHE_CHECK_VALUE(
      hardware_share >= 0.0 && host_share >= 0.0 && hardware_share + host_share <= 1.0,
      "FrameDecoder: hardware_share and host_share must be >= 0, their sum "
      "at most 1; got ",
      hardware_share, " and ", host_share);
  ROBOCACHE_CHECK_VALUE(cpu_threads >= 0, "FrameDecoder: cpu_threads must be >= 0; got ",
                        cpu_threads);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto create =
      described<nvimgcodecInstanceCreateInfo_t>(NVIMGCODEC_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  create.load_builtin_modules = 1;
  create.load_extension_modules = 1;  // the nvJPEG extension, beside the library
  check_status(api_.InstanceCreate(&instance_, &create), "instance creation");
  uses_hardware_ = hardware_share > 0.0;
  uses_cuda_ = hardware_share + host_share < 1.0;
  if (!nvjpeg_library.empty()) {
    batched_hardware_ = uses_hardware_ ? load_batched(true) : nullptr;
    batched_cuda_ = uses_cuda_ ? load_batched(false) : nullptr;
  }
  try {
    if (kernels && uses_cuda_) {
      kernels_ = std::make_unique<KernelJpeg>(device);
    }
    cuda_decoder_ = make_decoder(NVIMGCODEC_BACKEND_KIND_HYBRID_CPU_GPU, options_);
    if (uses_hardware_ && batched_hardware_ == nullptr) {
      hardware_decoder_ = make_decoder(NVIMGCODEC_BACKEND_KIND_HW_GPU_ONLY, options_);
    }
    if (host_share > 0.0) {
      host_decoder_ = make_decoder(NVIMGCODEC_BACKEND_KIND_CPU_ONLY, options_ + kHostOptions);
    }
  } catch (...) {
    destroy_decoders();
    throw;
  }
}

void FrameDecoder::destroy_decoders() {
  for (auto* decoder : {&hardware_decoder_, &cuda_decoder_, &host_decoder_}) {
    if (*decoder != nullptr) {
      api_.DecoderDestroy(*decoder);
      *decoder = nullptr;
    }
  }
  if (instance_ != nullptr) {
    api_.InstanceDestroy(instance_);
    instance_ = nullptr;
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

c10::intrusive_ptr<FrameDecoder> FrameDecoder::sibling(int64_t i) {
  ROBOCACHE_CHECK_VALUE(i >= 0, "FrameDecoder.sibling: i must be >= 0; got ", i);
  if (i == 0) {
    return c10::intrusive_ptr<FrameDecoder>::reclaim_copy(this);
  }
  std::lock_guard<std::mutex> lock(siblings_mutex_);
  while (static_cast<int64_t>(siblings_.size()) < i) {
    siblings_.push_back(c10::make_intrusive<FrameDecoder>(
        library_, nvjpeg_library_, device_, hardware_share_, host_share_, cpu_threads_, options_,
        kernels_ != nullptr));
  }
  return siblings_[i - 1];
}

FrameDecoder::~FrameDecoder() {
  std::lock_guard<std::mutex> lock(mutex_);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  batched_hardware_.reset();  // nvJPEG's handles, on their device
  batched_cuda_.reset();
  kernels_.reset();
  for (auto image : images_) {
    api_.ImageDestroy(image);
  }
  for (auto code_stream : code_streams_) {
    api_.CodeStreamDestroy(code_stream);
  }
  destroy_decoders();
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

FrameFailure FrameDecoder::submit_host_share(const std::vector<FrameTarget>& frames,
                                             cudaStream_t cuda_stream, std::vector<Part>& part) {
  const std::vector<size_t>& share = split_.host;
  staging_.reserve(frames, share, device_);
  part.assign(1, Part{host_decoder_});
  for (size_t j = 0; j < share.size(); ++j) {
    FrameFailure failure = prepare(share[j], frames[share[j]], cuda_stream, staging_.host(j));
    if (failure.index >= 0) {
      return failure;
    }
    part[0].add(share[j], code_streams_, images_);
  }
  check_status(submit_parts(part), "decode");
  return {};
}

FrameFailure FrameDecoder::decode_on_gpu(const std::vector<FrameTarget>& frames,
                                         cudaStream_t cuda_stream) {
  // Each share in one batched call where nvJPEG's loaded, the frames it
  // does not take through nvImageCodec's CUDA decoder. nvImageCodec's
  // frames go in one part a decoder and output format (the engines take one
  // format a call).
  std::vector<Part> parts;
  for (int g = 0; g < 2; ++g) {
    const int64_t channels = g == 0 ? 1 : 3;
    std::vector<size_t>&engines = split_.engines[g], &cuda = split_.cuda[g];
    for (auto [share, batched] :
         {std::pair{&engines, batched_hardware_.get()}, std::pair{&cuda, batched_cuda_.get()}}) {
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
      cuda.insert(cuda.end(), elsewhere.begin(), elsewhere.end());
    }
    Part engines_part{hardware_decoder_}, cuda_part{cuda_decoder_};
    for (auto [share, part] : {std::pair{&engines, &engines_part}, std::pair{&cuda, &cuda_part}}) {
      for (size_t i : *share) {
        FrameFailure failure = prepare(i, frames[i], cuda_stream);
        if (failure.index >= 0) {
          return failure;
        }
        part->add(i, code_streams_, images_);
      }
    }
    for (Part* part : {&engines_part, &cuda_part}) {
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
  return {};
}

FrameFailure FrameDecoder::run(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream) {
  const size_t n = frames.size();
  if (n == 0) {
    return {};
  }
  std::lock_guard<std::mutex> lock(mutex_);
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device_));
  if (uses_hardware_) {
    // The hardware engines write as soon as they are called, whatever the
    // stream has queued: the work queued there (which may still use the
    // output's memory) is waited for first. nvJPEG's batched decode on the
    // engines can also fail a call on a stream the host has not yet waited
    // for (a queue's first step): the wait keeps it from that. FrameQueue
    // relies on this wait: it queues a slot's release on the stream and does
    // not wait for it on the host.
    C10_CUDA_CHECK(cudaStreamSynchronize(cuda_stream));
  }
  while (code_streams_.size() < n) {
    code_streams_.push_back(nullptr);
    images_.push_back(nullptr);
  }
  statuses_.assign(n, NVIMGCODEC_PROCESSING_STATUS_UNKNOWN);
  split(frames);
  // The host's share is submitted first, then robocache's kernels are
  // queued: the host's cores and the GPU decode while the other shares are
  // decoded.
  std::vector<Part> host_part;
  FrameFailure failure;
  try {
    if (!split_.host.empty()) {
      failure = submit_host_share(frames, cuda_stream, host_part);
    }
    if (failure.index < 0) {
      failure = launch_kernels(frames, cuda_stream);
    }
    if (failure.index < 0) {
      failure = decode_on_gpu(frames, cuda_stream);
    }
  } catch (...) {
    wait_parts(host_part);  // its threads write into the staging memory
    if (kernels_) {
      kernels_->settle();  // they write into the targets
    }
    throw;
  }
  // Both waited for before either's outcome is checked.
  const nvimgcodecStatus_t on_host = wait_parts(host_part);
  FrameFailure on_kernels = kernels_ ? kernels_->wait() : FrameFailure{};
  check_status(on_host, "wait for a decode");
  if (failure.index >= 0) {
    return failure;
  }
  for (size_t i = 0; i < n; ++i) {
    if (statuses_[i] != NVIMGCODEC_PROCESSING_STATUS_SUCCESS &&
        (on_kernels.index < 0 || static_cast<int64_t>(i) < on_kernels.index)) {
      return {static_cast<int64_t>(i),
              message("nvImageCodec: ", processing_status_name(statuses_[i]))};
    }
  }
  if (on_kernels.index >= 0) {
    return on_kernels;
  }
  if (!split_.host.empty()) {
    staging_.copy(cuda_stream);
  }
  return {};
}

FrameFailure FrameDecoder::launch_kernels(const std::vector<FrameTarget>& frames,
                                          cudaStream_t cuda_stream) {
  kernel_frames_.clear();
  if (!kernels_) {
    return {};
  }
  if (reads_.size() < frames.size()) {
    reads_.resize(frames.size());
  }
  for (auto& share : split_.cuda) {
    size_t kept = 0;
    for (size_t i : share) {
      const FrameTarget& frame = frames[i];
      jpeg::HeaderRead& read = reads_[i];
      jpeg::read_header(frame.data, static_cast<int64_t>(frame.size), read);
      if (read.outcome == jpeg::Outcome::kTaken &&
          (read.layout.height != frame.height || read.layout.width != frame.width)) {
        return {static_cast<int64_t>(i), wrong_size(read.layout.height, read.layout.width, frame)};
      }
      if (refusal(read, frame).empty()) {
        kernel_frames_.push_back(i);
        statuses_[i] = NVIMGCODEC_PROCESSING_STATUS_SUCCESS;  // the kernels' own, in wait()
      } else {
        share[kept++] = i;  // to nvJPEG, which names what is wrong with it
      }
    }
    share.resize(kept);
  }
  kernels_->launch(frames, kernel_frames_, reads_, cuda_stream);
  return {};
}

void FrameDecoder::split(const std::vector<FrameTarget>& frames) {
  split_.host.clear();
  for (int g = 0; g < 2; ++g) {
    const int64_t channels = g == 0 ? 1 : 3;
    auto& group = split_.group;
    group.clear();
    for (size_t i = 0; i < frames.size(); ++i) {
      if (frames[i].channels == channels) {
        group.push_back(i);
      }
    }
    const double size = static_cast<double>(group.size());
    const size_t engines =
        uses_hardware_ ? static_cast<size_t>(std::llround(hardware_share_ * size)) : 0;
    const size_t host = !uses_cuda_
                            ? group.size() - engines
                            : std::min(group.size() - engines,
                                       static_cast<size_t>(std::llround(host_share_ * size)));
    split_.engines[g].assign(group.begin(), group.begin() + engines);
    split_.host.insert(split_.host.end(), group.begin() + engines, group.begin() + engines + host);
    split_.cuda[g].assign(group.begin() + engines + host, group.end());
  }
  // In batch order, so that frames whose targets lie end to end are copied
  // in one call.
  std::sort(split_.host.begin(), split_.host.end());
}

}  // namespace robocache::decoders
