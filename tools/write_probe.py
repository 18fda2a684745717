"""How fast can a kernel write a dense grid? (GPU machine; not a test.)

The voxelize write passes (occupancy from bits, sum/mean from slots) write a
large dense result once. This times bare write patterns of the same sizes
against torch's own fill and copy, so that the write passes' gap can be split
into "the pattern" and "the work per cell":

  one16     one 16-byte store per thread, a thread per 4 cells (the shape of
            write_occupancy_kernel / write_dense_kernel)
  one16_cs  the same with streaming (evict-first) stores
  unroll4   a thread stores 4 vectors, a block's stores contiguous per step
  grid4     a grid of 4 blocks of 256 threads per multiprocessor looping over
            the output (grid stride), 16-byte stores
  bits      one16 reading one bit per cell from an L2-resident bitmask (the
            occupancy write pass itself)
  fill_     torch.Tensor.fill_ (memset-like)
  copy_     torch copy of half as many bytes each way (the same bytes moved)

Medians of CUDA-event timings. Usage: python tools/write_probe.py
"""
import statistics

import torch
from torch.utils.cpp_extension import load_inline

SRC = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void one16(float4* out, int64_t n4, float v) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n4) out[i] = make_float4(v, v, v, v);
}
__global__ void one16_cs(float4* out, int64_t n4, float v) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n4) __stcs(out + i, make_float4(v, v, v, v));
}
__global__ void unroll4(float4* out, int64_t n4, float v) {
  int64_t base = int64_t(blockIdx.x) * blockDim.x * 4 + threadIdx.x;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    int64_t i = base + k * blockDim.x;
    if (i < n4) out[i] = make_float4(v, v, v, v);
  }
}
__global__ void grid4(float4* out, int64_t n4, float v) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = make_float4(v, v, v, v);
}
__global__ void bits_write(const uint32_t* bits, float4* out, int64_t n4) {
  int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n4) return;
  int64_t v = i * 4;
  uint32_t w = bits[v >> 5] >> (v & 31);
  out[i] = make_float4(float(w & 1u), float((w >> 1) & 1u), float((w >> 2) & 1u), float((w >> 3) & 1u));
}

void run(torch::Tensor out, torch::Tensor bits, int64_t kind) {
  auto stream = at::cuda::getCurrentCUDAStream();
  int64_t n4 = out.numel() / 4;
  float4* o = reinterpret_cast<float4*>(out.data_ptr<float>());
  unsigned blocks = (n4 + 255) / 256;
  int sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  switch (kind) {
    case 0: one16<<<blocks, 256, 0, stream>>>(o, n4, 1.0f); break;
    case 1: one16_cs<<<blocks, 256, 0, stream>>>(o, n4, 1.0f); break;
    case 2: unroll4<<<(n4 + 1023) / 1024, 256, 0, stream>>>(o, n4, 1.0f); break;
    case 3: grid4<<<sms * 4, 256, 0, stream>>>(o, n4, 1.0f); break;
    case 4: bits_write<<<blocks, 256, 0, stream>>>(reinterpret_cast<const uint32_t*>(bits.data_ptr<int>()), o, n4); break;
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
"""


def timed(fn, reps=50):
    for _ in range(5):
        fn()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    return statistics.median(ts)


def main():
    mod = load_inline("write_probe", cpp_sources="void run(torch::Tensor, torch::Tensor, int64_t);",
                      cuda_sources=SRC, functions=["run"], extra_cuda_cflags=["-O3", "-arch=sm_90"])
    print(torch.cuda.get_device_name(), torch.__version__)
    for mb in (192, 268):
        n = mb * 1_000_000 // 4 // 4 * 4
        out = torch.empty(n, device="cuda")
        bits = torch.randint(0, 2**31 - 1, ((n + 31) // 32,), device="cuda", dtype=torch.int32)
        src = torch.randn(n // 2, device="cuda")
        dst = torch.empty_like(src)
        rows = [(name, timed(lambda k=k: mod.run(out, bits, k)))
                for k, name in enumerate(["one16", "one16_cs", "unroll4", "grid4", "bits"])]
        rows.append(("fill_", timed(lambda: out.fill_(1.0))))
        rows.append(("copy_", timed(lambda: dst.copy_(src))))
        for name, us in rows:
            print(f"{mb} MB  {name:9s} {us:8.1f} us  {n * 4 / us / 1e3:7.0f} GB/s")


if __name__ == "__main__":
    main()
