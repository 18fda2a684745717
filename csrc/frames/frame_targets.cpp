#include "frame_targets.h"

#include <robocache/error.h>

namespace robocache::decoders {

std::string wrong_size(int64_t height, int64_t width, const FrameTarget& frame) {
  return message("the image is ", height, "x", width, "; its frames' shape says ", frame.height,
                 "x", frame.width);
}

void check_encoded(const at::Tensor& values, const at::Tensor& byte_offsets, const char* where) {
  ROBOCACHE_CHECK_VALUE(values.device().is_cpu() && values.scalar_type() == at::kByte &&
                            values.dim() == 1 && values.is_contiguous(),
                        where,
                        ": values must be the frames' bytes, a contiguous (n,) uint8 "
                        "tensor in host memory; got ",
                        values.scalar_type(), " on ", values.device());
  ROBOCACHE_CHECK_VALUE(byte_offsets.device().is_cpu() && byte_offsets.scalar_type() == at::kLong &&
                            byte_offsets.dim() == 1 && byte_offsets.is_contiguous() &&
                            byte_offsets.numel() >= 1,
                        where,
                        ": byte_offsets must be a contiguous (N + 1,) int64 tensor in "
                        "host memory");
}

std::vector<FrameTarget> frame_targets(const at::Tensor& values, const at::Tensor& byte_offsets,
                                       const at::Tensor& rows, const at::Tensor& out,
                                       const char* where) {
  check_encoded(values, byte_offsets, where);
  ROBOCACHE_CHECK_VALUE(rows.device().is_cpu() && rows.scalar_type() == at::kLong &&
                            rows.dim() == 1 && rows.is_contiguous(),
                        where, ": rows must be a contiguous (N,) int64 host tensor");
  ROBOCACHE_CHECK_VALUE(out.scalar_type() == at::kByte && out.dim() == 4 && out.is_contiguous() &&
                            out.size(0) == rows.numel() && (out.size(3) == 1 || out.size(3) == 3),
                        where,
                        ": out must be a contiguous (N, H, W, C) uint8 tensor with C of 1 or 3, "
                        "N = rows; got ",
                        out.scalar_type(), " of ", out.sizes());
  const int64_t frames = byte_offsets.numel() - 1;
  const int64_t* bounds = byte_offsets.data_ptr<int64_t>();
  const int64_t* wanted = rows.data_ptr<int64_t>();
  const uint8_t* bytes = values.data_ptr<uint8_t>();
  uint8_t* pixels = out.data_ptr<uint8_t>();
  std::vector<FrameTarget> targets;
  targets.reserve(static_cast<size_t>(rows.numel()));
  for (int64_t i = 0; i < rows.numel(); ++i) {
    const int64_t row = wanted[i];
    ROBOCACHE_CHECK_VALUE(row >= 0 && row < frames, where, ": row ", row, " is not a frame of the ",
                          frames, " the byte offsets hold");
    const int64_t begin = bounds[row], end = bounds[row + 1];
    ROBOCACHE_CHECK_VALUE(0 <= begin && begin <= end && end <= values.numel(), where,
                          ": the byte offsets of row ", row, " lie outside the values");
    FrameTarget target{bytes + begin, static_cast<size_t>(end - begin),
                       nullptr,       out.size(1),
                       out.size(2),   out.size(3)};
    target.out = pixels + static_cast<size_t>(i) * target.pixel_bytes();
    targets.push_back(target);
  }
  return targets;
}

}  // namespace robocache::decoders
