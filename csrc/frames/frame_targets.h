// Frames to decode, as every decoder takes them: each frame's encoded bytes
// in host memory and where its pixels go; and the checks of a stream's
// encoded bytes and of the rows asked for, shared by the decoders' faces to
// torch.
#pragma once

#include <ATen/ATen.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace robocache::decoders {

// One frame to decode: its encoded bytes in host memory, and where its
// (height, width, channels) uint8 pixels go (device or host memory, as the
// decoder writes).
struct FrameTarget {
  const uint8_t* data;
  size_t size;
  uint8_t* out;
  int64_t height;
  int64_t width;
  int64_t channels;
  // Its pixels' size: height * width * channels bytes.
  size_t pixel_bytes() const { return static_cast<size_t>(height * width * channels); }
};

// The first frame of a batch that did not decode (index -1: none), and why.
struct FrameFailure {
  int64_t index = -1;
  std::string why;
};

// Why a frame's image is not its target's size.
std::string wrong_size(int64_t height, int64_t width, const FrameTarget& frame);

// The checks every decoder makes of a stream's encoded bytes.
void check_encoded(const at::Tensor& values, const at::Tensor& byte_offsets, const char* where);

// The targets of frames `rows` (N,) of a stream's bytes (values,
// byte_offsets), decoded into out (N, H, W, C) uint8 with C of 1 or 3
// (contiguous, its device checked by the caller); errors begin with `where`.
std::vector<FrameTarget> frame_targets(const at::Tensor& values, const at::Tensor& byte_offsets,
                                       const at::Tensor& rows, const at::Tensor& out,
                                       const char* where);

}  // namespace robocache::decoders
