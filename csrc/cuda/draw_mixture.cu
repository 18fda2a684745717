// CUDA kernel and entry point of robocache::draw_mixture (the math:
// robocache/draws.h): a thread per window. Current CUDA stream, device
// guard, no host sync; the key, weights and counts are read on the device
// only (the CPU kernel checks their values).
#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/library.h>

#include <tuple>

#include "launch.cuh"
#include "robocache/checks.h"
#include "robocache/draws.h"

namespace robocache {
namespace {

__global__ void draw_mixture_kernel(const int64_t* __restrict__ base,
                                    const double* __restrict__ weights,
                                    const int64_t* __restrict__ counts, int64_t S, int64_t B,
                                    int64_t* __restrict__ store, int64_t* __restrict__ position) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= B)
    return;
  const auto d = draws::draw(int64_t(uint64_t(base[0]) + uint64_t(i)), weights, counts, S);
  store[i] = d.store;
  position[i] = d.position;
}

std::tuple<at::Tensor, at::Tensor> draw_mixture_cuda(const at::Tensor& base_in,
                                                     c10::SymInt batch_size,
                                                     const at::Tensor& weights_in,
                                                     const at::Tensor& counts_in) {
  const auto checked = check_draw_mixture(base_in, batch_size, weights_in, counts_in);
  const c10::cuda::CUDAGuard guard(weights_in.device());
  const at::Tensor base = base_in.contiguous(), weights = weights_in.contiguous(),
                   counts = counts_in.contiguous();
  const int64_t B = checked.B.expect_int(), S = weights.size(0);
  at::Tensor store = at::empty({B}, counts.options()), position = at::empty({B}, counts.options());
  if (B == 0)
    return {store, position};
  const unsigned int blocks = grid_blocks(B, kThreads, "robocache.draw_mixture", "windows", B);
  draw_mixture_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      base.data_ptr<int64_t>(), weights.data_ptr<double>(), counts.data_ptr<int64_t>(), S, B,
      store.data_ptr<int64_t>(), position.data_ptr<int64_t>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return {store, position};
}

}  // namespace

TORCH_LIBRARY_IMPL(robocache, CUDA, m) {
  m.impl("draw_mixture", &draw_mixture_cuda);
}

}  // namespace robocache
