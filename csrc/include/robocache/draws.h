// The math of robocache::draw_mixture, shared by its CPU and CUDA kernels:
// a counter-based hash (SplitMix64's finaliser) of each window's key, turned
// into a store drawn by weight and an anchor drawn uniformly within it. Each
// window's draws depend on its key alone, so the host and a GPU draw alike.
#pragma once

#include <cstdint>

#include "robocache/host_device.h"

namespace robocache {
namespace draws {

// Two numbers per key: stream 0 picks the store, stream 1 the anchor.
constexpr int kStoreStream = 0;
constexpr int kAnchorStream = 1;

// A float64 in [0, 1) from a key and a stream: SplitMix64's finaliser of
// (2 key + stream) times the golden ratio, its top 53 bits.
ROBOCACHE_HD double uniform(int64_t key, int stream) {
  uint64_t z = (uint64_t(key) * 2u + uint64_t(stream)) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  return double(z >> 11) * (1.0 / 9007199254740992.0);  // 2^-53
}

struct Draw {
  int64_t store, position;
};

// Window `key`'s store and anchor. weights (S,) >= 0, not all 0; counts
// (S,) the stores' anchors, which lie back to back. The store is the first
// whose running sum of weights exceeds u times their sum (the last store of
// positive weight where rounding leaves none); the anchor is floor(u' count)
// within it, and `position` its index among all anchors. Weights all 0 give
// store -1, a drawn store without anchors position -1.
ROBOCACHE_HD Draw draw(int64_t key, const double* weights, const int64_t* counts, int64_t S) {
  double total = 0.0;
  for (int64_t s = 0; s < S; ++s)
    total += weights[s] > 0.0 ? weights[s] : 0.0;
  const double target = uniform(key, kStoreStream) * total;
  double running = 0.0;
  int64_t store = -1, start = 0, chosen_start = 0;
  for (int64_t s = 0; s < S; ++s) {
    if (weights[s] > 0.0) {
      store = s;
      chosen_start = start;
      running += weights[s];
      if (target < running)
        break;
    }
    start += counts[s];
  }
  if (store < 0 || counts[store] <= 0)
    return {store, -1};
  const int64_t count = counts[store];
  int64_t within = int64_t(uniform(key, kAnchorStream) * double(count));
  within = within < count - 1 ? within : count - 1;
  return {store, chosen_start + within};
}

}  // namespace draws
}  // namespace robocache
