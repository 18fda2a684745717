// Vectorized load/convert layer for the CUDA kernels, on CUTLASS.
//
// One VecIO<value_t, N>::load reads N elements as a single 16-byte access
// (cutlass::AlignedArray) and converts them to the compute type (float for
// half/bfloat16/float, double for double) with cutlass::NumericArrayConverter;
// store does the reverse with round-to-nearest-even, as torch does.
#pragma once

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>

#include <limits>
#include <type_traits>

#include "robocache/dispatch.h"

namespace robocache {

template <typename T>
struct cutlass_of {
  using type = T;
};
template <>
struct cutlass_of<c10::Half> {
  using type = cutlass::half_t;
};
template <>
struct cutlass_of<c10::BFloat16> {
  using type = cutlass::bfloat16_t;
};

// Elements per 16-byte and per 8-byte access.
template <typename value_t>
constexpr int kVec16 = 16 / static_cast<int>(sizeof(value_t));
template <typename value_t>
constexpr int kVec8 = 8 / static_cast<int>(sizeof(value_t));

template <typename value_t, int N>
struct VecIO {
  using storage_t = typename cutlass_of<value_t>::type;
  using C = compute_t<value_t>;
  // N elements as one aligned vector of words: a single 16-, 8-, 4- or 2-byte access.
  using Words = cutlass::AlignedArray<storage_t, N>;
  using Frag = cutlass::Array<C, N>;
  static_assert(sizeof(storage_t) == sizeof(value_t), "storage layout must match torch's");

  // The same bytes as one plain integer type, for the cache-hinted intrinsics.
  using Raw = std::conditional_t<
      sizeof(Words) == 16, int4,
      std::conditional_t<sizeof(Words) == 8, int2,
                         std::conditional_t<sizeof(Words) == 4, int, unsigned short>>>;
  static_assert(sizeof(Raw) == sizeof(Words), "no raw word of this size");

  // Inputs are read-only for the kernel's lifetime: the non-coherent path.
  __device__ __forceinline__ static Raw load_raw(const value_t* p) {
    return __ldg(reinterpret_cast<const Raw*>(p));
  }

  // Loads kept raw until used take a register per 4 bytes, not per element.
  __device__ __forceinline__ static Frag convert(const Raw& raw) {
    Words words;
    memcpy(&words, &raw, sizeof(Raw));
    return cutlass::NumericArrayConverter<C, storage_t, N>{}(words);
  }

  __device__ __forceinline__ static Frag load(const value_t* p) { return convert(load_raw(p)); }

  // Outputs are written once and not read back here: evict-first stores keep
  // the L2 for the inputs that neighbouring queries share.
  __device__ __forceinline__ static void store(value_t* p, const Frag& f) {
    Words words;
    static_cast<cutlass::Array<storage_t, N>&>(words) =
        cutlass::NumericArrayConverter<storage_t, C, N>{}(f);
    Raw raw;
    memcpy(&raw, &words, sizeof(Raw));
    __stcs(reinterpret_cast<Raw*>(p), raw);
  }

  __device__ __forceinline__ static Frag nan() {
    Frag f;
#pragma unroll
    for (int k = 0; k < N; ++k)
      f[k] = std::numeric_limits<C>::quiet_NaN();
    return f;
  }
};

}  // namespace robocache
