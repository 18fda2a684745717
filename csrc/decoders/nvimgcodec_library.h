// nvImageCodec's C API, loaded when first asked for from the library that
// robocache's optional extra installs (nvidia-nvimgcodec-cu13), so that
// robocache._C loads and runs without it. The function types come from the
// extra's own header, which a CUDA build of robocache compiles against.
#pragma once

#include <nvimgcodec.h>

#include <string>

namespace robocache::decoders {

struct NvImgCodec {
  decltype(&nvimgcodecGetProperties) GetProperties;
  decltype(&nvimgcodecInstanceCreate) InstanceCreate;
  decltype(&nvimgcodecInstanceDestroy) InstanceDestroy;
  decltype(&nvimgcodecDecoderCreate) DecoderCreate;
  decltype(&nvimgcodecDecoderDestroy) DecoderDestroy;
  decltype(&nvimgcodecDecoderDecode) DecoderDecode;
  decltype(&nvimgcodecCodeStreamCreateFromHostMem) CodeStreamCreateFromHostMem;
  decltype(&nvimgcodecCodeStreamGetImageInfo) CodeStreamGetImageInfo;
  decltype(&nvimgcodecCodeStreamDestroy) CodeStreamDestroy;
  decltype(&nvimgcodecImageCreate) ImageCreate;
  decltype(&nvimgcodecImageDestroy) ImageDestroy;
  decltype(&nvimgcodecFutureWaitForAll) FutureWaitForAll;
  decltype(&nvimgcodecFutureGetProcessingStatus) FutureGetProcessingStatus;
  decltype(&nvimgcodecFutureDestroy) FutureDestroy;

  // The API of the library at `path` (loaded once a process; a later call
  // with another path gets the first library). Errors name the path.
  static const NvImgCodec& load(const std::string& path);
};

// One of nvImageCodec's structures, its type and size filled in.
template <typename T>
T described(nvimgcodecStructureType_t type) {
  T value{};
  value.struct_type = type;
  value.struct_size = sizeof(T);
  value.struct_next = nullptr;
  return value;
}

// Throws, naming `what` and the status, unless the status is success.
void check_status(nvimgcodecStatus_t status, const char* what);

// "NVIMGCODEC_STATUS_BAD_CODESTREAM (3)" and the like.
std::string status_name(nvimgcodecStatus_t status);
// "IMAGE_CORRUPTED" and the like, for a decode's per-image processing status.
std::string processing_status_name(nvimgcodecProcessingStatus_t status);

}  // namespace robocache::decoders
