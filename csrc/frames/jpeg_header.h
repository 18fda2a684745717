// A JPEG frame's headers read on the host before its decode: the layout the
// shared decode (robocache/jpeg.h) needs, every table and size checked, or
// why robocache's decoder does not take the frame.
#pragma once

#include <robocache/jpeg.h>

#include <cstdint>

namespace robocache::jpeg {

enum class Outcome {
  kTaken,         // `layout` and `quant` hold
  kNotSupported,  // a JPEG this decoder does not decode (progressive, 12-bit, CMYK, ...)
  kMalformed,     // bytes no JPEG decoder can read as an image
};

struct HeaderRead {
  Outcome outcome = Outcome::kMalformed;
  const char* why = "";  // for other than kTaken (a string literal: no allocation a frame)
  FrameLayout layout{};
  uint16_t quant[kMaxComponents][64]{};  // each component's quantization table, natural order
};

// Reads the headers of the frame `data` (`size` bytes) up to its scan.
void read_header(const uint8_t* data, int64_t size, HeaderRead& read);

}  // namespace robocache::jpeg
