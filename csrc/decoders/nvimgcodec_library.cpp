#include "nvimgcodec_library.h"

#include <dlfcn.h>

#include <mutex>

#include <robocache/error.h>

namespace robocache::decoders {
namespace {

template <typename F>
void resolve(void* handle, const char* name, F& out, const std::string& path) {
  out = reinterpret_cast<F>(dlsym(handle, name));
  ROBOCACHE_CHECK(out != nullptr, "robocache: ", path, " has no ", name,
                  "; robocache needs nvImageCodec 0.9 (pip install robocache[nvimgcodec])");
}

}  // namespace

const NvImgCodec& NvImgCodec::load(const std::string& path) {
  static std::mutex mutex;
  static NvImgCodec api;
  static bool loaded = false;
  std::lock_guard<std::mutex> lock(mutex);
  if (loaded) {
    return api;
  }
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    ROBOCACHE_CHECK(false, "robocache: cannot load nvImageCodec from ", path, ": ",
                    why ? why : "unknown error");
  }
  resolve(handle, "nvimgcodecGetProperties", api.GetProperties, path);
  resolve(handle, "nvimgcodecInstanceCreate", api.InstanceCreate, path);
  resolve(handle, "nvimgcodecInstanceDestroy", api.InstanceDestroy, path);
  resolve(handle, "nvimgcodecDecoderCreate", api.DecoderCreate, path);
  resolve(handle, "nvimgcodecDecoderDestroy", api.DecoderDestroy, path);
  resolve(handle, "nvimgcodecDecoderDecode", api.DecoderDecode, path);
  resolve(handle, "nvimgcodecCodeStreamCreateFromHostMem", api.CodeStreamCreateFromHostMem, path);
  resolve(handle, "nvimgcodecCodeStreamGetImageInfo", api.CodeStreamGetImageInfo, path);
  resolve(handle, "nvimgcodecCodeStreamDestroy", api.CodeStreamDestroy, path);
  resolve(handle, "nvimgcodecImageCreate", api.ImageCreate, path);
  resolve(handle, "nvimgcodecImageDestroy", api.ImageDestroy, path);
  resolve(handle, "nvimgcodecFutureWaitForAll", api.FutureWaitForAll, path);
  resolve(handle, "nvimgcodecFutureGetProcessingStatus", api.FutureGetProcessingStatus, path);
  resolve(handle, "nvimgcodecFutureDestroy", api.FutureDestroy, path);
  loaded = true;  // the library stays loaded for the life of the process
  return api;
}

std::string status_name(nvimgcodecStatus_t status) {
  const char* name = "an unknown status";
  switch (status) {
    case NVIMGCODEC_STATUS_SUCCESS:
      name = "SUCCESS";
      break;
    case NVIMGCODEC_STATUS_NOT_INITIALIZED:
      name = "NOT_INITIALIZED";
      break;
    case NVIMGCODEC_STATUS_INVALID_PARAMETER:
      name = "INVALID_PARAMETER";
      break;
    case NVIMGCODEC_STATUS_BAD_CODESTREAM:
      name = "BAD_CODESTREAM";
      break;
    case NVIMGCODEC_STATUS_CODESTREAM_UNSUPPORTED:
      name = "CODESTREAM_UNSUPPORTED";
      break;
    case NVIMGCODEC_STATUS_ALLOCATOR_FAILURE:
      name = "ALLOCATOR_FAILURE";
      break;
    case NVIMGCODEC_STATUS_EXECUTION_FAILED:
      name = "EXECUTION_FAILED";
      break;
    case NVIMGCODEC_STATUS_ARCH_MISMATCH:
      name = "ARCH_MISMATCH";
      break;
    case NVIMGCODEC_STATUS_INTERNAL_ERROR:
      name = "INTERNAL_ERROR";
      break;
    case NVIMGCODEC_STATUS_IMPLEMENTATION_UNSUPPORTED:
      name = "IMPLEMENTATION_UNSUPPORTED";
      break;
    case NVIMGCODEC_STATUS_MISSED_DEPENDENCIES:
      name = "MISSED_DEPENDENCIES";
      break;
    default:
      break;
  }
  return message(name, " (", static_cast<int>(status), ")");
}

std::string processing_status_name(nvimgcodecProcessingStatus_t status) {
  switch (status) {
    case NVIMGCODEC_PROCESSING_STATUS_SUCCESS:
      return "SUCCESS";
    case NVIMGCODEC_PROCESSING_STATUS_IMAGE_CORRUPTED:
      return "IMAGE_CORRUPTED";
    case NVIMGCODEC_PROCESSING_STATUS_CODEC_UNSUPPORTED:
      return "CODEC_UNSUPPORTED";
    case NVIMGCODEC_PROCESSING_STATUS_BACKEND_UNSUPPORTED:
      return "BACKEND_UNSUPPORTED";
    case NVIMGCODEC_PROCESSING_STATUS_RESOLUTION_UNSUPPORTED:
      return "RESOLUTION_UNSUPPORTED";
    case NVIMGCODEC_PROCESSING_STATUS_CODESTREAM_UNSUPPORTED:
      return "CODESTREAM_UNSUPPORTED";
    case NVIMGCODEC_PROCESSING_STATUS_SAMPLING_UNSUPPORTED:
      return "SAMPLING_UNSUPPORTED";
    case NVIMGCODEC_PROCESSING_STATUS_SAMPLE_FORMAT_UNSUPPORTED:
      return "SAMPLE_FORMAT_UNSUPPORTED";
    default:
      return message("processing status ", static_cast<uint64_t>(status));
  }
}

}  // namespace robocache::decoders
