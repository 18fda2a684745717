// nvJPEG's batched decode, a batch of frames in one call: on the GPU's
// hardware JPEG engines (libjpeg-turbo's pixels, within a grey level in
// upsampled chroma), or on its SMs (GPU Huffman decoding, a few kernels a
// batch; interpolated chroma upsampling as libjpeg-turbo's "fancy"
// upsampling, colour up to 3 grey levels off). Loaded at run
// time from the nvJPEG that robocache's optional extra installs; the few
// types and entry points it needs are declared here, so that a build needs
// no nvJPEG header.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace robocache::decoders {

struct FrameTarget;

// What a frame's header says, as nvJPEG reads it.
struct JpegHeader {
  int components = 0;
  int height = 0;
  int width = 0;
};

class BatchedJpeg {
 public:
  // nvJPEG from the library at `path`, decoding on `device`'s hardware
  // engines (`hardware`) or its SMs; throws where it cannot be loaded or
  // its handle cannot be made (a GPU without the engines, for `hardware`).
  BatchedJpeg(const std::string& path, int64_t device, bool hardware);
  ~BatchedJpeg();
  BatchedJpeg(const BatchedJpeg&) = delete;
  BatchedJpeg& operator=(const BatchedJpeg&) = delete;

  // The frame's header; false where nvJPEG cannot read it.
  bool header(const FrameTarget& frame, JpegHeader* found);

  // Decodes `frames` (each `channels` 1 or 3, its header read and its size
  // checked by the caller) in one call, on `cuda_stream` (the engines write
  // as soon as they are called: their output memory must be free when this
  // is called). False where nvJPEG refused the batch: the caller decodes
  // those frames another way.
  bool decode(const std::vector<const FrameTarget*>& frames, int64_t channels,
              cudaStream_t cuda_stream);

 private:
  using Handle = void*;
  using State = void*;
  struct Image {
    unsigned char* channel[4];
    size_t pitch[4];
  };

  void release();  // the states and the handle

  int (*create_)(int, void*, void*, unsigned, Handle*) = nullptr;
  int (*destroy_)(Handle) = nullptr;
  int (*state_create_)(Handle, State*) = nullptr;
  int (*state_destroy_)(State) = nullptr;
  int (*image_info_)(Handle, const unsigned char*, size_t, int*, int*, int*, int*) = nullptr;
  int (*initialize_)(Handle, State, int, int, int) = nullptr;
  int (*decode_)(Handle, State, const unsigned char* const*, const size_t*, Image*,
                 cudaStream_t) = nullptr;

  Handle handle_ = nullptr;
  // One state a channel count (grey, RGB), with the batch size it was
  // initialized for (0: none).
  State states_[2] = {nullptr, nullptr};
  int batch_[2] = {0, 0};
  std::vector<const unsigned char*> data_;
  std::vector<size_t> lengths_;
  std::vector<Image> images_;
};

}  // namespace robocache::decoders
