"""robocache.fuse: many streams onto one timeline, in one kernel."""

import pytest
import torch
from conftest import requires_cuda, tolerance
from helpers import query_times, sorted_times
from torch.testing import assert_close

import robocache
from robocache import reference

MODES = ["linear", "nearest", "previous"]


def make_streams(
    B,
    specs,
    device,
    value_dtype=torch.float32,
    time_dtype=torch.float64,
    shared=False,
    with_lengths=False,
):
    """specs: [(S_k, D_k)] -> list of (values, times[, lengths]) tuples."""
    streams = []
    for S, D in specs:
        values = torch.randn(B, S, D, device=device).to(value_dtype)
        times = sorted_times(B, S, time_dtype, device, shared=shared)
        if with_lengths:
            streams.append((values, times, torch.randint(1, S + 1, (B,), device=device)))
        else:
            streams.append((values, times))
    return streams


def per_stream(streams, query, modes, upcast=True):
    """Per-stream robocache.resample + torch.cat (upcast: the float64 reference instead)."""
    outs = []
    for entry, mode in zip(streams, modes):
        values, times = entry[0], entry[1]
        lengths = entry[2] if len(entry) == 3 else None
        if upcast:
            outs.append(reference.resample(values.double(), times, query, lengths, mode))
        else:
            outs.append(robocache.resample(values, times, query, lengths, mode))
    return torch.cat(outs, dim=-1)


@pytest.mark.parametrize(
    "specs",
    [
        [(17, 5)],
        [(9, 1), (40, 1)],
        [(3, 64), (3000, 16)],
        [(30, 512), (100, 32), (50, 16)],
        [(5 + 7 * k, 1 + (k % 5)) for k in range(16)],
    ],
    ids=["one", "D1", "S3_vs_S3000", "vision_proprio_force", "sixteen"],
)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_matches_per_stream_resample_and_reference(device, specs, shared, with_lengths):
    B, T = 3, 41
    streams = make_streams(B, specs, device, shared=shared, with_lengths=with_lengths)
    query = query_times(B, T, torch.float64, device)
    modes = [MODES[k % 3] for k in range(len(specs))]
    out = robocache.fuse(streams, query, modes=modes)
    assert out.shape == (B, T, sum(D for _, D in specs))
    assert torch.equal(out, per_stream(streams, query, modes, upcast=False))
    assert_close(out.double(), per_stream(streams, query, modes), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "value_dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16]
)
@pytest.mark.parametrize("time_dtype", [torch.float32, torch.float64, torch.int64])
@pytest.mark.parametrize("mode", MODES)
def test_dtypes_and_modes(device, value_dtype, time_dtype, mode):
    B, T = 2, 23
    streams = make_streams(B, [(11, 8), (37, 3), (5, 16)], device, value_dtype, time_dtype)
    query = query_times(B, T, time_dtype, device)
    out = robocache.fuse(streams, query, modes=mode)
    assert out.dtype == value_dtype
    rtol, atol = tolerance(value_dtype)
    assert_close(out.double(), per_stream(streams, query, [mode] * 3), rtol=rtol, atol=atol)


def test_non_contiguous_streams(device):
    B, T = 3, 19
    values = torch.randn(B, 6, 20, device=device).transpose(1, 2)  # (B, 20, 6), D stride 20
    times = sorted_times(B, 40, torch.float32, device)[:, ::2]
    other = torch.randn(B, 12, 8, device=device)[:, :, 1:6]  # misaligned columns
    other_t = sorted_times(B, 12, torch.float32, device)
    query = query_times(T, B, torch.float32, device).t()
    lengths = torch.randint(1, 13, (2 * B,), device=device)[::2]
    streams = [(values, times), (other, other_t, lengths)]
    out = robocache.fuse(streams, query, modes=["nearest", "linear"])
    assert_close(
        out.double(), per_stream(streams, query, ["nearest", "linear"]), rtol=1e-5, atol=1e-5
    )


def test_more_streams_than_one_launch_holds(device):
    B, T = 2, 9
    specs = [(4 + k, 2) for k in range(40)]
    streams = make_streams(B, specs, device, time_dtype=torch.float32)
    query = query_times(B, T, torch.float32, device).requires_grad_()
    out = robocache.fuse(streams, query)
    assert_close(
        out.double(), per_stream(streams, query.detach(), ["linear"] * 40), rtol=1e-5, atol=1e-5
    )
    out.sum().backward()
    expected = torch.autograd.grad(per_stream(streams, query, ["linear"] * 40).sum(), query)[0]
    assert_close(query.grad.double(), expected.double(), rtol=1e-4, atol=1e-4)


def test_mapping_modes_and_columns(device):
    B, T = 2, 10
    vision, proprio, force = make_streams(B, [(30, 12), (100, 4), (500, 3)], device)
    streams = {"vision": vision, "proprio": proprio, "force": force}
    query = query_times(B, T, torch.float64, device)
    out = robocache.fuse(streams, query, modes={"vision": "previous"})
    cols = robocache.fuse_columns(streams)
    assert cols == {"vision": slice(0, 12), "proprio": slice(12, 16), "force": slice(16, 19)}
    assert torch.equal(
        out[..., cols["vision"]], robocache.resample(*vision, query, mode="previous")
    )
    assert torch.equal(out[..., cols["force"]], robocache.resample(*force, query))
    assert robocache.fuse_columns([vision, force]) == [slice(0, 12), slice(12, 15)]


def test_fuse_multimodal_seed_call(device):
    vision = torch.randn(4, 30, 512, device=device)
    proprio = torch.randn(4, 100, 32, device=device)
    force = torch.randn(4, 50, 16, device=device)
    vision_t = torch.linspace(0, 1, 30, device=device).expand(4, 30)
    proprio_t = torch.linspace(0, 1, 100, device=device).expand(4, 100)
    force_t = torch.linspace(0, 1, 50, device=device).expand(4, 50)
    target_t = torch.linspace(0, 1, 50, device=device).expand(4, 50)
    args = (vision, vision_t, proprio, proprio_t, force, force_t, target_t)
    out = robocache.fuse_multimodal(*args)
    assert out.shape == (4, 50, 560)
    assert_close(out, robocache.fuse_multimodal(*args, backend="pytorch"))


def test_gradcheck(device):
    B, T = 2, 6
    streams = make_streams(
        B, [(7, 2), (4, 3), (9, 1)], device, value_dtype=torch.float64, with_lengths=True
    )
    values = [v.requires_grad_() for v, _, _ in streams]
    query = query_times(B, T, torch.float64, device).requires_grad_()
    modes = ["linear", "previous", "linear"]

    def fn(v0, v1, v2, q):
        return robocache.fuse(
            [
                (v0, streams[0][1], streams[0][2]),
                (v1, streams[1][1]),
                (v2, streams[2][1], streams[2][2]),
            ],
            q,
            modes=modes,
        )

    assert torch.autograd.gradcheck(fn, (*values, query), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize(
    "specs",
    [
        [(30, 512), (100, 32), (3000, 16)],
        [(5 + 7 * k, 1 + (k % 5)) for k in range(40)],
    ],
    ids=["vision_proprio_force", "forty"],
)
def test_gradients_queries_in_and_out_of_order(device, specs):
    """The backward of several streams (more streams than one CUDA launch
    holds in "forty") against the float64 reference: rows of queries in
    order, shuffled, and with a NaN."""
    B, T = 4, 150
    streams = make_streams(B, specs, device, with_lengths=True)
    query = torch.sort(query_times(B, T, torch.float64, device), dim=1).values
    query[1] = query[1, torch.randperm(T, device=device)]
    query[2, 7] = float("nan")
    modes = [MODES[k % 3] for k in range(len(specs))]
    values = [v.requires_grad_() for v, _, _ in streams]
    q = query.clone().requires_grad_()
    grad = torch.randn(B, T, sum(D for _, D in specs), device=device)
    got = torch.autograd.grad(robocache.fuse(streams, q, modes=modes), (*values, q), grad)
    v64 = [v.detach().double().requires_grad_() for v in values]
    ref_streams = [(v, t, n) for v, (_, t, n) in zip(v64, streams)]
    q64 = query.clone().requires_grad_()
    expected = torch.autograd.grad(
        reference.fuse(ref_streams, q64, modes=modes), (*v64, q64), grad.double()
    )
    for a, b in zip(got, expected):
        assert_close(a.double(), b, rtol=1e-4, atol=1e-4)


def test_gradient_to_some_streams_only(device):
    streams = make_streams(2, [(7, 2), (4, 3)], device)
    streams[1][0].requires_grad_()
    out = robocache.fuse(streams, query_times(2, 5, torch.float64, device))
    out.sum().backward()
    assert streams[0][0].grad is None
    assert streams[1][0].grad.shape == (2, 4, 3)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device, requires_grad):
    B, T = 3, 7
    streams = make_streams(B, [(8, 4), (13, 2), (5, 8)], device, time_dtype=torch.float32)
    values = [v.requires_grad_(requires_grad) for v, _ in streams]
    times = [t for _, t in streams]
    query = query_times(B, T, torch.float32, device).requires_grad_(requires_grad)
    lengths = torch.tensor([[8, 8, 8], [13, 2, 9], [5, 1, 3]], device=device)
    op = torch.ops.robocache.fuse.default
    torch.library.opcheck(op, (values, times, query, lengths, "linear,nearest,previous"))
    torch.library.opcheck(op, (values, times, query))
    torch.library.opcheck(op, (values[:1], times[:1], query, None, "previous"))


def test_opcheck_backward_op(device):
    streams = make_streams(2, [(8, 4), (5, 3)], device, time_dtype=torch.float32)
    values = [v for v, _ in streams]
    times = [t for _, t in streams]
    query = query_times(2, 6, torch.float32, device)
    grad = torch.randn(2, 6, 7, device=device)
    torch.library.opcheck(
        torch.ops.robocache._fuse_backward.default,
        (grad, values, times, query, None, "linear", [True, False], True),
    )


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def f(vision, vision_t, proprio, proprio_t, query):
        fused = robocache.fuse(
            [(vision, vision_t), (proprio, proprio_t)], query, modes=["previous", "linear"]
        )
        return torch.tanh(fused)

    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=dynamic)
    for B, T in [(2, 5), (3, 9), (4, 12)]:
        (vision, vision_t), (proprio, proprio_t) = make_streams(
            B, [(10, 6), (40, 3)], device, time_dtype=torch.float32
        )
        query = query_times(B, T, torch.float32, device)
        args = (vision, vision_t, proprio, proprio_t, query)
        assert_close(compiled(*args), f(*args))
    if dynamic:
        assert counter.frame_count == 1, "changing B and T recompiled under dynamic=True"


def test_torch_compile_backward(device):
    torch._dynamo.reset()

    def loss(a, a_t, b, b_t, query):
        return (robocache.fuse([(a, a_t), (b, b_t)], query) ** 2).sum()

    compiled = torch.compile(loss, fullgraph=True)
    (a, a_t), (b, b_t) = make_streams(3, [(10, 4), (30, 2)], device, time_dtype=torch.float32)
    a.requires_grad_()
    b.requires_grad_()
    query = query_times(3, 8, torch.float32, device).requires_grad_()
    got = torch.autograd.grad(compiled(a, a_t, b, b_t, query), (a, b, query))
    expected = torch.autograd.grad(loss(a, a_t, b, b_t, query), (a, b, query))
    for g, e in zip(got, expected):
        assert_close(g, e, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def test_error_empty_stream_list():
    with pytest.raises(ValueError, match="streams is empty"):
        robocache.fuse([], torch.rand(4))
    with pytest.raises(ValueError, match="needs at least one stream; got an empty list"):
        torch.ops.robocache.fuse([], [], torch.rand(4))


def test_error_shape_mismatch_names_the_stream():
    streams = make_streams(2, [(5, 3), (6, 2)], "cpu", time_dtype=torch.float32)
    bad = [streams[0], (streams[1][0], torch.arange(5.0))]
    with pytest.raises(ValueError, match=r"robocache.fuse: stream 1: times must have S = "):
        robocache.fuse(bad, torch.rand(2, 4))
    bad = [streams[0], (streams[1][0][0], streams[1][1])]
    with pytest.raises(ValueError, match=r"stream 1: values must be 3-D"):
        robocache.fuse(bad, torch.rand(2, 4))


def test_error_batch_mismatch_between_streams():
    a = (torch.randn(2, 5, 3), torch.arange(5.0))
    b = (torch.randn(3, 5, 3), torch.arange(5.0))
    with pytest.raises(ValueError, match=r"stream 1: values has batch size 3 but stream 0 has 2"):
        robocache.fuse([a, b], torch.rand(4))


def test_error_mixed_dtypes_name_the_stream():
    a = (torch.randn(2, 5, 3), torch.arange(5.0))
    with pytest.raises(
        TypeError, match=r"stream 1: values dtype Double differs from stream 0's Float"
    ):
        robocache.fuse([a, (torch.randn(2, 5, 3).double(), torch.arange(5.0))], torch.rand(4))
    with pytest.raises(TypeError, match=r"stream 1: times dtype Double differs"):
        robocache.fuse([a, (torch.randn(2, 5, 3), torch.arange(5.0).double())], torch.rand(4))


def test_error_different_devices():
    a = (torch.randn(2, 5, 3), torch.arange(5.0))
    b = (torch.randn(2, 5, 3, device="meta"), torch.arange(5.0, device="meta"))
    with pytest.raises(ValueError, match=r"stream 1: values are on meta but stream 0's are on cpu"):
        robocache.fuse([a, b], torch.rand(4))


def test_error_modes_and_lengths_lists():
    a = (torch.randn(2, 5, 3), torch.arange(5.0))
    with pytest.raises(
        ValueError, match=r"modes\[1\] must be 'linear', 'nearest' or 'previous'; got 'cubic'"
    ):
        robocache.fuse([a, a], torch.rand(4), modes=["linear", "cubic"])
    with pytest.raises(
        ValueError,
        match=r"modes must be one mode or one per stream, comma-separated; got 2 modes \('linear,previous'\) for 3 streams",
    ):
        torch.ops.robocache.fuse([a[0]] * 3, [a[1]] * 3, torch.rand(4), None, "linear,previous")
    with pytest.raises(
        ValueError,
        match=r"lengths must be \(K, B\) with one row per stream \(K = 3\); got shape \[2, 2\]",
    ):
        torch.ops.robocache.fuse(
            [a[0]] * 3, [a[1]] * 3, torch.rand(4), torch.ones(2, 2, dtype=torch.long)
        )
    with pytest.raises(
        ValueError, match=r"stream 1: lengths must be \(B,\) = \(2,\); got shape \[3\]"
    ):
        robocache.fuse([a, (a[0], a[1], torch.tensor([1, 2, 3]))], torch.rand(4))
    with pytest.raises(TypeError, match=r"stream 0: lengths must be an int64 tensor"):
        robocache.fuse([(a[0], a[1], torch.tensor([1, 2], dtype=torch.int32))], torch.rand(4))
    with pytest.raises(ValueError, match=r"stream 1: lengths\[0\] = 9 is outside \[1, S\]"):
        robocache.fuse([a, (a[0], a[1], torch.tensor([9, 1]))], torch.rand(4))
    with pytest.raises(ValueError, match=r"stream 'x' must be a \(values, times\)"):
        robocache.fuse({"x": a[0]}, torch.rand(4))


# ---------------------------------------------------------------------------
# CUDA: one launch per forward
# ---------------------------------------------------------------------------


@requires_cuda
def test_cuda_forward_is_one_kernel_launch():
    B, T = 8, 150
    streams = make_streams(B, [(90, 512), (300, 32), (3000, 16)], "cuda", time_dtype=torch.float32)
    query = query_times(B, T, torch.float32, "cuda")
    robocache.fuse(streams, query)  # warm up
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        robocache.fuse(streams, query)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1, kernels
    assert "interp_forward_kernel" in kernels[0]


@requires_cuda
def test_cuda_no_host_sync():
    streams = make_streams(
        4, [(20, 8), (50, 4)], "cuda", time_dtype=torch.float32, with_lengths=True
    )
    for v, _, _ in streams:
        v.requires_grad_()
    query = query_times(4, 16, torch.float32, "cuda").requires_grad_()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = robocache.fuse(streams, query)
        out.backward(torch.ones_like(out))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert query.grad is not None


@requires_cuda
@pytest.mark.parametrize("n", [1000, 70_001, 300_007])
@pytest.mark.parametrize(
    "specs", [[(70, 4), (9, 2)], [(300, 8), (40, 3), (7, 1)]], ids=["two", "three"]
)
def test_cuda_forward_tiles(n, specs):
    """With several streams a whole block shares a tile of 32 to 256
    flattened queries (more as the launch grows); every tile size with a
    partial last tile, NaN queries and short rows against the float64
    reference, and bit-equal to per-stream resample."""
    B = 3
    T = (n + B - 1) // B
    streams = make_streams(B, specs, "cuda", time_dtype=torch.float32, with_lengths=True)
    query = query_times(B, T, torch.float32, "cuda")
    query[:, ::101] = float("nan")
    modes = [MODES[k % 3] for k in range(len(specs))]
    out = robocache.fuse(streams, query, modes=modes)
    separate = per_stream(streams, query, modes, upcast=False)
    assert torch.equal(out.isnan(), separate.isnan())
    assert torch.equal(out.nan_to_num(), separate.nan_to_num())
    assert_close(
        out.double(), per_stream(streams, query, modes), rtol=1e-5, atol=1e-5, equal_nan=True
    )
