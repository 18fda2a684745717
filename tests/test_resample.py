"""robocache.resample: semantics, dtypes, autograd, tracing and errors."""

import numpy as np
import pytest
import torch
from conftest import requires_cuda, tolerance
from helpers import query_times, sorted_times
from torch.testing import assert_close

import robocache
from robocache import reference

MODES = ["linear", "nearest", "previous"]
VALUE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TIME_DTYPES = [torch.float32, torch.float64, torch.int64]


def ref64(values, times, query, lengths=None, mode="linear"):
    """The reference evaluated on float64 values (times keep their dtype)."""
    return reference.resample(values.double(), times, query, lengths, mode)


def random_lengths(B, S, device):
    return torch.randint(1, S + 1, (B,), device=device)


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


# ---------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shared_query", [False, True])
def test_gradcheck(device, mode, shared_query):
    B, S, T, D = 2, 9, 7, 3
    values = torch.randn(B, S, D, dtype=torch.float64, device=device, requires_grad=True)
    times = sorted_times(B, S, torch.float64, device)
    query = query_times(B, T, torch.float64, device, shared=shared_query).requires_grad_()
    lengths = torch.tensor([9, 6], device=device)
    fn = lambda v, q: robocache.resample(v, times, q, lengths, mode)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values, query), eps=1e-6, atol=1e-5)


def test_gradients_match_reference(device):
    B, S, T, D = 3, 20, 30, 4
    values = torch.randn(B, S, D, dtype=torch.float64, device=device, requires_grad=True)
    times = sorted_times(B, S, torch.float32, device)
    query = query_times(B, T, torch.float32, device).requires_grad_()
    grad = torch.randn(B, T, D, dtype=torch.float64, device=device)
    out = robocache.resample(values, times, query)
    gv, gq = torch.autograd.grad(out, (values, query), grad)
    rv, rq = torch.autograd.grad(reference.resample(values, times, query), (values, query), grad)
    assert_close(gv, rv)
    assert_close(gq, rq, rtol=1e-4, atol=1e-4)


def test_query_gradient_is_right_slope_at_knots_and_zero_outside(device):
    values = torch.tensor([[[0.0], [1.0], [5.0]]], device=device, requires_grad=True)
    times = torch.tensor([0.0, 1.0, 2.0], device=device)
    q = torch.tensor([1.0, 0.5, -1.0, 2.0, 3.0], device=device, requires_grad=True)
    robocache.resample(values, times, q).sum().backward()
    assert q.grad.tolist() == [4.0, 1.0, 0.0, 0.0, 0.0]


def test_half_precision_gradients(device):
    B, S, T, D = 2, 16, 24, 8
    values = torch.randn(B, S, D, device=device).bfloat16().requires_grad_()
    times = sorted_times(B, S, torch.float32, device)
    query = query_times(B, T, torch.float32, device).requires_grad_()
    out = robocache.resample(values, times, query)
    out.float().sum().backward()
    v64 = values.detach().double().requires_grad_()
    q64 = query.detach().double().requires_grad_()
    reference.resample(v64, times.double(), q64).sum().backward()
    assert values.grad.dtype == torch.bfloat16
    assert_close(values.grad.double(), v64.grad, rtol=2e-2, atol=2e-2)
    assert_close(query.grad.double(), q64.grad, rtol=2e-2, atol=2e-2)


def mixed_order_queries(B, T, times, dtype, device):
    """Rows of queries in several orders in one batch: sorted rows with runs of repeated queries,
    queries exactly on sample times and past both ends; a shuffled row; a
    descending row; a sorted row with one NaN; a sorted row of one repeated
    time."""
    q = torch.sort(query_times(B, T, torch.float64, device), dim=1).values.to(dtype)
    q[0, T // 3 : T // 2] = q[0, T // 3]  # a run of one repeated query
    k = min(T // 4, times.shape[-1])
    on_knots = (times[2] if times.dim() == 2 else times)[:k].to(dtype)
    q[2] = torch.sort(torch.cat([q[2, : T - k], on_knots])).values
    if B > 3:
        q[3] = q[3, torch.randperm(T, device=device)]
    if B > 4:
        q[4] = torch.sort(q[4], descending=True).values
    if B > 5 and dtype.is_floating_point:
        q[5, T // 2] = float("nan")
    if B > 6:
        q[6] = q[6, T // 2]
    return q


def check_gradients(values, times, query, lengths, mode, tol):
    """robocache's gradients of values and (floating) query against the
    reference's on float64 values; times and query keep their dtype, as the
    weights do. A float32 query's gradient is formed in float32."""
    values = values.detach().requires_grad_()
    query = query.detach().requires_grad_(query.dtype.is_floating_point)
    grad = torch.randn(
        values.shape[0], query.shape[-1], values.shape[-1], device=values.device, dtype=values.dtype
    )
    inputs = lambda v, q: (v, q) if q.requires_grad else (v,)  # noqa: E731
    got = torch.autograd.grad(
        robocache.resample(values, times, query, lengths, mode), inputs(values, query), grad
    )
    v64 = values.detach().double().requires_grad_()
    q_ref = query.detach().requires_grad_(query.requires_grad)
    expected = torch.autograd.grad(
        reference.resample(v64, times, q_ref, lengths, mode),
        inputs(v64, q_ref),
        grad.double(),
        allow_unused=True,
        materialize_grads=True,
    )
    assert_close(got[0].double(), expected[0], rtol=tol, atol=tol)
    if query.requires_grad:
        q_tol = max(tol, 1e-4) if query.dtype == torch.float32 else tol
        assert_close(got[1].double(), expected[1].double(), rtol=q_tol, atol=q_tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "S,T,D", [(37, 1000, 3), (300, 20, 8), (300, 301, 16), (70, 90, 200), (5, 64, 1)]
)
@pytest.mark.parametrize("time_dtype", TIME_DTYPES)
def test_gradients_queries_in_and_out_of_order(device, mode, S, T, D, time_dtype):
    """Gradients against the float64 reference: upsampling
    (T >> S), downsampling (T << S), rows that fit one vector a lane, wide rows
    (D = 200 float32: several vectors a lane), and rows of every query order
    (mixed_order_queries) in one batch, with and without lengths."""
    B = 7
    values = torch.randn(B, S, D, device=device, dtype=torch.float64)
    times = sorted_times(B, S, torch.float64, device)
    if time_dtype == torch.int64:
        times = (times * 1e6).round().to(torch.int64) + torch.arange(S, device=device)
    else:
        times = times.to(time_dtype)
    scale = 1e6 if time_dtype == torch.int64 else 1.0
    query = mixed_order_queries(B, T, times.double() / scale, torch.float64, device) * scale
    query = (
        query.to(time_dtype)
        if time_dtype != torch.int64
        else torch.nan_to_num(query, nan=0.0).round().to(torch.int64)
    )
    lengths = torch.randint(1, S + 1, (B,), device=device)
    lengths[1] = 1
    for lens in (None, lengths):
        for dtype, tol in ((torch.float64, 1e-9), (torch.float32, 1e-3)):
            check_gradients(values.to(dtype), times, query, lens, mode, tol)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shared_times", [False, True])
def test_gradients_shared_sorted_query(device, mode, shared_times):
    """A (T,) query shared by the batch, in order: the query gradient sums
    over the batch."""
    B, S, T, D = 5, 120, 333, 4
    values = torch.randn(B, S, D, device=device, dtype=torch.float64)
    times = sorted_times(B, S, torch.float64, device, shared=shared_times)
    query = torch.sort(query_times(B, T, torch.float64, device, shared=True)).values
    lengths = torch.randint(1, S + 1, (B,), device=device)
    for lens in (None, lengths):
        check_gradients(values, times, query, lens, mode, 1e-9)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_gradients_every_query_order(device, dtype):
    """float32 accumulation, rounded once to the values' dtype, for rows of
    every query order (mixed_order_queries) on rows long enough for the CUDA
    warp pivot search."""
    B, S, T, D = 3, 200, 150, 24
    values = torch.randn(B, S, D, device=device).to(dtype)
    times = sorted_times(B, S, torch.float32, device)
    query = mixed_order_queries(B, T, times, torch.float32, device)
    check_gradients(
        values, times, query, None, "linear", {torch.float16: 5e-3, torch.bfloat16: 3e-2}[dtype]
    )


@pytest.mark.parametrize("mode", MODES)
def test_gradcheck_long_rows_sorted_queries(device, mode):
    """gradcheck on rows of 64+ samples (the CUDA backward's warp pivot
    search, which test_gradcheck's 9-sample rows do not reach), with the
    queries of each row in order and a shorter second row."""
    B, S, T, D = 2, 70, 90, 3
    values = torch.randn(B, S, D, dtype=torch.float64, device=device, requires_grad=True)
    times = sorted_times(B, S, torch.float64, device)
    query = torch.sort(query_times(B, T, torch.float64, device), dim=1).values.requires_grad_()
    lengths = torch.tensor([S, 40], device=device)
    fn = lambda v, q: robocache.resample(v, times, q, lengths, mode)  # noqa: E731
    assert torch.autograd.gradcheck(fn, (values, query), eps=1e-6, atol=1e-5)


def test_times_gradient_matches_reference(device):
    """A times that requires grad gets the true gradient, never None:
    -(1 - w) and -w times the slope, to the segment's ends."""
    values = torch.randn(2, 6, 3, device=device, dtype=torch.float64)
    times = sorted_times(2, 6, torch.float64, device).requires_grad_()
    query = query_times(2, 9, torch.float64, device)
    grad = torch.randn(2, 9, 3, device=device, dtype=torch.float64)
    (got,) = torch.autograd.grad(robocache.resample(values, times, query), times, grad)
    (expected,) = torch.autograd.grad(reference.resample(values, times, query), times, grad)
    assert got.abs().sum() > 0
    assert_close(got, expected, rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------------------
# opcheck, torch.compile, FX
# ---------------------------------------------------------------------------


def _opcheck_args(device, requires_grad, time_dtype=torch.float32):
    B, S, T, D = 3, 11, 6, 4
    values = torch.randn(B, S, D, device=device, requires_grad=requires_grad)
    times = sorted_times(B, S, time_dtype, device)
    query = query_times(B, T, time_dtype, device)
    if requires_grad and time_dtype != torch.int64:
        query.requires_grad_()
    return values, times, query


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("mode", MODES)
def test_opcheck(device, requires_grad, mode):
    values, times, query = _opcheck_args(device, requires_grad)
    lengths = torch.tensor([11, 4, 1], device=device)
    torch.library.opcheck(
        torch.ops.robocache.resample.default, (values, times, query, lengths, mode)
    )
    torch.library.opcheck(torch.ops.robocache.resample.default, (values, times[0], query[0]))


@pytest.mark.parametrize("time_dtype", [torch.float64, torch.int64])
def test_opcheck_time_dtypes(device, time_dtype):
    values, times, query = _opcheck_args(device, True, time_dtype)
    torch.library.opcheck(torch.ops.robocache.resample.default, (values, times, query))


def test_opcheck_backward_op(device):
    values, times, query = _opcheck_args(device, False)
    grad = torch.randn(values.shape[0], query.shape[1], values.shape[2], device=device)
    for flags in [(True, True), (True, False), (False, True)]:
        torch.library.opcheck(
            torch.ops.robocache._resample_backward.default,
            (grad, values, times, query, None, "linear", *flags),
        )


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def f(values, times, query):
        return robocache.resample(values, times, query, mode="linear") * 2.0

    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=dynamic)
    for B, T in [(2, 5), (3, 8), (5, 13)]:
        values = torch.randn(B, 10, 4, device=device)
        times = sorted_times(B, 10, torch.float32, device)
        query = query_times(B, T, torch.float32, device)
        assert_close(compiled(values, times, query), f(values, times, query))
    if dynamic:
        assert counter.frame_count == 1, "changing B and T recompiled under dynamic=True"


def test_torch_compile_backward(device):
    torch._dynamo.reset()

    def loss(values, times, query):
        return (robocache.resample(values, times, query) ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True, dynamic=True)
    values = torch.randn(3, 12, 5, device=device, requires_grad=True)
    times = sorted_times(3, 12, torch.float32, device)
    query = query_times(3, 9, torch.float32, device).requires_grad_()
    grads = torch.autograd.grad(compiled(values, times, query), (values, query))
    expected = torch.autograd.grad(loss(values, times, query), (values, query))
    assert_close(grads[0], expected[0])
    assert_close(grads[1], expected[1], rtol=1e-4, atol=1e-4)


def test_fx_and_export_keep_one_node():
    class M(torch.nn.Module):
        def forward(self, values, times, query):
            return robocache.resample(values, times, query, mode="previous")

    args = (
        torch.randn(2, 8, 3),
        sorted_times(2, 8, torch.float32),
        query_times(2, 5, torch.float32),
    )
    gm = torch.fx.symbolic_trace(M())
    assert [n.target for n in gm.graph.nodes if n.op == "call_function"] == [
        torch.ops.robocache.resample
    ]
    batch = torch.export.Dim("batch")
    ep = torch.export.export(M(), args, dynamic_shapes=({0: batch}, {0: batch}, {0: batch}))
    targets = [n.target for n in ep.graph.nodes if n.op == "call_function"]
    assert targets == [torch.ops.robocache.resample.default]
    assert_close(ep.module()(*args), M()(*args))


# ---------------------------------------------------------------------------
# Errors: each misuse names the argument
# ---------------------------------------------------------------------------


def _valid(device="cpu"):
    return (
        torch.randn(2, 5, 3, device=device),
        torch.arange(5.0, device=device),
        torch.rand(2, 4, device=device) * 4,
    )


@pytest.mark.parametrize(
    "case,exc,match",
    [
        ("values_rank", ValueError, r"values must be 3-D \(B, S, D\); got shape \[2, 5\]"),
        ("times_rank", ValueError, r"times must be \(B, S\) or \(S,\); got shape \[1, 2, 5\]"),
        (
            "query_rank",
            ValueError,
            r"query_times must be \(B, T\) or \(T,\); got shape \[1, 2, 4\]",
        ),
        ("times_batch", ValueError, r"times has batch size different from values"),
        ("query_batch", ValueError, r"query_times has batch size different from values"),
        ("times_samples", ValueError, r"times must have S = values.shape\[1\] samples"),
        ("mixed_time_dtypes", TypeError, r"times and query_times must have the same dtype"),
        (
            "int_values",
            TypeError,
            r"values must be float32, float64, float16 or bfloat16; got Long",
        ),
        ("int32_times", TypeError, r"times must be float32, float64 or int64; got Int"),
        ("empty_S", ValueError, r"no source samples \(S == 0\)"),
        ("mode", ValueError, r"mode must be 'linear', 'nearest' or 'previous'; got 'cubic'"),
        ("lengths_low", ValueError, r"lengths\[1\] = 0 is outside \[1, S\] with S = 5"),
        ("lengths_high", ValueError, r"lengths\[0\] = 6 is outside \[1, S\] with S = 5"),
        ("lengths_dtype", TypeError, r"lengths must be int64; got Int"),
        ("lengths_shape", ValueError, r"lengths must have B = values.shape\[0\] entries"),
        ("devices", ValueError, r"times must be on the same device as values"),
    ],
)
def test_errors(case, exc, match):
    values, times, query = _valid()
    lengths, mode = None, "linear"
    if case == "values_rank":
        values = values[:, :, 0]
    elif case == "times_rank":
        times = times.expand(1, 2, 5)
    elif case == "query_rank":
        query = query[None]
    elif case == "times_batch":
        times = times.expand(3, 5)
    elif case == "query_batch":
        query = torch.rand(3, 4)
    elif case == "times_samples":
        times = torch.arange(6.0)
    elif case == "mixed_time_dtypes":
        query = query.double()
    elif case == "int_values":
        values = values.long()
    elif case == "int32_times":
        times, query = times.int(), query.int()
    elif case == "empty_S":
        values, times = values[:, :0], times[:0]
    elif case == "mode":
        mode = "cubic"
    elif case == "lengths_low":
        lengths = torch.tensor([5, 0])
    elif case == "lengths_high":
        lengths = torch.tensor([6, 5])
    elif case == "lengths_dtype":
        lengths = torch.tensor([5, 5], dtype=torch.int32)
    elif case == "lengths_shape":
        lengths = torch.tensor([5, 5, 5])
    elif case == "devices":
        times = times.to("meta")
    with pytest.raises(exc, match=match):
        robocache.resample(values, times, query, lengths, mode)


def test_error_grad_out_shape():
    values, times, query = _valid()
    with pytest.raises(ValueError, match=r"grad_out must have shape \[2, 4, 3\]; got \[2, 5, 3\]"):
        torch.ops.robocache._resample_backward(
            torch.randn(2, 5, 3), values, times, query, None, "linear", True, True
        )


def test_check_true_rejects_unsorted_times_and_bad_lengths(device):
    values, times, query = _valid(device)
    robocache.resample(values, times, query, check=True)  # valid input passes
    bad = times.clone()
    bad[3] = 0.5
    with pytest.raises(ValueError, match=r"times must be non-decreasing.*times\[3\] = 0.5"):
        robocache.resample(values, bad, query, check=True)
    # Disorder in the padding is fine.
    robocache.resample(values, bad, query, torch.tensor([3, 2], device=device), check=True)
    with pytest.raises(ValueError, match=r"lengths\[1\] = 0 is outside"):
        robocache.resample(values, times, query, torch.tensor([5, 0], device=device), check=True)


# ---------------------------------------------------------------------------
# The seed API
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [None, "auto", "pytorch"])
def test_resample_trajectories(device, backend):
    src = torch.randn(4, 30, 7, device=device)
    src_t = sorted_times(4, 30, torch.float32, device)
    tgt_t = query_times(4, 12, torch.float32, device)
    out = robocache.resample_trajectories(src, src_t, tgt_t, backend=backend)
    assert out.shape == (4, 12, 7)
    assert_close(out.double(), ref64(src, src_t, tgt_t), rtol=1e-5, atol=1e-5)


def test_resample_trajectories_bad_backend():
    with pytest.raises(ValueError, match="backend must be one of"):
        robocache.resample_trajectories(*_valid(), backend="triton")


def test_is_cuda_available_reports_the_build():
    from robocache import _build_info

    assert robocache.is_cuda_available() == _build_info.WITH_CUDA


# ---------------------------------------------------------------------------
# CUDA-only contracts
# ---------------------------------------------------------------------------


@requires_cuda
def test_cuda_lengths_contract_without_host_sync():
    values = torch.randn(3, 5, 2, device="cuda")
    times = torch.arange(5.0, device="cuda")
    query = torch.tensor([0.5, 3.5, 9.0], device="cuda")
    lengths = torch.tensor([0, 9, 2], device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = robocache.resample(values, times, query, lengths)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert torch.isnan(out[0]).all()  # length < 1: visibly NaN
    assert_close(out[1], robocache.resample(values[1:2], times, query)[0])  # 9 is treated as S
    assert_close(out[2], robocache.resample(values[2:3, :2], times[:2], query)[0])
    # Gradients: nothing from the row of length 0; the others as the reference
    # gives them (queries in order, and not).
    for q in (query, query.flip(0)):
        v = values.clone().requires_grad_()
        qq = q.clone().requires_grad_()
        grad = torch.randn(3, 3, 2, device="cuda")
        gv, gq = torch.autograd.grad(robocache.resample(v, times, qq, lengths), (v, qq), grad)
        v64 = values[1:].double().requires_grad_()
        q64 = q.double().requires_grad_()
        ref = reference.resample(v64, times.double(), q64, lengths[1:].clamp(max=5))
        rv, rq = torch.autograd.grad(ref, (v64, q64), grad[1:].double())
        assert torch.equal(gv[0], torch.zeros_like(gv[0]))
        # float32 results against the float64 reference, at float32's tolerance
        assert_close(gv[1:], rv.float())
        assert_close(gq, rq.float())


@requires_cuda
def test_cuda_forward_and_backward_do_not_sync():
    values = torch.randn(4, 64, 16, device="cuda", requires_grad=True)
    times = sorted_times(4, 64, torch.float32, "cuda")
    query = query_times(4, 32, torch.float32, "cuda").requires_grad_()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = robocache.resample(values, times, query)
        out.backward(torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert values.grad is not None and query.grad is not None


@requires_cuda
def test_cuda_backward_raises_nondeterminism_alert():
    values = torch.randn(2, 8, 4, device="cuda", requires_grad=True)
    times = torch.arange(8.0, device="cuda")
    out = robocache.resample(values, times, torch.rand(5, device="cuda") * 7)
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="robocache.resample backward"):
            out.sum().backward()
    finally:
        torch.use_deterministic_algorithms(False)


@requires_cuda
def test_cuda_graph_capture_and_replay():
    values = torch.randn(4, 50, 8, device="cuda")
    times = sorted_times(4, 50, torch.float32, "cuda")
    query = query_times(4, 20, torch.float32, "cuda")
    robocache.resample(values, times, query)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = robocache.resample(values, times, query)
    values.copy_(torch.randn_like(values))
    query.copy_(query_times(4, 20, torch.float32, "cuda"))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(out.double(), ref64(values, times, query), rtol=1e-5, atol=1e-5)


@requires_cuda
def test_cuda_reduce_overhead_compile():
    torch._dynamo.reset()
    f = torch.compile(
        lambda v, t, q: robocache.resample(v, t, q) + 1, mode="reduce-overhead", fullgraph=True
    )
    values = torch.randn(4, 50, 8, device="cuda")
    times = sorted_times(4, 50, torch.float32, "cuda")
    for _ in range(3):
        query = query_times(4, 20, torch.float32, "cuda")
        assert_close(
            f(values, times, query).double(), ref64(values, times, query) + 1, rtol=1e-5, atol=1e-5
        )


@requires_cuda
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_cuda_second_device():
    values = torch.randn(2, 10, 4, device="cuda:1")
    times = torch.arange(10.0, device="cuda:1")
    query = torch.rand(2, 7, device="cuda:1") * 9
    out = robocache.resample(values, times, query)
    assert out.device == torch.device("cuda:1")
    assert_close(out.double(), ref64(values, times, query), rtol=1e-5, atol=1e-5)


@requires_cuda
def test_cuda_index_math_past_2_pow_31():
    # 2^22 queries x 1032 channels of bfloat16 = 4.3e9 output elements.
    T, D = 1 << 22, 1032
    values = torch.randn(1, 3, D, device="cuda").bfloat16()
    times = torch.tensor([0.0, 1.0, 2.0], device="cuda")
    query = torch.linspace(0, 2, T, device="cuda")
    out = robocache.resample(values, times, query)
    assert out.numel() > 2**31
    idx = torch.tensor([0, 1, T // 2, T - 2, T - 1], device="cuda")
    assert_close(
        out[0, idx].double(), ref64(values, times, query[idx])[0], rtol=1.6e-2, atol=1.6e-2
    )
    del out


@pytest.mark.parametrize("order", ["ascending", "descending", "random"])
@pytest.mark.parametrize("mode", MODES)
def test_query_order_and_repeated_times_on_long_rows(device, order, mode):
    """The searches' fast paths (the CPU's gallop from the previous query, the
    GPU's warp-wide pivots on rows of 64+ samples, with its per-lane fallback
    where a chunk of queries spans rows of different lengths) agree with a
    plain binary search for every query order, with runs of repeated times."""
    B, S, T, D = 5, 300, 97, 3
    times = torch.sort(torch.randint(0, 120, (B, S), device=device).double(), dim=1).values
    values = torch.randn(B, S, D, dtype=torch.float64, device=device)
    q = torch.rand(B, T, dtype=torch.float64, device=device) * 130 - 5
    q[:, ::7] = times[:, :T:7].clone()  # exactly on (repeated) sample times
    if order != "random":
        q = torch.sort(q, dim=1, descending=order == "descending").values
    lengths = torch.tensor([S, 64, 200, 1, 299], device=device)
    for lens in (None, lengths):
        out = robocache.resample(values, times, q, lengths=lens, mode=mode)
        expected = reference.resample(values, times, q, lengths=lens, mode=mode)
        assert_close(out, expected, rtol=1e-12, atol=1e-12, equal_nan=True)


@requires_cuda
@pytest.mark.parametrize("S", [1024, 1025, 2048, 2049, 5000])
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float64, torch.int64])
def test_cuda_forward_long_rows(S, tdtype):
    """The CUDA forward's warp pivot search on rows of thousands of samples
    (each pivot bracket then spans many samples), with 4- and 8-byte times:
    lengths that shorten rows, queries in and out of order, on knots, before
    and after the row, and NaN."""
    B, T, D = 4, 700, 4
    if tdtype == torch.int64:
        times = torch.sort(torch.randint(0, 4 * S, (B, S), device="cuda"), dim=1).values
        query = torch.randint(-10, 4 * S + 10, (B, T), device="cuda")
    else:
        times = sorted_times(B, S, tdtype, "cuda")
        query = query_times(B, T, tdtype, "cuda")
        query[:, ::37] = float("nan")
    query[:, ::11] = times[:, 5:6]  # on a knot
    query[1] = torch.sort(query[1]).values
    values = torch.randn(B, S, D, device="cuda")
    lengths = torch.tensor([S, 1024, 1025, 2049], device="cuda").clamp(max=S)
    for mode in MODES:
        for lens in (None, lengths):
            assert_close(
                robocache.resample(values, times, query, lens, mode).double(),
                ref64(values, times, query, lens, mode),
                rtol=1e-5,
                atol=1e-5,
                equal_nan=True,
            )


@requires_cuda
@pytest.mark.parametrize("n", [1000, 35_001, 70_001, 140_001, 300_007])
@pytest.mark.parametrize(
    "D,dtype", [(4, torch.float32), (6, torch.float32), (16, torch.bfloat16), (3, torch.float64)]
)
@pytest.mark.parametrize("tdtype", [torch.float32, torch.float64])
def test_cuda_forward_tiles(n, D, dtype, tdtype):
    """The CUDA forward runs in tiles of 32 to 256 flattened queries (more
    per block as the launch grows, fewer as rows widen), each warp locating
    a chunk of 32 queries at a time, with 4- and 8-byte times; every tile
    size, a partial last tile (chunks with no queries), rows that span tiles,
    NaN queries and short rows against the float64 reference."""
    B = 3
    T = (n + B - 1) // B
    S = 257
    values = torch.randn(B, S, D, device="cuda").to(dtype)
    times = sorted_times(B, S, tdtype, "cuda")
    query = query_times(B, T, tdtype, "cuda")
    query[:, ::101] = float("nan")
    query[:, 7::13] = times[:, :1] - 1  # before the first sample
    lengths = torch.tensor([S, 2, 1], device="cuda")
    for mode in MODES:
        for lens in (None, lengths):
            out = robocache.resample(values, times, query, lens, mode)
            rtol, atol = tolerance(dtype)
            assert_close(
                out.double(),
                ref64(values, times, query, lens, mode),
                rtol=rtol,
                atol=atol,
                equal_nan=True,
            )
