"""robocache.resample: semantics, dtypes, autograd, tracing and errors."""

import numpy as np
import pytest
import torch
from conftest import tolerance
from helpers import query_times, sorted_times
from resample_cases import MODES, TIME_DTYPES, VALUE_DTYPES, random_lengths, ref64
from torch.testing import assert_close

import robocache

# ---------------------------------------------------------------------------
# Results against the float64 reference and numpy.interp
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("value_dtype", VALUE_DTYPES)
@pytest.mark.parametrize("time_dtype", TIME_DTYPES)
def test_matches_float64_reference(device, mode, value_dtype, time_dtype):
    B, S, T, D = 3, 37, 53, 8
    values = torch.randn(B, S, D, device=device).to(value_dtype)
    times = sorted_times(B, S, time_dtype, device)
    query = query_times(B, T, time_dtype, device)
    out = robocache.resample(values, times, query, mode=mode)
    assert out.shape == (B, T, D) and out.dtype == value_dtype
    rtol, atol = tolerance(value_dtype)
    assert_close(out.double(), ref64(values, times, query, mode=mode), rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shared_times", [False, True])
@pytest.mark.parametrize("shared_query", [False, True])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_layouts_and_lengths(device, mode, shared_times, shared_query, with_lengths):
    B, S, T, D = 4, 25, 31, 5
    values = torch.randn(B, S, D, dtype=torch.float64, device=device)
    times = sorted_times(B, S, torch.float64, device, shared=shared_times)
    query = query_times(B, T, torch.float64, device, shared=shared_query)
    lengths = random_lengths(B, S, device) if with_lengths else None
    out = robocache.resample(values, times, query, lengths, mode)
    assert_close(out, ref64(values, times, query, lengths, mode), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "B,S,T,D",
    [
        (1, 1, 1, 1),
        (1, 7, 1, 1),
        (5, 1, 9, 3),
        (2, 9, 4, 1),
        (2, 40, 17, 1000),
        (2, 40, 17, 1024),
        (3, 300, 200, 7),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_shapes(device, B, S, T, D, dtype):
    values = torch.randn(B, S, D, device=device).to(dtype)
    times = sorted_times(B, S, torch.float64, device)
    query = query_times(B, T, torch.float64, device)
    out = robocache.resample(values, times, query)
    rtol, atol = tolerance(dtype)
    assert_close(out.double(), ref64(values, times, query), rtol=rtol, atol=atol)


def test_matches_numpy_interp(device):
    B, S, T, D = 3, 50, 80, 4
    values = torch.randn(B, S, D, dtype=torch.float64, device=device)
    times = sorted_times(B, S, torch.float64, device)
    query = query_times(B, T, torch.float64, device)
    lengths = random_lengths(B, S, device)
    out = robocache.resample(values, times, query, lengths).cpu().numpy()
    v, t, q, L = values.cpu().numpy(), times.cpu().numpy(), query.cpu().numpy(), lengths.cpu()
    for b in range(B):
        n = int(L[b])
        for d in range(D):
            np.testing.assert_allclose(
                out[b, :, d], np.interp(q[b], t[b, :n], v[b, :n, d]), rtol=1e-12, atol=1e-12
            )


def test_non_contiguous_inputs(device):
    B, S, T, D = 3, 20, 15, 6
    values = torch.randn(B, D, S, device=device).transpose(1, 2)  # stride 1 along S
    times = sorted_times(B, 2 * S, torch.float64, device)[:, ::2]
    query = query_times(T, B, torch.float64, device).t()
    lengths = random_lengths(2 * B, S, device)[::2]
    assert not (values.is_contiguous() or times.is_contiguous() or query.is_contiguous())
    for mode in MODES:
        out = robocache.resample(values, times, query, lengths, mode)
        assert_close(out.double(), ref64(values, times, query, lengths, mode), rtol=1e-5, atol=1e-5)


def test_misaligned_values_use_the_scalar_path(device):
    # A view that starts one element in: 16-byte vector loads are not allowed.
    base = torch.randn(2 * 10 * 8 + 1, device=device)
    values = base[1:].view(2, 10, 8)
    times = sorted_times(2, 10, torch.float32, device)
    query = query_times(2, 12, torch.float32, device)
    assert_close(
        robocache.resample(values, times, query).double(),
        ref64(values, times, query),
        rtol=1e-5,
        atol=1e-5,
    )


# ---------------------------------------------------------------------------
# Edges
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_outside_range_holds_first_and_last(device, mode):
    values = torch.randn(2, 6, 3, device=device)
    times = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=device)
    lengths = torch.tensor([6, 4], device=device)
    query = torch.tensor([-100.0, 0.999, 6.5, 1e30, float("inf"), float("-inf")], device=device)
    out = robocache.resample(values, times, query, lengths, mode)
    first = values[:, 0:1].expand(2, 2, 3)
    assert torch.equal(out[:, :2], first)
    assert torch.equal(out[:, 5], values[:, 0])
    assert torch.equal(out[0, 2:5], values[0, 5].expand(3, 3))
    assert torch.equal(out[1, 2:5], values[1, 3].expand(3, 3))  # the last *valid* sample


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_query_at_a_sample_returns_it_exactly(device, mode, dtype):
    B, S, D = 3, 30, 9
    values = torch.randn(B, S, D, device=device).to(dtype)
    values[:, 1::2] *= 1e4  # neighbours far apart, so any blending would show
    times = sorted_times(B, S, torch.float64, device)
    out = robocache.resample(values, times, times, mode=mode)
    assert torch.equal(out, values)


def test_query_at_a_sample_ignores_non_finite_neighbour(device):
    values = torch.tensor([[[1.0], [float("nan")], [float("inf")]]], device=device)
    times = torch.tensor([0.0, 1.0, 2.0], device=device)
    out = robocache.resample(values, times, torch.tensor([0.0], device=device))
    assert out.item() == 1.0


@pytest.mark.parametrize("mode", MODES)
def test_repeated_times_are_right_continuous(device, mode):
    values = torch.tensor([[[0.0], [10.0], [20.0], [30.0]]], device=device)
    times = torch.tensor([0.0, 1.0, 1.0, 2.0], device=device)
    out = robocache.resample(values, times, torch.tensor([1.0, 1.5], device=device), mode=mode)
    assert out[0, 0, 0].item() == 20.0  # the later of the two samples at t = 1
    expected = {"linear": 25.0, "nearest": 30.0, "previous": 20.0}[mode]
    assert out[0, 1, 0].item() == expected


def test_nearest_tie_goes_to_later_sample(device):
    values = torch.tensor([[[1.0], [2.0], [3.0]]], device=device)
    times = torch.tensor([0, 10, 20], device=device)
    q = torch.tensor([5, 4, 15, 16], device=device)
    out = robocache.resample(values, times, q, mode="nearest")
    assert out.flatten().tolist() == [2.0, 1.0, 3.0, 3.0]


def test_previous_is_zero_order_hold(device):
    values = torch.tensor([[[1.0], [2.0], [3.0]]], device=device)
    times = torch.tensor([0.0, 10.0, 20.0], device=device)
    q = torch.tensor([-5.0, 0.0, 9.99, 10.0, 19.0, 25.0], device=device)
    out = robocache.resample(values, times, q, mode="previous")
    assert out.flatten().tolist() == [1.0, 1.0, 1.0, 2.0, 2.0, 3.0]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", VALUE_DTYPES)
def test_nan_query_gives_nan(device, mode, dtype):
    values = torch.randn(2, 5, 3, device=device).to(dtype)
    times = torch.arange(5.0, device=device)
    q = torch.tensor([[0.5, float("nan"), 2.0], [float("nan"), 1.0, 4.0]], device=device)
    out = robocache.resample(values, times, q, mode=mode)
    nan_rows = torch.isnan(q)
    assert torch.isnan(out[nan_rows]).all()
    assert torch.isfinite(out[~nan_rows]).all()


def test_single_sample_is_constant(device):
    values = torch.randn(2, 1, 4, device=device)
    out = robocache.resample(
        values, torch.zeros(2, 1, device=device), query_times(2, 7, torch.float32, device)
    )
    assert torch.equal(out, values.expand(2, 7, 4))


def test_empty_queries_and_channels(device):
    values = torch.randn(2, 5, 3, device=device)
    times = torch.arange(5.0, device=device)
    assert robocache.resample(values, times, torch.empty(0, device=device)).shape == (2, 0, 3)
    out = robocache.resample(torch.randn(2, 5, 0, device=device), times, times)
    assert out.shape == (2, 5, 0)
    assert robocache.resample(values[:0], times, times).shape == (0, 5, 3)


def test_padding_past_lengths_is_ignored(device):
    B, S, T, D = 3, 12, 40, 2
    values = torch.randn(B, S, D, dtype=torch.float64, device=device)
    times = sorted_times(B, S, torch.float64, device)
    lengths = torch.tensor([12, 5, 1], device=device)
    query = query_times(B, T, torch.float64, device)
    out = robocache.resample(values, times, query, lengths)
    # Garbage (unsorted times, huge values) in the padding changes nothing.
    values2, times2 = values.clone(), times.clone()
    for b, n in enumerate(lengths.tolist()):
        values2[b, n:] = 1e30
        times2[b, n:] = -1e30
    assert torch.equal(robocache.resample(values2, times2, query, lengths), out)
    assert torch.equal(out[2], values[2, 0].expand(T, D))


# ---------------------------------------------------------------------------
# Precision of the times
# ---------------------------------------------------------------------------


def test_unix_epoch_float64_times(device):
    # float32 would quantize these to 128 s; float64 keeps sub-microsecond steps.
    base = 1.7e9
    times = base + torch.arange(0, 100, dtype=torch.float64, device=device) * 0.01
    values = (times - base).view(1, -1, 1).float() * 3.0  # linear in time
    query = base + torch.rand(50, dtype=torch.float64, device=device) * 0.99
    out = robocache.resample(values, times, query)
    assert_close(out[0, :, 0].double(), (query - base) * 3.0, rtol=1e-6, atol=1e-6)


def test_int64_nanosecond_times(device):
    base = 1_700_000_000_000_000_000  # ns since the epoch
    step = 10_000_000  # 100 Hz
    times = base + torch.arange(100, dtype=torch.int64, device=device) * step
    values = torch.arange(100, dtype=torch.float64, device=device).view(1, -1, 1)
    offsets = torch.randint(0, 99 * step, (64,), device=device)
    out = robocache.resample(values, times, base + offsets)
    assert_close(out[0, :, 0], offsets.double() / step, rtol=0, atol=1e-9)
    nearest = robocache.resample(values, times, base + offsets, mode="nearest")
    assert torch.equal(
        nearest[0, :, 0], torch.div(offsets + step // 2, step, rounding_mode="floor").double()
    )
