// robocache's JPEG decode on the host: the steps the CUDA kernels take
// (robocache/jpeg.h), run a frame at a time, so that both decoders give
// the same pixels and each can be checked against the other and against
// libjpeg-turbo.
#pragma once

#include <string>

#include "frame_targets.h"
#include "jpeg_header.h"

namespace robocache::decoders {

// Why robocache's decoder does not decode a frame whose headers read as
// `read` into `frame` ("" where it does): not a frame it takes, another
// size or a 3-component frame into a grey target.
std::string refusal(const jpeg::HeaderRead& read, const FrameTarget& frame);

// The frame decoded into frame.out (host memory); "" or why it did not decode.
std::string decode_on_host(const FrameTarget& frame);

// Why the kernels' ScanStatus `status` failed a frame.
const char* scan_failure(int32_t status);

}  // namespace robocache::decoders
