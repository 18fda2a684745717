"""robocache.data.time: seconds <-> int64 nanoseconds, checked once."""

import math
import warnings

import numpy as np
import pytest
import torch

from robocache.data.time import (
    MAX_SECONDS,
    frame_times,
    ns_to_seconds,
    seconds_to_ns,
    stamp_ns,
    times_to_ns,
)


def test_seconds_round_to_the_nearest_nanosecond():
    assert seconds_to_ns(0.1, "x") == 100_000_000
    assert seconds_to_ns(-1.5e-9, "x") == -2  # round half to even, as Python's round
    assert seconds_to_ns(np.float64(2.0), "x") == 2_000_000_000
    assert seconds_to_ns(3, "x") == 3_000_000_000


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_seconds_are_refused_by_name(bad):
    with pytest.raises(ValueError, match=r"delta\[0\] must be a finite number of seconds"):
        seconds_to_ns(bad, "delta[0]")


@pytest.mark.parametrize("bad", ["0.1", None, True, [0.1]])
def test_seconds_must_be_a_number(bad):
    with pytest.raises(TypeError, match="tolerance must be a number of seconds"):
        seconds_to_ns(bad, "tolerance")


def test_seconds_past_int64_nanoseconds_name_the_value_and_the_unit():
    ms_since_epoch = 1.7e12  # milliseconds since the epoch, given as seconds
    with pytest.raises(ValueError, match=r"1700000000000.0 seconds is outside.*milliseconds"):
        seconds_to_ns(ms_since_epoch, "delta")
    with pytest.raises(ValueError, match=r"outside the range of int64 nanoseconds"):
        seconds_to_ns(MAX_SECONDS, "delta")
    assert seconds_to_ns(MAX_SECONDS * 0.999, "delta") > 0


def test_times_in_float_seconds_become_int64_ns():
    t = torch.tensor([0.0, 0.1, 1.7e9], dtype=torch.float64)
    assert times_to_ns(t, "t").tolist() == [0, 100_000_000, 1_700_000_000_000_000_000]
    ns = torch.tensor([5, 7])
    assert times_to_ns(ns, "t") is ns
    with pytest.raises(TypeError, match="int64 nanoseconds or float seconds; got torch.int32"):
        times_to_ns(ns.int(), "t")


def test_times_that_overflow_name_the_sample_and_the_unit():
    # Only the last time overflows: the error still names it, not a later symptom.
    t = torch.tensor([1.0, 2.0, 1.7e12], dtype=torch.float64)
    with pytest.raises(ValueError, match=r"stream 'x', sample 2: 1700000000000.0 seconds.*milli"):
        times_to_ns(t, "stream 'x'")
    with pytest.raises(ValueError, match=r"times must be finite; sample 1 is nan"):
        times_to_ns(torch.tensor([0.0, math.nan]), "t")


def test_float32_seconds_warn_with_the_precision_lost():
    t = torch.tensor([0.0, 0.1], dtype=torch.float32)
    with pytest.warns(UserWarning, match=r"float32 seconds, whose steps are .* ns near 0.1 s"):
        ns = times_to_ns(t, "t")
    assert ns.tolist() == [0, 100_000_001]  # what float32's 0.1 is, said in the warning
    notes = []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        times_to_ns(t, "t", coarse=notes)  # collected, not warned
    assert len(notes) == 1 and "float32" in notes[0]


def test_frames_stamps_and_back():
    assert frame_times(4, 30, "f").tolist() == [0, 33_333_333, 66_666_667, 100_000_000]
    with pytest.raises(ValueError, match="f: fps must be a positive number; got 0"):
        frame_times(4, 0, "f")
    assert stamp_ns(3, 5) == 3_000_000_005
    assert ns_to_seconds(torch.tensor([1_500_000_000])).dtype == torch.float32
    assert ns_to_seconds(torch.tensor([1_500_000_000])).item() == 1.5
