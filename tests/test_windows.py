"""robocache.sample_windows: windows cut from packed ragged streams, against
the reference (robocache.reference.sample_windows) on fresh random data."""

import pytest
import torch
from conftest import DEVICES, requires_cuda
from torch.testing import assert_close

import robocache
from robocache import reference

MODES = ["nearest", "previous", "linear", "mean"]
MS = 1_000_000


def ragged(E=6, D=3, dtype=torch.float64, device="cpu", shape=None, lengths=None):
    """E episodes of irregular int64-ns times (some empty, some of one sample)."""
    if lengths is None:
        lengths = torch.randint(0, 9, (E,)).tolist()
        lengths[0], lengths[-1] = 1, 0
    chunks = []
    for n in lengths:
        start = int(torch.randint(0, 50 * MS, ()))
        gaps = torch.randint(1, 40 * MS, (n,))
        gaps[torch.rand(n) < 0.15] = 0  # repeated stamps happen in logs
        chunks.append(start + torch.cumsum(gaps, 0))
    times = torch.cat(chunks) if chunks else torch.zeros(0, dtype=torch.int64)
    offsets = torch.tensor([0] + lengths).cumsum(0)
    N = int(offsets[-1])
    shape = (D,) if shape is None else shape
    if dtype.is_floating_point:
        values = torch.randn(N, *shape, dtype=dtype)
    elif dtype == torch.bool:
        values = torch.rand(N, *shape) < 0.5
    else:
        values = torch.randint(0, 200, (N, *shape)).to(dtype)
    return values.to(device), times.to(device), offsets.to(device)


def windows_for(times, offsets, B=5, W=4, device="cpu"):
    """Windows of random episodes: queries around, on and beyond the samples."""
    E = offsets.numel() - 1
    episode = torch.randint(0, E, (B,))
    q = torch.randint(-60 * MS, 400 * MS, (B, W))
    for b in range(B):  # some queries exactly on samples
        a, z = int(offsets[episode[b]]), int(offsets[episode[b] + 1])
        if z > a:
            q[b, 0] = times[torch.randint(a, z, ())]
    return episode.to(device), q.to(device)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_matches_reference(device, mode, dtype):
    values, times, offsets = ragged(dtype=dtype, device=device)
    episode, q = windows_for(times.cpu(), offsets.cpu(), device=device)
    kw = dict(interval=30 * MS) if mode == "mean" else {}
    got = robocache.sample_windows(values, times, offsets, episode, q, mode, **kw)
    expected = reference.sample_windows(values, times, offsets, episode, q, mode, **kw)
    rtol = {torch.float64: 1e-12, torch.float32: 1e-6, torch.bfloat16: 1e-2}[dtype]
    assert_close(got[0], expected[0], rtol=rtol, atol=rtol)
    assert torch.equal(got[1], expected[1])
    assert torch.equal(got[2], expected[2])


@pytest.mark.parametrize("mode", ["nearest", "previous"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.bool, torch.int64, torch.float16])
def test_point_modes_gather_any_dtype_exactly(device, mode, dtype):
    # uint8 images stay uint8; rows of odd byte counts take the narrow copy.
    for shape in [(3, 5, 7), (2, 8), (1,)]:
        values, times, offsets = ragged(dtype=dtype, device=device, shape=shape)
        episode, q = windows_for(times.cpu(), offsets.cpu(), device=device)
        got = robocache.sample_windows(values, times, offsets, episode, q, mode)
        expected = reference.sample_windows(values, times, offsets, episode, q, mode)
        assert got[0].dtype == dtype and got[0].shape == (*q.shape, *shape)
        for g, e in zip(got, expected):
            assert torch.equal(g, e)


def long_clocks():
    """Long episodes whose times defeat a guess from an even clock: regular,
    jittered, a long pause, bursts of repeated stamps, and one outlier."""
    n = 3000
    regular = torch.arange(n) * 33 * MS
    jittered = regular + torch.randint(-10 * MS, 10 * MS, (n,))
    jittered = torch.sort(jittered).values
    paused = torch.cat([torch.arange(n // 2), 10**6 + torch.arange(n - n // 2)]) * MS
    bursts = torch.repeat_interleave(torch.arange(n // 10) * 7 * MS, 10)
    outlier = torch.cat([torch.arange(n - 1) * MS, torch.tensor([10**7 * MS])])
    chunks = [regular, jittered, paused, bursts, outlier]
    return torch.cat(chunks), torch.tensor([0] + [len(c) for c in chunks]).cumsum(0)


@pytest.mark.parametrize("mode", MODES)
def test_long_irregular_episodes_match_reference(device, mode):
    times, offsets = long_clocks()
    values = torch.randn(times.numel(), 2, dtype=torch.float64)
    E = offsets.numel() - 1
    queries = []
    for e in range(E):
        t = times[offsets[e] : offsets[e + 1]]
        picks = torch.randint(0, t.numel(), (300,))
        queries += [
            t[picks],
            t[picks] + 1,
            t[picks] - 1,
            torch.randint(int(t[0]), int(t[-1]), (300,)),
        ]
    q = torch.stack(queries).reshape(E, -1)
    episode = torch.arange(E)
    kw = dict(interval=20 * MS) if mode == "mean" else {}
    args = [x.to(device) for x in (values, times, offsets, episode, q)]
    got = robocache.sample_windows(*args, mode, **kw)
    expected = reference.sample_windows(values, times, offsets, episode, q, mode, **kw)
    assert_close(got[0].cpu(), expected[0], rtol=1e-12, atol=1e-12)
    assert torch.equal(got[1].cpu(), expected[1])
    assert torch.equal(got[2].cpu(), expected[2])


@pytest.mark.parametrize("shape", [(64, 64, 3), (33, 33, 3)])
def test_long_rows_copy_exactly(device, shape):
    # Rows of at least a block's worth of chunks (camera frames) are copied
    # row by row; an odd byte count takes 1-byte chunks; an empty episode
    # gives zeros.
    values, times, offsets = ragged(dtype=torch.uint8, device=device, shape=shape)
    episode, q = windows_for(times.cpu(), offsets.cpu(), B=7, W=3, device=device)
    episode[-1] = offsets.numel() - 2  # ragged's last episode has no samples
    got = robocache.sample_windows(values, times, offsets, episode, q, "nearest")
    expected = reference.sample_windows(values, times, offsets, episode, q, "nearest")
    for g, e in zip(got, expected):
        assert torch.equal(g, e)
    assert got[0].shape == (7, 3, *shape) and not got[0][-1].any() and got[1][-1].all()


def test_padding_edges_and_tolerances(device):
    # One episode sampled at 0, 10, 20, 60 ms (a 40 ms drop-out).
    times = torch.tensor([0, 10, 20, 60], device=device) * MS
    values = torch.arange(4.0, device=device).unsqueeze(1)
    offsets = torch.tensor([0, 4], device=device)
    episode = torch.zeros(1, dtype=torch.int64, device=device)
    q = torch.tensor([[-10, -1, 0, 15, 40, 60, 61, 70]], device=device) * MS // 1
    q[0, 1] = -1000  # 1 us before the first sample
    out, pad, age = robocache.sample_windows(values, times, offsets, episode, q, "previous")
    assert out[0, :, 0].tolist() == [0, 0, 0, 1, 2, 3, 3, 3]
    assert pad[0].tolist() == [True, True, False, False, False, False, True, True]
    assert age[0].tolist() == [-10 * MS, -1000, 0, 5 * MS, 20 * MS, 0, MS, 10 * MS]
    # An edge tolerance of 2 us accepts the query 1 us early.
    _, pad, _ = robocache.sample_windows(
        values, times, offsets, episode, q, "previous", edge_tolerance=2000
    )
    assert pad[0].tolist() == [True, False, False, False, False, False, True, True]
    # A 12 ms tolerance flags the query inside the drop-out, for every mode.
    for mode in ("previous", "nearest", "linear"):
        out, pad, _ = robocache.sample_windows(
            values, times, offsets, episode, q, mode, tolerance=12 * MS
        )
        assert pad[0, 4], mode  # 40 ms: 20 ms from either neighbour
        assert not pad[0, 3], mode
    # mean over (q - 10 ms, q]: the drop-out is an empty interval: padding.
    out, pad, _ = robocache.sample_windows(
        values, times, offsets, episode, q, "mean", interval=10 * MS
    )
    assert pad[0, 4] and not pad[0, 3] and not pad[0, 5]
    assert out[0, 3, 0] == 1.0 and out[0, 4, 0] == 2.0  # the gap holds the previous sample


def test_interval_mean_is_exact_against_float64():
    # Force at 1 kHz down to 10 Hz: each output is the mean of 100 samples.
    times = torch.arange(2000, dtype=torch.int64) * MS
    values = torch.randn(2000, 6, dtype=torch.float64)
    offsets = torch.tensor([0, 2000])
    q = (torch.arange(1, 20) * 100 * MS).view(1, -1)
    out, pad, _ = robocache.sample_windows(
        values, times, offsets, torch.zeros(1, dtype=torch.int64), q, "mean", interval=100 * MS
    )
    # (q - 100 ms, q] holds samples 100 (k - 1) + 1 .. 100 k.
    expected = torch.stack([values[k * 100 - 99 : k * 100 + 1].mean(0) for k in range(1, 20)])
    assert_close(out[0], expected, rtol=1e-14, atol=1e-14)
    assert not pad.any()


@pytest.mark.parametrize("mode", MODES)
def test_gradients(device, mode):
    values, times, offsets = ragged(device=device, lengths=[5, 1, 0, 7])
    episode, q = windows_for(times.cpu(), offsets.cpu(), device=device)
    values.requires_grad_()
    kw = dict(interval=30 * MS) if mode == "mean" else {}

    def fn(v):
        return robocache.sample_windows(v, times, offsets, episode, q, mode, **kw)[0]

    assert torch.autograd.gradcheck(fn, (values,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, (values,))


@pytest.mark.parametrize("mode", MODES)
def test_opcheck(device, mode):
    values, times, offsets = ragged(device=device, lengths=[3, 0, 6, 2])
    episode, q = windows_for(times.cpu(), offsets.cpu(), device=device)
    interval = 30 * MS if mode == "mean" else 0
    torch.library.opcheck(
        torch.ops.robocache.sample_windows,
        (values.reshape(values.shape[0], -1), times, offsets, episode, q, mode, interval, -1, 0),
    )
    grad = torch.randn(*q.shape, values.shape[1], dtype=values.dtype, device=device)
    torch.library.opcheck(
        torch.ops.robocache._sample_windows_backward,
        (grad, times, offsets, episode, q, mode, interval, -1, 0, values.shape[0]),
    )


def test_compiled_with_dynamic_shapes_never_recompiles(device):
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def windows(values, times, offsets, episode, q):
        out, pad, _ = robocache.sample_windows(values, times, offsets, episode, q, "linear")
        return out * (~pad).unsqueeze(-1)

    compiled = torch.compile(windows, backend=counter, fullgraph=True, dynamic=True)
    # Sizes chosen apart, so that duck sizing never ties two of them.
    for B, lengths in [(5, [6, 0, 9, 1, 1]), (7, [8, 2, 0, 9, 1, 3, 0]), (11, [9] * 4 + [0] * 5)]:
        values, times, offsets = ragged(device=device, lengths=lengths)
        episode, q = windows_for(times.cpu(), offsets.cpu(), B=B, W=13, device=device)
        assert_close(
            compiled(values, times, offsets, episode, q),
            windows(values, times, offsets, episode, q),
        )
    assert counter.frame_count == 1


def test_errors():
    values, times, offsets = ragged(lengths=[3, 2])
    episode, q = torch.tensor([0, 1]), torch.zeros(2, 3, dtype=torch.int64)
    call = robocache.sample_windows
    with pytest.raises(ValueError, match="mode must be 'nearest', 'previous', 'linear' or 'mean'"):
        call(values, times, offsets, episode, q, "cubic")
    with pytest.raises(ValueError, match=r"mode 'mean' needs an interval > 0"):
        call(values, times, offsets, episode, q, "mean")
    with pytest.raises(TypeError, match=r"mode 'linear' needs float32.*got Byte"):
        call(values.to(torch.uint8), times, offsets, episode, q, "linear")
    with pytest.raises(ValueError, match=r"episode\[1\] = 2 is not an episode"):
        call(values, times, offsets, torch.tensor([0, 2]), q)
    with pytest.raises(ValueError, match="offsets must be non-decreasing"):
        call(values, times, torch.tensor([0, 3, 2]), episode, q)
    with pytest.raises(ValueError, match=r"offsets must lie in \[0, N = 5\]"):
        call(values, times, torch.tensor([0, 3, 6]), episode, q)
    with pytest.raises(ValueError, match="times must have one entry per row of values"):
        call(values, times[:-1], offsets, episode, q)
    with pytest.raises(TypeError, match="times must be int64"):
        call(values, times.double(), offsets, episode, q)
    with pytest.raises(ValueError, match="query_times must have one row per entry of episode"):
        call(values, times, offsets, episode, q[:1])
    with pytest.raises(ValueError, match="tolerance must be a non-negative int of nanoseconds"):
        call(values, times, offsets, episode, q, tolerance=0.5)
    with pytest.raises(TypeError, match=r"query_times must be a torch.Tensor.*torch.from_numpy"):
        call(values, times, offsets, episode, q.numpy())


@requires_cuda
def test_cuda_bad_episode_indices_stay_in_bounds_without_a_sync():
    values, times, offsets = ragged(lengths=[3, 2], device="cuda")
    episode = torch.tensor([0, 5, -1, 1], device="cuda")
    q = torch.zeros(4, 2, dtype=torch.int64, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out, pad, _ = robocache.sample_windows(values, times, offsets, episode, q, "linear")
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert pad[1:3].all() and (out[1:3] == 0).all()


@requires_cuda
def test_cuda_graph_capture():
    values, times, offsets = ragged(E=8, device="cuda", shape=(96, 96, 3), dtype=torch.uint8)
    episode, q = windows_for(times.cpu(), offsets.cpu(), B=16, W=2, device="cuda")
    robocache.sample_windows(values, times, offsets, episode, q)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, pad, age = robocache.sample_windows(values, times, offsets, episode, q)
    episode.copy_(torch.randint(0, 8, (16,), device="cuda"))
    graph.replay()
    expected = reference.sample_windows(values, times, offsets, episode, q)
    for g, e in zip((out, pad, age), expected):
        assert torch.equal(g, e)


# ---------------------------------------------------------------------------
# resample's interval mean (run by sample_windows)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("shared_times", [False, True])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_resample_mean_is_exact_against_float64(device, shared_times, with_lengths):
    B, S, T, D = 3, 400, 12, 5
    rows = 1 if shared_times else B
    times = torch.cumsum(torch.randint(0, 3 * MS, (rows, S)), 1)  # ~1 kHz, repeats included
    times = (times[0] if shared_times else times).to(device)
    values = torch.randn(B, S, D, dtype=torch.float64, device=device)
    query = torch.randint(-20 * MS, 700 * MS, (B, T)).sort(1).values.to(device)
    lengths = torch.tensor([S, 250, 1], device=device) if with_lengths else None
    interval = 50 * MS
    got = robocache.resample(values, times, query, lengths, "mean", interval=interval)
    expected = reference.resample(values, times, query, lengths, "mean", interval=interval)
    assert_close(got, expected, rtol=1e-13, atol=1e-13)
    small = values[:, :40].detach().clone().requires_grad_()
    small_times = times[..., :40]
    assert torch.autograd.gradcheck(
        lambda v: robocache.resample(v, small_times, query // 20, None, "mean", interval=interval),
        (small,),
    )


def test_resample_mean_errors():
    v, t = torch.randn(2, 5, 1), torch.arange(5)
    q = torch.arange(3).expand(2, 3)
    with pytest.raises(ValueError, match="mode 'mean' needs interval, a positive int; got None"):
        robocache.resample(v, t, q, mode="mean")
    with pytest.raises(TypeError, match="mode 'mean' needs int64 times"):
        robocache.resample(v, t.double(), q.double(), mode="mean", interval=1)
    with pytest.raises(ValueError, match="interval is for mode 'mean' only"):
        robocache.resample(v, t, q, mode="linear", interval=1)
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, S = 5\]"):
        robocache.resample(v, t, q, torch.tensor([5, 0]), mode="mean", interval=1)


def test_an_empty_stream_gives_zeros_and_padding(device):
    values = torch.zeros(0, 2, 3, device=device)
    times = torch.zeros(0, dtype=torch.int64, device=device)
    offsets = torch.zeros(3, dtype=torch.int64, device=device)
    episode = torch.tensor([0, 1], device=device)
    q = torch.zeros(2, 4, dtype=torch.int64, device=device)
    out, pad, age = robocache.sample_windows(values, times, offsets, episode, q)
    assert out.shape == (2, 4, 2, 3) and (out == 0).all() and pad.all() and (age == 0).all()


def test_extreme_times_do_not_overflow():
    big = 2**62
    times = torch.tensor([-big, big])
    values = torch.tensor([[0.0], [1.0]], dtype=torch.float64)
    offsets, episode = torch.tensor([0, 2]), torch.tensor([0])
    q = torch.tensor([[-(2**63), 0, 2**63 - 1]])
    for mode in ("nearest", "linear"):
        got = robocache.sample_windows(values, times, offsets, episode, q, mode)
        expected = reference.sample_windows(values, times, offsets, episode, q, mode)
        for g, e in zip(got, expected):
            assert torch.equal(g, e), mode


@pytest.mark.parametrize("device", DEVICES)
def test_the_tie_rule_of_repeated_times(device):
    """Several samples at one time t: a query at or after t reads the last of
    them; a query before t that nearest rounds up to t reads the first."""
    values = torch.arange(5.0, device=device).view(5, 1)
    times = torch.tensor([0, 10, 10, 10, 20], device=device)
    offsets, episode = torch.tensor([0, 5], device=device), torch.tensor([0], device=device)
    query = torch.tensor([[9, 10, 11, 14, 16]], device=device)
    expected = {"nearest": [1.0, 3.0, 3.0, 3.0, 4.0], "previous": [0.0, 3.0, 3.0, 3.0, 3.0]}
    for mode, want in expected.items():
        out, _, _ = robocache.sample_windows(values, times, offsets, episode, query, mode)
        assert out.flatten().tolist() == want, mode
        ref, _, _ = reference.sample_windows(values, times, offsets, episode, query, mode)
        assert ref.flatten().tolist() == want, mode
