// nvJPEG's batched decode (GPU Huffman decoding, interpolated chroma
// upsampling as libjpeg-turbo's "fancy" upsampling): a batch of frames in
// one call, a few kernels a batch rather than a few a frame. Loaded at run
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

class BatchedJpeg {
 public:
  // nvJPEG from the library at `path`; throws where it cannot be loaded or
  // its handle cannot be made.
  explicit BatchedJpeg(const std::string& path);
  ~BatchedJpeg();
  BatchedJpeg(const BatchedJpeg&) = delete;
  BatchedJpeg& operator=(const BatchedJpeg&) = delete;

  // Decodes `frames` (each `channels` 1 or 3, its size checked against its
  // header by the caller) in one call, ordered on `cuda_stream`. False where
  // nvJPEG refused the batch: the caller decodes those frames another way.
  bool decode(const std::vector<const FrameTarget*>& frames, int64_t channels,
              cudaStream_t cuda_stream);

 private:
  using Handle = void*;
  using State = void*;
  struct Image {
    unsigned char* channel[4];
    size_t pitch[4];
  };

  int (*create_)(int, void*, void*, unsigned, Handle*) = nullptr;
  int (*destroy_)(Handle) = nullptr;
  int (*state_create_)(Handle, State*) = nullptr;
  int (*state_destroy_)(State) = nullptr;
  int (*initialize_)(Handle, State, int, int, int) = nullptr;
  int (*decode_)(Handle, State, const unsigned char* const*, const size_t*, Image*,
                 cudaStream_t) = nullptr;

  void release();  // the states and the handle

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
