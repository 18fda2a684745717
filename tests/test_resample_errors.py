"""robocache.resample: errors that name the argument, the seed API, and the CUDA-only contracts."""

import pytest
import torch
from conftest import requires_cuda, tolerance
from helpers import query_times, sorted_times
from resample_cases import MODES, ref64
from torch.testing import assert_close

import robocache
from robocache import reference

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
