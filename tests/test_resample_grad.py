"""robocache.resample's gradients (to values, times and queries, every order),
opcheck, torch.compile and FX."""

import pytest
import torch
from helpers import query_times, sorted_times
from resample_cases import MODES, TIME_DTYPES
from torch.testing import assert_close

import robocache
from robocache import reference

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
