// Shared interpolation math for resample and fuse, forward and backward.
//
// Everything here is host/device code, so the CPU kernels, the CUDA kernels
// and their backward passes all locate queries and compute weights the same
// way. There is exactly one copy of the search and of the weights.
#pragma once

#include <cstdint>
#include <type_traits>

#include "robocache/host_device.h"
#include "robocache/mode.h"

namespace robocache {

// Weights are computed in the precision of the times, never lower: a float64
// unix-epoch time or an int64 nanosecond stamp keeps its resolution because
// the differences (q - t0) and (t1 - t0) are formed in the times' own type
// before the division.
template <typename stamp_t>
struct weight_type {
  using type = double;
};
template <>
struct weight_type<float> {
  using type = float;
};
template <typename stamp_t>
using weight_t = typename weight_type<stamp_t>::type;

template <typename T>
ROBOCACHE_HD bool is_nan(T x) {
  if constexpr (std::is_floating_point<T>::value) {
    return x != x;
  } else {
    return false;
  }
}

// Where one query lands among the valid source samples.
//   out = v[i0] + w * (v[i1] - v[i0]);   w == 0 means out = v[i0] exactly.
// `dt` is t[i1] - t[i0] for a linear query strictly inside the valid range
// and 0 otherwise; the query gradient is the slope (v[i1] - v[i0]) / dt.
template <typename W>
struct Location {
  int64_t i0;
  int64_t i1;
  W w;
  W dt;
  bool nan;  // the output is NaN (NaN query, or a row with no valid sample)
};

// Number of the first n samples whose time is <= q (numpy's searchsorted
// side="right"). Repeated times resolve to the last of them, which makes the
// interpolant right-continuous.
template <typename stamp_t>
ROBOCACHE_HD int64_t upper_bound(const stamp_t* times, int64_t stride, int64_t n, stamp_t q) {
  int64_t lo = 0;
  int64_t hi = n;
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    if (times[mid * stride] <= q) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// upper_bound(times, stride, n, q) again, starting from a guess `hint` in
// [0, n] (the answer for a nearby query): gallops away from it in doubling
// steps, then bisects the bracket found. Costs O(log distance) instead of
// O(log n), which makes sorted query sequences cheap on the CPU. Returns the
// same index as upper_bound for non-decreasing times.
template <typename stamp_t>
ROBOCACHE_HD int64_t upper_bound_from(const stamp_t* times, int64_t stride, int64_t n, stamp_t q,
                                      int64_t hint) {
  hint = hint < 0 ? 0 : (hint > n ? n : hint);
  int64_t lo, hi;
  if (hint < n && times[hint * stride] <= q) {  // the answer is past hint
    lo = hint + 1;
    for (int64_t step = 1;; step <<= 1) {
      const int64_t probe = lo + step - 1;
      if (probe >= n) {
        hi = n;
        break;
      }
      if (times[probe * stride] > q) {
        hi = probe;
        break;
      }
      lo = probe + 1;
    }
  } else {  // the answer is at or before hint
    hi = hint;
    for (int64_t step = 1;; step <<= 1) {
      const int64_t probe = hi - step;
      if (probe < 0) {
        lo = 0;
        break;
      }
      if (times[probe * stride] <= q) {
        lo = probe + 1;
        break;
      }
      hi = probe;
    }
  }
  // times[lo - 1] <= q (or lo == 0) and times[hi] > q (or hi == n).
  return lo + upper_bound(times + lo * stride, stride, hi - lo, q);
}

// Clamp a per-row length into [0, S]. Rows with length < 1 give NaN (see
// locate); lengths past S are treated as S. On the CPU lengths are validated
// before this is reached; on CUDA this is the no-host-sync contract.
ROBOCACHE_HD int64_t clamp_length(int64_t length, int64_t S) {
  return length > S ? S : length;
}

// Where query q lands, given k = upper_bound(times, stride, L, q) for a
// non-NaN q and L >= 1 (locate below, or callers that search their own way).
template <typename stamp_t>
ROBOCACHE_HD Location<weight_t<stamp_t>> locate_at(const stamp_t* times, int64_t stride, int64_t L,
                                                   stamp_t q, Mode mode, int64_t k) {
  using W = weight_t<stamp_t>;
  Location<W> loc{0, 0, W(0), W(0), false};
  if (k == 0) {
    return loc;  // before the first sample: hold the first value
  }
  if (k == L) {
    loc.i0 = loc.i1 = L - 1;  // at or after the last sample: hold the last
    return loc;
  }
  // Here t0 <= q < t1, so t1 > t0 strictly.
  const stamp_t t0 = times[(k - 1) * stride];
  const stamp_t t1 = times[k * stride];
  switch (mode) {
    case Mode::Linear:
      loc.i0 = k - 1;
      loc.i1 = k;
      loc.dt = W(t1 - t0);
      loc.w = W(q - t0) / loc.dt;
      break;
    case Mode::Nearest:
      // A tie goes to the later sample.
      loc.i0 = loc.i1 = ((t1 - q) <= (q - t0)) ? k : k - 1;
      break;
    case Mode::Previous:
    case Mode::Mean:  // resample and fuse reject mean (parse_mode, ModeSet::Interp)
      loc.i0 = loc.i1 = k - 1;
      break;
  }
  return loc;
}

// Locate query q among times[0 .. L) (element stride `stride`). With a
// `hint` (in/out: the search result of a nearby query of the same row, or -1
// for none) the search gallops from it and leaves its own result there.
template <typename stamp_t>
ROBOCACHE_HD Location<weight_t<stamp_t>> locate(const stamp_t* times, int64_t stride, int64_t L,
                                                stamp_t q, Mode mode, int64_t* hint = nullptr) {
  using W = weight_t<stamp_t>;
  Location<W> loc{0, 0, W(0), W(0), false};
  if (L < 1 || is_nan(q)) {
    loc.nan = true;
    return loc;
  }
  const int64_t k = hint && *hint >= 0 ? upper_bound_from(times, stride, L, q, *hint)
                                       : upper_bound(times, stride, L, q);
  if (hint)
    *hint = k;
  return locate_at(times, stride, L, q, mode, k);
}

template <typename C>
ROBOCACHE_HD bool is_finite(C x) {
  return x - x == C(0);  // inf - inf and NaN - NaN are NaN
}

// blend's rare path: the quick result r = v0 + w d (d = v1 - v0) is not finite.
//  - Both samples finite: d overflowed (e.g. -3e38 and 3e38 in float32), so
//    blend without forming it; each term is bounded by the larger |v|.
//  - A sample is not finite: numpy.interp's rule. An infinite r stands; a
//    NaN r is retried from v1's side; equal samples give that sample.
template <typename C>
ROBOCACHE_HD C blend_non_finite(C v0, C v1, C w, C d, C r) {
  if (is_finite(v0) && is_finite(v1))
    return (C(1) - w) * v0 + w * v1;
  if (!is_nan(r))
    return r;
  const C from_right = v1 + (w - C(1)) * d;
  if (!is_nan(from_right))
    return from_right;
  return v0 == v1 ? v0 : from_right;
}

// The quick blend, v0 + w (v1 - v0), given d = v1 - v0: one expression, so
// that blend and blend_quick_lanes round alike.
template <typename C>
ROBOCACHE_HD C blend_quick(C v0, C d, C w) {
  return v0 + w * d;
}

// The blend used everywhere (robocache.reference.blend states the same in
// PyTorch). Exact at knots: w == 0 returns v0 untouched, even when the
// neighbour is not finite. A finite result costs one extra test.
template <typename C>
ROBOCACHE_HD C blend(C v0, C v1, C w) {
  if (w == C(0))
    return v0;
  const C d = v1 - v0;
  const C r = blend_quick(v0, d, w);
  return is_finite(r) ? r : blend_non_finite(v0, v1, w, d, r);
}

// The quick blend over N values sharing one weight w in [0, 1], in place in
// v0 (Array: a C array or cutlass::Array), adding r * 0 for each result r to
// `non_finite`: that is 0 for a finite r and NaN otherwise, so non_finite
// stays 0 exactly when every result is finite. A finite result is blend's
// exactly (finite samples whose difference did not overflow); where
// non_finite ends up nonzero, the caller blends those inputs again with
// blend, value by value. The fast path costs one multiply-add per value.
template <int N, typename Array, typename C>
ROBOCACHE_HD void blend_quick_lanes(Array& v0, const Array& v1, C w, C& non_finite) {
  ROBOCACHE_UNROLL
  for (int e = 0; e < N; ++e) {
    v0[e] = blend_quick(v0[e], v1[e] - v0[e], w);
    non_finite += v0[e] * C(0);
  }
}

}  // namespace robocache
