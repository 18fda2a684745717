// CUDA entry point of robocache::augment: allocation and the two launches of
// augment_kernels.cuh. Current CUDA stream, device guard, no host sync; the
// parameters are not read on the host (a crop outside the frame is clamped
// into it by the kernel; the CPU kernel checks them).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include "augment_kernels.cuh"
#include "launch.cuh"
#include "robocache/checks.h"

namespace robocache {
namespace {

constexpr const char* kOp = "robocache.augment";

at::Tensor augment_cuda(const at::Tensor& images_in, const at::Tensor& params_in,
                        c10::SymInt height, c10::SymInt width, c10::string_view output) {
  const auto checked = check_augment(images_in, params_in, height, width, output);
  const c10::cuda::CUDAGuard guard(images_in.device());
  const at::Tensor images = images_in.contiguous(), params = params_in.contiguous();
  at::Tensor out =
      at::empty_symint(augment_shape(checked), images.options().dtype(augment_dtype(checked)));
  if (out.numel() == 0)
    return out;
  const int64_t B = images.size(0), F = images.size(1), H = images.size(2), W = images.size(3);
  const int C = int(images.size(4));
  const int64_t out_h = height.expect_int(), out_w = width.expect_int();
  const int64_t pixels = out_h * out_w, N = B * F;
  at::Tensor first = at::empty({N, pixels, C}, images.options());
  at::Tensor grey_sums = at::zeros({N}, images.options().dtype(at::kLong));
  auto* sums = reinterpret_cast<unsigned long long*>(grey_sums.data_ptr<int64_t>());
  auto cuda_stream = at::cuda::getCurrentCUDAStream();
  const int64_t blocks_per_image = (pixels + kThreads - 1) / kThreads;
  augment_first_pass_kernel<kThreads>
      <<<grid_blocks(N * blocks_per_image, 1, kOp, "frames", N), kThreads, 0, cuda_stream>>>(
          images.data_ptr<uint8_t>(), params.data_ptr<float>(), F, H, W, C, out_h, out_w,
          blocks_per_image, first.data_ptr<uint8_t>(), sums);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t total = N * pixels;
  if (checked.output == augment::Output::Uint8) {
    augment_second_pass_kernel<uint8_t><<<grid_blocks(total, kOp), kThreads, 0, cuda_stream>>>(
        first.data_ptr<uint8_t>(), params.data_ptr<float>(), sums, F, C, pixels, total,
        checked.output, out.data_ptr<uint8_t>());
  } else {
    augment_second_pass_kernel<float><<<grid_blocks(total, kOp), kThreads, 0, cuda_stream>>>(
        first.data_ptr<uint8_t>(), params.data_ptr<float>(), sums, F, C, pixels, total,
        checked.output, out.data_ptr<float>());
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("augment", &augment_cuda);
}

}  // namespace robocache
