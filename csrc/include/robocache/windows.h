// Shared math of robocache::sample_windows: where a query lands among one
// episode's samples of a packed stream, and whether it is padding. Host and
// device code, used by the CPU, CUDA and backward kernels alike.
//
// A packed stream holds every episode's samples back to back: episode e owns
// rows [offsets[e], offsets[e + 1]) of values and times (int64 nanoseconds,
// non-decreasing within an episode).
#pragma once

#include <cstdint>

#include "robocache/interp.h"

namespace robocache {

// The scalar arguments of sample_windows, in nanoseconds.
struct WindowRule {
  Mode mode;
  int64_t interval;        // mean: the samples in (q - interval, q]; > 0
  int64_t tolerance;       // < 0: none; else pad when a sample used is farther from q
  int64_t edge_tolerance;  // >= 0: q within this of the episode's first/last sample is not pad
};

// What one query reads: rows [lo, hi) averaged (mean), or rows i0 and i1
// blended with weight w (linear), or row i0 alone (w == 0). Rows are global
// (already offset into the packed stream). `empty`: the episode has no
// samples of this stream (the output is zeros).
struct WindowPick {
  int64_t i0, i1;
  double w;
  int64_t lo, hi;
  int64_t age;  // q - the time of the sample the age is measured from (ns, saturating)
  bool pad, empty;
};

// a - b without signed overflow, clamped to the int64 range.
ROBOCACHE_HD int64_t saturating_sub(int64_t a, int64_t b) {
  const uint64_t r = uint64_t(a) - uint64_t(b);
  const int64_t s = int64_t(r);
  if (((a ^ b) & (a ^ s)) < 0)  // the signs say it wrapped
    return a < 0 ? INT64_MIN : INT64_MAX;
  return s;
}

// a + b as int64 addition wraps (torch's int64 add), without signed overflow.
ROBOCACHE_HD int64_t wrapping_add(int64_t a, int64_t b) {
  return int64_t(uint64_t(a) + uint64_t(b));
}

// |a - b| without overflow.
ROBOCACHE_HD uint64_t distance(int64_t a, int64_t b) {
  return a >= b ? uint64_t(a) - uint64_t(b) : uint64_t(b) - uint64_t(a);
}

// |a - b| > tol, for tol >= 0.
ROBOCACHE_HD bool farther_than(int64_t a, int64_t b, int64_t tol) {
  return distance(a, b) > uint64_t(tol);
}

// The first row in [lo, hi) whose time is > q (hi if none).
ROBOCACHE_HD int64_t first_after(const int64_t* times, int64_t lo, int64_t hi, int64_t q) {
  while (lo < hi) {
    const int64_t mid = lo + ((hi - lo) >> 1);
    if (times[mid] <= q) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// first_after over rows [a, b) whose first and last times are `first` and
// `last`, starting at the row where q would sit on an even clock between
// them: on a regular clock that guess is the row, and two more reads confirm
// it (a bisection from scratch reads log2(b - a) times, one after another).
// From the guess it gallops to a bracket, then bisects inside it.
ROBOCACHE_HD int64_t first_after_guessed(const int64_t* times, int64_t a, int64_t b, int64_t q,
                                         int64_t first, int64_t last) {
  if (q < first)
    return a;
  if (q >= last)
    return b;
  // Here times[a] <= q < times[b - 1], so the answer lies in [a + 1, b - 1].
  const double frac = double(distance(q, first)) / double(distance(last, first));
  int64_t g = a + int64_t(frac * double(b - 1 - a));
  g = g < a ? a : (g > b - 1 ? b - 1 : g);
  int64_t lo, hi;
  if (times[g] <= q) {  // the answer is above g
    lo = g + 1;
    hi = b - 1;
    for (int64_t step = 1; g + step < b - 1; step *= 2) {
      if (times[g + step] > q) {
        hi = g + step;
        break;
      }
      lo = g + step + 1;
    }
  } else {  // the answer is g or below
    lo = a + 1;
    hi = g;
    for (int64_t step = 1; g - step > a; step *= 2) {
      if (times[g - step] <= q) {
        lo = g - step + 1;
        break;
      }
      hi = g - step;
    }
  }
  return first_after(times, lo, hi, q);  // times[hi] > q: hi if no row before it is
}

// The episode among E whose rows [offsets[e], offsets[e + 1]) hold `row`
// (offsets non-decreasing); -1 when row lies outside [offsets[0], offsets[E]).
ROBOCACHE_HD int64_t episode_of_row(const int64_t* offsets, int64_t E, int64_t row) {
  if (E <= 0 || row < offsets[0] || row >= offsets[E])
    return -1;
  return first_after(offsets, 0, E + 1, row) - 1;
}

// Where query q lands among rows [a, b) of `times`.
//  - nearest: the closest sample (a tie goes to the later one);
//  - previous: the last sample at or before q;
//  - linear: the two samples around q, blended by time;
//  - mean: the mean of the samples in (q - interval, q]; an empty interval
//    takes the previous sample and is padding.
// Outside the episode's samples (beyond edge_tolerance) every mode takes the
// edge sample and is padding. With a tolerance, a query is also padding when
// a sample it uses lies farther than the tolerance from it.
ROBOCACHE_HD WindowPick pick_window(const int64_t* times, int64_t a, int64_t b, int64_t q,
                                    const WindowRule& rule) {
  WindowPick p{a, a, 0.0, a, a, 0, false, false};
  if (b <= a) {
    p.empty = p.pad = true;
    return p;
  }
  const int64_t first = times[a], last = times[b - 1];
  const int64_t k = first_after_guessed(times, a, b, q, first, last);  // [a, k) are <= q
  const int64_t prev = k > a ? k - 1 : a;
  p.i0 = p.i1 = prev;
  switch (rule.mode) {
    case Mode::Previous:
      break;
    case Mode::Nearest:
      if (k == a) {
        p.i0 = p.i1 = a;
      } else if (k < b && distance(times[k], q) <= distance(q, times[k - 1])) {
        p.i0 = p.i1 = k;  // t[k-1] <= q < t[k], and t[k] is as close or closer
      }
      break;
    case Mode::Linear:
      if (k > a && k < b && times[k - 1] < q) {
        p.i1 = k;
        p.w = double(distance(q, times[k - 1])) / double(distance(times[k], times[k - 1]));
      }
      break;
    case Mode::Mean: {
      const int64_t from = q >= INT64_MIN + rule.interval ? q - rule.interval : INT64_MIN;
      const int64_t lo = first_after(times, a, k, from);  // rows [lo, k) lie in (from, q]
      if (lo < k) {
        p.lo = lo;
        p.hi = k;
      } else {
        p.pad = true;  // a gap: no sample in the interval
      }
      break;
    }
  }
  // The samples read span rows [oldest, newest]; the age is measured from
  // the last one read at or before q (i0 for the point modes, which is the
  // chosen sample itself for nearest, so a later nearest sample gives a
  // negative age).
  const bool averaged = p.hi > p.lo;
  const int64_t oldest = averaged ? p.lo : p.i0;
  const int64_t newest = averaged ? p.hi - 1 : (p.w > 0.0 ? p.i1 : p.i0);
  p.age = saturating_sub(q, times[averaged ? p.hi - 1 : p.i0]);
  if ((q < first && farther_than(first, q, rule.edge_tolerance)) ||
      (q > last && farther_than(q, last, rule.edge_tolerance))) {
    p.pad = true;
  }
  if (rule.tolerance >= 0 && (farther_than(q, times[oldest], rule.tolerance) ||
                              farther_than(q, times[newest], rule.tolerance))) {
    p.pad = true;
  }
  return p;
}

// Calls f(row, weight) for each row the pick reads, with the weight of its
// value in the output: 1 for a point sample, (1 - w) and w for linear, 1 / n
// for a mean of n. The backward's rule (the forward is linear in values).
template <typename F>
ROBOCACHE_HD void for_each_source(const WindowPick& p, F&& f) {
  if (p.empty)
    return;
  if (p.hi > p.lo) {
    const double share = 1.0 / double(p.hi - p.lo);
    for (int64_t i = p.lo; i < p.hi; ++i)
      f(i, share);
  } else if (p.w > 0.0) {
    f(p.i0, 1.0 - p.w);
    f(p.i1, p.w);
  } else {
    f(p.i0, 1.0);
  }
}

}  // namespace robocache
