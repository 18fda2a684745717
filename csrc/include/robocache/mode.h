// How an operator reads a stream at a query time, for every operator that
// does: resample and fuse take nearest, previous and linear;
// sample_windows and anchor_windows also take mean. Every op's mode string
// goes through one parser, parse_mode (csrc/checks/common.h).
#pragma once

#include <cstdint>

namespace robocache {

//  - nearest: the closest sample (a tie goes to the later one);
//  - previous: the last sample at or before the query;
//  - linear: the two samples around the query, blended by time;
//  - mean: the mean of the samples in (q - interval, q] (windows only).
enum class Mode : int32_t { Nearest = 0, Previous = 1, Linear = 2, Mean = 3 };

// Which modes an operator takes: the interpolating ops (resample, fuse) no
// mean; the window ops (sample_windows, anchor_windows) all four.
enum class ModeSet : int32_t { Interp = 0, Window = 1 };

// Modes that compute new values from several samples: they need floating values.
constexpr bool mode_blends(Mode m) {
  return m == Mode::Linear || m == Mode::Mean;
}

// The mode as the operators spell it.
constexpr const char* mode_name(Mode m) {
  switch (m) {
    case Mode::Nearest:
      return "nearest";
    case Mode::Previous:
      return "previous";
    case Mode::Linear:
      return "linear";
    case Mode::Mean:
      return "mean";
  }
  return "";
}

}  // namespace robocache
