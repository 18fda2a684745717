// A batch of JPEG frames decoded on the GPU by nvImageCodec, split between
// the GPU's hardware JPEG engines and its CUDA decoder, into device memory
// the caller owns: one native call a batch, no Python object per frame.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime_api.h>
#include <torch/custom_class.h>

#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "nvimgcodec_library.h"
#include "nvjpeg_batched.h"

namespace robocache::decoders {

// One frame to decode: its encoded bytes in host memory, and where its
// (height, width, channels) uint8 pixels go, in device memory.
struct FrameTarget {
  const uint8_t* data;
  size_t size;
  uint8_t* out;
  int64_t height;
  int64_t width;
  int64_t channels;
};

// The first frame of a batch that did not decode (index -1: none), and why.
struct FrameFailure {
  int64_t index = -1;
  std::string why;
};

class FrameDecoder : public torch::CustomClassHolder {
 public:
  // library: the path of libnvimgcodec.so.0; device: the CUDA device;
  // hardware_share: the share of each batch given to the hardware engines
  // (0: the CUDA decoder alone); cpu_threads: the decoder's host threads
  // (0: as many as the host has cores).
  // options: nvImageCodec's decoder options ("" for its defaults);
  // batched: the CUDA decoder's share through nvJPEG's batched decode where
  // it loads (nvJPEG from beside nvImageCodec), else through nvImageCodec.
  FrameDecoder(std::string library, int64_t device, double hardware_share, int64_t cpu_threads,
               std::string options, bool batched);
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
  // (headers, submission to the engines), never for the device.
  FrameFailure run(const std::vector<FrameTarget>& frames, cudaStream_t cuda_stream);

  // The i-th decoder of this one's settings (0: this one), made when first
  // asked for and kept: a queue's threads each use their own.
  c10::intrusive_ptr<FrameDecoder> sibling(int64_t i);

  int64_t device() const { return device_; }
  // Whether the hardware engines take part: they write their output as soon
  // as they are called, ignoring the work queued on the stream they are
  // given, so their output memory must be free on the host's word.
  bool uses_hardware() const { return uses_hardware_; }
  // Whether the CUDA decoder's share goes through nvJPEG's batched decode.
  bool uses_batched() const { return batched_ != nullptr; }

 private:
  // Frames decoded by one call of one decoder: their positions in the
  // batch, and their handles.
  struct Part {
    nvimgcodecDecoder_t decoder;
    std::vector<size_t> frames{};
    std::vector<nvimgcodecCodeStream_t> code_streams{};
    std::vector<nvimgcodecImage_t> images{};
    nvimgcodecFuture_t future = nullptr;
    void add(size_t i, const std::vector<nvimgcodecCodeStream_t>& all_streams,
             const std::vector<nvimgcodecImage_t>& all_images) {
      frames.push_back(i);
      code_streams.push_back(all_streams[i]);
      images.push_back(all_images[i]);
    }
  };

  nvimgcodecDecoder_t make_decoder(nvimgcodecBackendKind_t kind);
  // Decodes the parts, each frame's status into statuses_.
  void decode_parts(std::vector<Part>& parts);

  const NvImgCodec& api_;
  std::string library_, options_;
  int64_t device_;
  double hardware_share_;
  int64_t cpu_threads_;
  bool uses_hardware_ = false;
  nvimgcodecInstance_t instance_ = nullptr;
  // Each batch's hardware share goes to the engines, the rest to nvJPEG's
  // CUDA decoder, both at once; what the engines do not decode then goes to
  // the CUDA decoder.
  nvimgcodecDecoder_t hardware_decoder_ = nullptr;
  nvimgcodecDecoder_t cuda_decoder_ = nullptr;
  // The CUDA decoder's share of a batch, one call a channel count; what it
  // refuses goes to cuda_decoder_, which names a frame that does not decode.
  std::unique_ptr<BatchedJpeg> batched_;
  bool batched_asked_ = false;
  std::mutex siblings_mutex_;
  std::vector<c10::intrusive_ptr<FrameDecoder>> siblings_;
  std::mutex mutex_;  // one batch at a time: the handles below are reused
  std::vector<nvimgcodecCodeStream_t> code_streams_;
  std::vector<nvimgcodecImage_t> images_;
  std::vector<nvimgcodecProcessingStatus_t> statuses_;
};

// The checks both decode paths make of a stream's encoded bytes.
void check_encoded(const at::Tensor& values, const at::Tensor& byte_offsets, const char* where);

}  // namespace robocache::decoders
