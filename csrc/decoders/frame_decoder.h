// A batch of JPEG frames decoded by nvJPEG and nvImageCodec, split between
// the GPU's hardware JPEG engines, the host's cores (libjpeg-turbo, through
// pinned memory) and the GPU's CUDA decoder, into device memory the caller
// owns: one native call a batch, no Python object per frame.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>

#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "../frames/frame_targets.h"
#include "../frames/jpeg_header.h"
#include "kernel_jpeg.h"
#include "nvimgcodec_library.h"
#include "nvjpeg_batched.h"
#include "pinned_staging.h"

namespace robocache::decoders {

class FrameDecoder : public torch::CustomClassHolder {
 public:
  // library: the path of libnvimgcodec.so.0; nvjpeg_library: the path of
  // libnvjpeg.so, whose batched decode takes each share of a batch, the
  // engines' and the CUDA decoder's ("": nvImageCodec takes them, the CUDA
  // decoder's a frame at a time);
  // device: the CUDA device; hardware_share: the share of each batch given
  // to the hardware engines; host_share: the share decoded on the host by
  // libjpeg-turbo (nvImageCodec's CPU backend, on its threads) into pinned
  // memory, then copied to the device; the rest goes to the CUDA decoder;
  // cpu_threads: the decoder's host threads (0: as many as the host has
  // cores); options: nvImageCodec's decoder options ("" for its defaults);
  // kernels: the CUDA decoder's share goes to robocache's own kernels
  // (libjpeg-turbo's pixels), but for frames they do not take (progressive,
  // ...), which go to nvJPEG's.
  FrameDecoder(std::string library, std::string nvjpeg_library, int64_t device,
               double hardware_share, double host_share, int64_t cpu_threads, std::string options,
               bool kernels);
  ~FrameDecoder() override;

  // rows (N,) of the frames (values, byte_offsets) hold, decoded into out
  // (N, H, W, C) uint8 on the decoder's device, ordered on its current CUDA
  // stream (with the hardware engines, after the host waits for the work
  // queued there). Returns (-1, "") or the first frame that did not decode
  // and why.
  std::tuple<int64_t, std::string> decode(at::Tensor values, at::Tensor byte_offsets,
                                          at::Tensor rows, at::Tensor out);

  // Decodes `frames` in one call, ordered on `cuda_stream`: the decode
  // follows the work queued there before it, and work queued after it
  // follows the decode. Waits on the host for the decoder's host work
  // (headers, the host's share, submission to the engines); where the
  // hardware engines have a share, first for the work queued on the stream;
  // and where nvJPEG's batched decode does, for the device's part of it
  // (the stream's work up to the decode included). Of several frames that
  // do not decode, the first found is returned, not always the lowest.
  FrameFailure run(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream);

  // The i-th decoder of this one's settings (0: this one), made when first
  // asked for and kept: a queue's threads each use their own.
  c10::intrusive_ptr<FrameDecoder> sibling(int64_t i);

  int64_t device() const { return device_; }
  // Whether the hardware engines take part: they write their output as soon
  // as they are called, ignoring the work queued on the stream they are
  // given, so their output memory must be free on the host's word.
  bool uses_hardware() const { return uses_hardware_; }
  // Whether robocache's kernels take the CUDA decoder's share.
  bool uses_kernels() const { return kernels_ != nullptr; }
  // Whether nvJPEG's batched decode was asked for, and takes each of the
  // GPU's shares (none goes through nvImageCodec).
  bool uses_batched() const {
    return !nvjpeg_library_.empty() && (!uses_cuda_ || batched_cuda_ != nullptr) &&
           (!uses_hardware_ || batched_hardware_ != nullptr);
  }
  // Why nvJPEG's batched decode, asked for, did not load ("" where it did,
  // or was not asked for).
  const std::string& batched_error() const { return batched_error_; }

 private:
  // Frames decoded by one call of one decoder: their positions in the
  // batch, and their handles.
  struct Part {
    nvimgcodecDecoder_t decoder;
    std::vector<size_t> frames{};
    std::vector<nvimgcodecCodeStream_t> code_streams{};
    std::vector<nvimgcodecImage_t> images{};
    nvimgcodecFuture_t future = nullptr;
    void add(size_t i, const std::vector<nvimgcodecCodeStream_t>& all_code_streams,
             const std::vector<nvimgcodecImage_t>& all_images) {
      frames.push_back(i);
      code_streams.push_back(all_code_streams[i]);
      images.push_back(all_images[i]);
    }
  };

  // Each decoder's share of a batch: positions in the batch, kept between
  // batches (their memory reused).
  struct Split {
    std::vector<size_t> engines[2], cuda[2];  // a channel count each: grey, RGB
    std::vector<size_t> host, group;
  };

  // The frames of the CUDA decoder's share that robocache's kernels take
  // (taken out of split_.cuda), queued on `cuda_stream`; a failure where a
  // frame's size is not its target's.
  FrameFailure launch_kernels(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream);
  nvimgcodecDecoder_t make_decoder(nvimgcodecBackendKind_t kind, const std::string& options);
  // Destroys the decoders and the instance that exist (the handles of
  // nvImageCodec this decoder made).
  void destroy_decoders();
  // `split_` for `frames`: of each channel count's frames (grey, then RGB),
  // the engines' share first, then the host's, then the CUDA decoder's.
  void split(const std::vector<FrameTarget>& frames);
  // nvImageCodec's handles for frame i (its header checked against its
  // target), decoded into `host` (pinned memory) where given, else into its
  // target; a failure where it cannot read the frame.
  FrameFailure prepare(size_t i, const FrameTarget& frame, cudaStream_t cuda_stream,
                       uint8_t* host = nullptr);
  // The host's share (split_.host) prepared and submitted to the host
  // decoder, into staging_, as `part`.
  FrameFailure submit_host_share(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream,
                                 std::vector<Part>& part);
  // The engines' and the CUDA decoder's shares (split_'s, a channel count
  // each; the CUDA decoder's gains what the batched decode does not take).
  FrameFailure decode_on_gpu(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream);
  // The frames of `group` that `batched` can take, decoded in one call
  // (their statuses set); the others into `elsewhere`. A failure where a
  // frame's size is not its target's.
  FrameFailure decode_batched(BatchedJpeg& batched, const std::vector<FrameTarget>& frames,
                              const std::vector<size_t>& group, int64_t channels,
                              cudaStream_t cuda_stream, std::vector<size_t>& elsewhere);
  // nvJPEG's batched decode on the engines (`hardware`) or the SMs, or
  // nullptr where it does not load (why, into batched_error_).
  std::unique_ptr<BatchedJpeg> load_batched(bool hardware);
  // Submits the parts, each as one call of its decoder (stopping at one
  // that is refused).
  nvimgcodecStatus_t submit_parts(std::vector<Part>& parts);
  // Waits for the parts submitted, each frame's status into statuses_.
  nvimgcodecStatus_t wait_parts(std::vector<Part>& parts);
  // Decodes the parts, each frame's status into statuses_.
  void decode_parts(std::vector<Part>& parts);

  const NvImgCodec& api_;
  std::string library_, nvjpeg_library_, options_, batched_error_;
  int64_t device_;
  double hardware_share_, host_share_;
  int64_t cpu_threads_;
  bool uses_hardware_ = false;
  bool uses_cuda_ = true;  // whether the CUDA decoder has a share
  nvimgcodecInstance_t instance_ = nullptr;
  // Each batch's hardware share goes to the engines, its host share to the
  // host's cores, the rest to nvJPEG's CUDA decoder: the GPU's shares each
  // in one call of nvJPEG's batched decode a channel count
  // (batched_hardware_, batched_cuda_) where it loads, else through
  // nvImageCodec. What the batched decode refuses, or the engines
  // do not decode, goes to cuda_decoder_, which names a frame that does not
  // decode.
  nvimgcodecDecoder_t hardware_decoder_ = nullptr;
  nvimgcodecDecoder_t cuda_decoder_ = nullptr;
  // The host's share: libjpeg-turbo on nvImageCodec's threads, into
  // staging_, copied to the device once decoded.
  nvimgcodecDecoder_t host_decoder_ = nullptr;
  PinnedStaging staging_;
  std::unique_ptr<BatchedJpeg> batched_hardware_, batched_cuda_;
  // robocache's kernels, where asked for; each frame's header as they read it.
  std::unique_ptr<KernelJpeg> kernels_;
  std::vector<jpeg::HeaderRead> reads_;
  std::vector<size_t> kernel_frames_;
  std::mutex siblings_mutex_;
  std::vector<c10::intrusive_ptr<FrameDecoder>> siblings_;
  std::mutex mutex_;  // one batch at a time: the handles below are reused
  std::vector<nvimgcodecCodeStream_t> code_streams_;
  std::vector<nvimgcodecImage_t> images_;
  std::vector<nvimgcodecProcessingStatus_t> statuses_;
  std::vector<const FrameTarget*> batched_targets_;
  std::vector<size_t> batched_frames_;
  Split split_;
};

}  // namespace robocache::decoders
