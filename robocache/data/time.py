"""Time on the data side: int64 nanoseconds everywhere, converted from
seconds here and only here, with the checks each conversion needs.

int64 nanoseconds reach about 9.22e9 s (292 years) either side of zero:
Unix epoch stamps in seconds or nanoseconds fit; milliseconds since the
epoch given as seconds do not, and are refused with the unit named.
"""

import math
import numbers
import warnings

import numpy as np
import torch

NS_PER_S = 1_000_000_000
_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)
# The largest magnitude in seconds whose nanoseconds fit in int64.
MAX_SECONDS = _INT64_MAX / NS_PER_S


def _range_error(what, value):
    hint = ""
    if abs(value) >= MAX_SECONDS:
        for unit, scale in (("milliseconds", 1e3), ("microseconds", 1e6), ("nanoseconds", 1e9)):
            if abs(value) / scale < MAX_SECONDS:
                hint = f" (if these are {unit}, divide by {scale:.0e}, or pass int64 nanoseconds)"
                break
    return ValueError(
        f"{what}: {value!r} seconds is outside the range of int64 nanoseconds "
        f"(|t| < {MAX_SECONDS:.4g} s){hint}"
    )


def seconds_to_ns(seconds, what):
    """A finite number of seconds as int nanoseconds (rounded); ``what`` names
    the argument in the errors."""
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise TypeError(f"{what} must be a number of seconds; got {seconds!r}")
    seconds = float(seconds)
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be a finite number of seconds; got {seconds!r}")
    if abs(seconds) >= MAX_SECONDS:
        raise _range_error(what, seconds)
    return int(round(seconds * NS_PER_S))


def times_to_ns(times, what, coarse=None):
    """Sample times as an int64 tensor of nanoseconds: int64 as given, float
    seconds rounded to ns (float64 arithmetic), on the times' device.

    Float seconds must be finite and fit int64 ns. Seconds in float32 (or
    16-bit floats) carry about 7 digits: 0.1 s in float32 is 100000001 ns.
    They are converted all the same, and a warning names the precision
    lost; with ``coarse`` (a list) the warning's text is appended to it
    instead, for the caller to say once."""
    if isinstance(times, np.ndarray):
        times = torch.from_numpy(times)
    if times.dtype == torch.int64:
        return times
    if not times.is_floating_point():
        raise TypeError(
            f"{what}: times must be int64 nanoseconds or float seconds; got {times.dtype}"
        )
    seconds = times.double()
    if times.numel():
        finite = torch.isfinite(seconds)
        if not bool(finite.all()):
            i = int((~finite).nonzero()[0, 0])
            raise ValueError(f"{what}: times must be finite; sample {i} is {float(seconds[i])}")
        outside = seconds.abs() >= MAX_SECONDS
        if bool(outside.any()):
            i = int(outside.nonzero()[0, 0])
            raise _range_error(f"{what}, sample {i}", float(seconds[i]))
    if times.dtype in (torch.float32, torch.float16, torch.bfloat16) and times.numel():
        note = _coarse_seconds(times, what)
        if coarse is None:
            warnings.warn(note, stacklevel=2)
        else:
            coarse.append(note)
    return (seconds * NS_PER_S).round().to(torch.int64)


def _coarse_seconds(times, what):
    dtype = str(times.dtype).removeprefix("torch.")
    largest = float(times.abs().max())
    bits = {"float32": 23, "float16": 10, "bfloat16": 7}[dtype]
    step = 2.0 ** (math.frexp(largest)[1] - 1 - bits) if largest else 0.0
    return (
        f"{what}: times are {dtype} seconds, whose steps are {step * NS_PER_S:.3g} ns near "
        f"{largest:.6g} s (0.1 s in float32 is 100000001 ns); pass float64 seconds or int64 "
        "nanoseconds"
    )


def check_query_reach(deltas_ns, time_range, what):
    """A ValueError where ``anchor time + delta`` leaves int64 nanoseconds
    for some delta of ``deltas_ns`` and some anchor time in ``time_range``
    ((first, last) ns, the store's; None: no samples). The queries would
    wrap around and read the wrong end of the episode."""
    if time_range is None or not deltas_ns:
        return
    first, last = time_range
    lowest, highest = first + min(deltas_ns), last + max(deltas_ns)  # Python ints: exact
    if _INT64_MIN <= lowest and highest <= _INT64_MAX:
        return
    delta = min(deltas_ns) if lowest < _INT64_MIN else max(deltas_ns)
    reached = lowest if lowest < _INT64_MIN else highest
    raise ValueError(
        f"{what}: the delta {delta / NS_PER_S:.6g} s from the store's times, which run from "
        f"{first} ns to {last} ns ({first / NS_PER_S:.6g} s to {last / NS_PER_S:.6g} s), "
        f"reaches {reached} ns, outside int64 nanoseconds ({_INT64_MIN} to {_INT64_MAX}); "
        "use smaller deltas, or times nearer zero"
    )


def ns_to_seconds(ns):
    """An int64 tensor of nanoseconds as float32 seconds (LeRobot's dtype)."""
    return (ns.double() * (1.0 / NS_PER_S)).float()


def stamp_ns(sec, nanosec):
    """A (seconds, nanoseconds) stamp, as ROS and protobuf write them, in ns."""
    return int(sec) * NS_PER_S + int(nanosec)


def check_fps(fps, what):
    """A positive, finite frame rate as a float."""
    if isinstance(fps, bool) or not isinstance(fps, numbers.Real) or not 0 < fps < math.inf:
        raise ValueError(f"{what}: fps must be a positive number; got {fps!r}")
    return float(fps)


def frame_times(n, fps, what):
    """int64 ns times of n frames at fps: frame k at round(k * 1e9 / fps)."""
    fps = check_fps(fps, what)
    return (torch.arange(n, dtype=torch.float64) * (NS_PER_S / fps)).round().to(torch.int64)
