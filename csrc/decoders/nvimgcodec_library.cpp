#include "nvimgcodec_library.h"

#include <dlfcn.h>

#include <cstdio>
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

namespace {

template <typename T>
struct Named {
  T value;
  const char* name;
};

#define ROBOCACHE_NAMED(prefix, name) {prefix##name, #name}

const Named<nvimgcodecStatus_t> kStatuses[] = {
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, SUCCESS),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, NOT_INITIALIZED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, INVALID_PARAMETER),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, BAD_CODESTREAM),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, CODESTREAM_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, ALLOCATOR_FAILURE),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXECUTION_FAILED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, ARCH_MISMATCH),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, INTERNAL_ERROR),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, IMPLEMENTATION_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, MISSED_DEPENDENCIES),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXTENSION_BAD_CODE_STREAM),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXTENSION_CODESTREAM_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXTENSION_INCOMPLETE_BITSTREAM),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXTENSION_EXECUTION_FAILED),
    ROBOCACHE_NAMED(NVIMGCODEC_STATUS_, EXTENSION_CUDA_CALL_ERROR),
};

const Named<nvimgcodecProcessingStatus_t> kProcessingStatuses[] = {
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, SUCCESS),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, SATURATED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, FAIL),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, IMAGE_CORRUPTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, CODEC_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, BACKEND_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, ENCODING_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, RESOLUTION_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, CODESTREAM_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, COLOR_SPEC_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, ORIENTATION_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, ROI_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, SAMPLING_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, SAMPLE_TYPE_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, SAMPLE_FORMAT_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, NUM_IMAGES_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, NUM_PLANES_UNSUPPORTED),
    ROBOCACHE_NAMED(NVIMGCODEC_PROCESSING_STATUS_, NUM_CHANNELS_UNSUPPORTED),
};

#undef ROBOCACHE_NAMED

template <typename T, size_t N>
std::string name_of(const Named<T> (&names)[N], T value) {
  for (const auto& named : names) {
    if (static_cast<uint64_t>(named.value) == static_cast<uint64_t>(value)) {
      return named.name;
    }
  }
  char hex[24];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(value));
  return message("an unknown status ", hex);
}

}  // namespace

std::string status_name(nvimgcodecStatus_t status) {
  return message(name_of(kStatuses, status), " (", static_cast<int>(status), ")");
}

std::string processing_status_name(nvimgcodecProcessingStatus_t status) {
  return name_of(kProcessingStatuses, status);
}

void check_status(nvimgcodecStatus_t status, const char* what) {
  ROBOCACHE_CHECK(status == NVIMGCODEC_STATUS_SUCCESS, "robocache: nvImageCodec's ", what,
                  " failed: ", status_name(status));
}

}  // namespace robocache::decoders
