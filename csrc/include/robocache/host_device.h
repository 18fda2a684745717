// The qualifiers of functions that the CPU and CUDA kernels share.
#pragma once

#if defined(__CUDACC__) || defined(__HIPCC__)
#define ROBOCACHE_HD __host__ __device__ __forceinline__
#define ROBOCACHE_UNROLL _Pragma("unroll")
#else
#define ROBOCACHE_HD inline
#define ROBOCACHE_UNROLL
#endif
