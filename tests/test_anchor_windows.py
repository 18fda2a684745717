"""robocache.anchor_windows: several streams' windows around anchor rows in
one call, against the reference (robocache.reference.anchor_windows) on
fresh random data."""

import pytest
import torch
from conftest import requires_cuda
from test_windows import MS, ragged
from torch.testing import assert_close

import robocache
from robocache import reference

OPS = torch.ops.robocache


def streams(E=6, device="cpu"):
    """An anchor stream and three more on their own clocks (episodes of
    every length, some empty), of several dtypes and row shapes."""
    lengths = torch.randint(1, 9, (E,)).tolist()
    lengths[-1] = 1
    anchor = ragged(E=E, D=1, lengths=lengths, device=device)
    others = [
        ragged(E=E, D=7, dtype=torch.float64, device=device),
        ragged(E=E, dtype=torch.uint8, shape=(4, 5, 3), device=device),
        ragged(E=E, D=3, dtype=torch.float32, device=device),
    ]
    return anchor, [anchor] + others


def deltas_for(K, device):
    """Window offsets from the anchor time: irregular, some beyond every episode."""
    widths = [3, 2, 5, 1][:K]
    return [
        torch.randint(-80 * MS, 120 * MS, (w,), dtype=torch.int64, device=device) for w in widths
    ]


def call_both(device, modes, B=9, **kw):
    anchor, all_streams = streams(device=device)
    _, times, offsets = anchor
    index = torch.randint(0, int(offsets[-1]), (B,), device=device)
    args = (
        [s[0] for s in all_streams],
        [s[1] for s in all_streams],
        [s[2] for s in all_streams],
        deltas_for(len(all_streams), device),
        offsets,
        times,
        index,
    )
    N_anchor = times.numel()
    kw["anchor_rows"] = [  # per-frame metadata gathered in the same launch
        torch.arange(N_anchor, device=device) * 3,
        torch.randn(N_anchor, 2, dtype=torch.float32, device=device),
        torch.rand(N_anchor, device=device) < 0.5,
    ]
    got = robocache.anchor_windows(*args, modes, **kw)
    expected = reference.anchor_windows(*args, modes, **kw)
    return got, expected


def assert_same(got, expected):
    outs, pads, ages, episode, rows = got
    e_outs, e_pads, e_ages, e_episode, e_rows = expected
    assert torch.equal(episode, e_episode)
    assert len(rows) == len(e_rows)
    for r, e in zip(rows, e_rows):
        assert r.shape == e.shape and torch.equal(r, e)
    for k, (o, e) in enumerate(zip(outs, e_outs)):
        assert o.shape == e.shape and o.dtype == e.dtype, k
        assert_close(o, e, rtol=1e-6, atol=1e-6, msg=f"stream {k}")
    for p, e in zip(pads, e_pads):
        assert torch.equal(p, e)
    for a, e in zip(ages, e_ages):
        assert torch.equal(a, e)


@pytest.mark.parametrize(
    "modes",
    [
        "nearest",
        "previous",
        ["previous", "linear", "nearest", "mean"],
        ["mean", "mean", "previous", "linear"],
    ],
)
def test_matches_reference(device, modes):
    kw = {}
    if "mean" in modes:
        kw["intervals"] = [30 * MS, 25 * MS, 0, 40 * MS]  # stream 2 (uint8) takes a point mode
    got, expected = call_both(device, modes, **kw)
    assert_same(got, expected)


def test_tolerances_and_edge(device):
    got, expected = call_both(
        device,
        "nearest",
        tolerances=[None, 5 * MS, 0, 20 * MS],
        edge_tolerance=3 * MS,
    )
    assert_same(got, expected)


def test_the_same_windows_as_sample_windows_per_stream(device):
    """The fused call equals one sample_windows call per stream."""
    anchor, all_streams = streams(device=device)
    _, times, offsets = anchor
    index = torch.randint(0, int(offsets[-1]), (12,), device=device)
    deltas = deltas_for(4, device)
    outs, pads, ages, episode, _ = robocache.anchor_windows(
        [s[0] for s in all_streams],
        [s[1] for s in all_streams],
        [s[2] for s in all_streams],
        deltas,
        offsets,
        times,
        index,
        "previous",
    )
    assert torch.equal(episode, torch.searchsorted(offsets[1:], index, right=True))
    for k, (values, t, o) in enumerate(all_streams):
        q = times[index].unsqueeze(1) + deltas[k]
        out, pad, age = robocache.sample_windows(values, t, o, episode, q, "previous")
        assert torch.equal(outs[k], out) and torch.equal(pads[k], pad)
        assert torch.equal(ages[k], age)


def test_more_streams_than_one_launch_holds(device):
    """Past 16 streams the CUDA launcher splits the launch; same windows."""
    E = 4
    anchor = ragged(E=E, D=1, lengths=[3, 1, 5, 2], device=device)
    many = [ragged(E=E, D=k % 3 + 1, device=device) for k in range(19)]
    index = torch.randint(0, 11, (7,), device=device)
    deltas = [torch.tensor([0, 10 * MS, -15 * MS], device=device)] * 19
    args = ([s[0] for s in many], [s[1] for s in many], [s[2] for s in many], deltas)
    args += (anchor[2], anchor[1], index)
    rows = [torch.arange(11, device=device) + k for k in range(3)]  # 22 streams a call
    assert_same(
        robocache.anchor_windows(*args, "linear", anchor_rows=rows),
        reference.anchor_windows(*args, "linear", anchor_rows=rows),
    )


def test_an_empty_batch(device):
    anchor, all_streams = streams(device=device)
    index = torch.zeros(0, dtype=torch.int64, device=device)
    outs, pads, ages, episode, rows = robocache.anchor_windows(
        [s[0] for s in all_streams],
        [s[1] for s in all_streams],
        [s[2] for s in all_streams],
        deltas_for(4, device),
        anchor[2],
        anchor[1],
        index,
        anchor_rows=[torch.zeros(anchor[1].numel(), 2, 3, device=device)],
    )
    assert episode.shape == (0,) and rows[0].shape == (0, 2, 3)
    assert [o.shape for o in outs] == [(0, 3, 1), (0, 2, 7), (0, 5, 4, 5, 3), (0, 1, 3)]
    assert all(p.shape == a.shape for p, a in zip(pads, ages))


def test_gradients(device):
    anchor = ragged(E=3, D=1, lengths=[4, 1, 3], device=device)
    a = ragged(E=3, D=2, lengths=[5, 0, 4], device=device)
    b = ragged(E=3, D=3, lengths=[2, 3, 6], device=device)
    index = torch.tensor([0, 3, 4, 7, 5], device=device)
    deltas = [
        torch.tensor([-20 * MS, 0, 35 * MS], device=device),
        torch.tensor([5 * MS], device=device),
    ]

    def fn(va, vb, table):
        outs, _, _, _, rows = robocache.anchor_windows(
            [va, vb],
            [a[1], b[1]],
            [a[2], b[2]],
            deltas,
            anchor[2],
            anchor[1],
            index,
            ["linear", "mean"],
            intervals=[0, 30 * MS],
            anchor_rows=[table],
        )
        return outs[0], outs[1], rows[0]

    va, vb = a[0].clone().requires_grad_(), b[0].clone().requires_grad_()
    table = torch.randn(8, 2, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(fn, (va, vb, table))
    assert torch.autograd.gradgradcheck(fn, (va, vb, table))


@pytest.mark.parametrize("modes", ["nearest", "linear,previous"])
def test_opcheck(device, modes):
    anchor = ragged(E=4, D=1, lengths=[3, 2, 1, 4], device=device)
    a = ragged(E=4, D=3, lengths=[5, 0, 4, 2], device=device)
    b = ragged(E=4, D=2, lengths=[2, 3, 6, 1], device=device)
    index = torch.tensor([0, 3, 9, 5, 6], device=device)
    deltas = [
        torch.tensor([-20 * MS, 0, 35 * MS], device=device),
        torch.tensor([5 * MS, 0], device=device),
    ]
    torch.library.opcheck(
        OPS.anchor_windows,
        (
            [a[0], b[0]],
            [a[1], b[1]],
            [a[2], b[2]],
            deltas,
            anchor[2],
            anchor[1],
            index,
            [torch.randn(10, 2, device=device)],
            modes,
            [],
            [7 * MS],
            1000,
        ),
    )


def test_compiled_with_dynamic_shapes_never_recompiles(device):
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def windows(values, times, offsets, deltas, anchor_offsets, anchor_times, index):
        frame = torch.arange(anchor_times.numel(), device=anchor_times.device)
        outs, pads, _, episode, rows = robocache.anchor_windows(
            values,
            times,
            offsets,
            deltas,
            anchor_offsets,
            anchor_times,
            index,
            "linear",
            anchor_rows=[frame],
        )
        return [o * (~p).unsqueeze(-1) for o, p in zip(outs, pads)], episode, rows

    compiled = torch.compile(windows, backend=counter, fullgraph=True, dynamic=True)
    # Sizes chosen apart, so that duck sizing never ties two of them.
    for B, lengths in [(5, [6, 1, 9, 1, 2]), (7, [8, 2, 1, 9, 1, 3, 4]), (11, [9] * 4 + [1] * 5)]:
        E = len(lengths)
        anchor = ragged(E=E, D=1, lengths=lengths, device=device)
        a = ragged(E=E, D=3, lengths=[i % 4 + 2 for i in range(E)], device=device)
        index = torch.randint(0, int(anchor[2][-1]), (B,), device=device)
        deltas = [torch.randint(-50 * MS, 50 * MS, (B + 2,), device=device)]
        args = ([a[0]], [a[1]], [a[2]], deltas, anchor[2], anchor[1], index)
        assert_close(compiled(*args), windows(*args))
    assert counter.frame_count == 1


def test_errors():
    anchor = ragged(E=2, D=1, lengths=[3, 2])
    a = ragged(E=2, D=3, lengths=[2, 2])
    deltas = [torch.tensor([0, MS])]
    index = torch.tensor([0, 4])
    base = ([a[0]], [a[1]], [a[2]], deltas, anchor[2], anchor[1], index)

    def call(*args, **kw):
        return robocache.anchor_windows(*args, **kw)

    with pytest.raises(ValueError, match=r"index\[1\] = 5 is not a row of any episode"):
        call(*base[:6], torch.tensor([0, 5]))
    with pytest.raises(ValueError, match=r"index\[0\] = -1 is not a row"):
        call(*base[:6], torch.tensor([-1]))
    with pytest.raises(ValueError, match="anchor_offsets must be non-decreasing"):
        call(*base[:4], torch.tensor([0, 4, 3]), *base[5:])
    with pytest.raises(ValueError, match=r"offsets\[0\] must have E \+ 1 = 3 entries"):
        call(base[0], base[1], [torch.tensor([0, 4])], *base[3:])
    with pytest.raises(ValueError, match=r"deltas\[0\] must hold at least one offset"):
        call(*base[:3], [torch.zeros(0, dtype=torch.int64)], *base[4:])
    with pytest.raises(ValueError, match=r"times\[0\] must have one entry per row of values\[0\]"):
        call(base[0], [a[1][:-1]], *base[2:])
    with pytest.raises(TypeError, match=r"mode 'linear' of values\[0\] needs float32"):
        call([a[0].to(torch.uint8)], *base[1:], "linear")
    with pytest.raises(ValueError, match=r"mode 'mean' needs an interval > 0"):
        call(*base, "mean")
    with pytest.raises(ValueError, match="modes must be one mode or a list"):
        call(*base, ["nearest", "linear"])
    with pytest.raises(ValueError, match="modes must be 'nearest', 'previous'"):
        call(*base, "cubic")
    with pytest.raises(ValueError, match=r"intervals must hold one value per stream \(1\); got 2"):
        call(*base, intervals=[1, 2])
    with pytest.raises(ValueError, match="values must hold at least one stream"):
        call([], [], [], [], *base[4:])
    with pytest.raises(TypeError, match="values must be a list of tensors"):
        call(a[0], *base[1:])
    with pytest.raises(
        ValueError, match=r"anchor_rows\[0\] must have one row per row of the anchor"
    ):
        call(*base, anchor_rows=[torch.zeros(4)])
    with pytest.raises(TypeError, match=r"deltas\[0\] must be int64"):
        call(*base[:3], [torch.tensor([0.5])], *base[4:])
    # the op itself (no wrapper): modes, intervals and tolerances per stream
    with pytest.raises(ValueError, match="modes must be one mode or one per stream"):
        OPS.anchor_windows(*base, [], "linear,nearest")
    with pytest.raises(ValueError, match="tolerances must be empty, one value or one per stream"):
        OPS.anchor_windows(*base, [], "nearest", [], [1, 2])


@requires_cuda
def test_cuda_bad_indices_stay_in_bounds_without_a_sync():
    anchor = ragged(E=2, D=1, lengths=[3, 2], device="cuda")
    a = ragged(E=2, D=3, lengths=[2, 2], device="cuda")
    index = torch.tensor([0, 5, -1, 4, 1 << 40], device="cuda")
    deltas = [torch.tensor([0, MS], device="cuda")]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs, pads, ages, episode, rows = robocache.anchor_windows(
            [a[0]],
            [a[1]],
            [a[2]],
            deltas,
            anchor[2],
            anchor[1],
            index,
            "linear",
            anchor_rows=[torch.arange(5, device="cuda") + 1],
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert episode.tolist() == [0, -1, -1, 1, -1]
    bad = torch.tensor([False, True, True, False, True], device="cuda")
    assert pads[0][bad].all() and (outs[0][bad] == 0).all() and (ages[0][bad] == 0).all()
    assert rows[0].tolist() == [1, 0, 0, 5, 0]  # a bad index's table row reads as zeros


@requires_cuda
def test_cuda_graph_capture():
    anchor, all_streams = streams(device="cuda")
    index = torch.randint(0, int(anchor[2][-1]), (16,), device="cuda")
    args = [
        [s[0] for s in all_streams],
        [s[1] for s in all_streams],
        [s[2] for s in all_streams],
        deltas_for(4, "cuda"),
        anchor[2],
        anchor[1],
    ]
    robocache.anchor_windows(*args, index)  # warm-up
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        got = robocache.anchor_windows(*args, index)
    index.copy_(torch.randint(0, int(anchor[2][-1]), (16,), device="cuda"))
    graph.replay()
    assert_same(got, reference.anchor_windows(*args, index))


@requires_cuda
def test_cuda_unaligned_rows_and_every_copy_width():
    """Rows of 1 to 17 bytes, and values starting off a 16-byte boundary."""
    anchor = ragged(E=3, D=1, lengths=[4, 2, 3], device="cuda")
    values, times, offsets = [], [], []
    for width in (1, 2, 3, 4, 6, 8, 12, 16, 17):
        v, t, o = ragged(E=3, D=width, dtype=torch.uint8, device="cuda")
        shifted = torch.empty(v.numel() + 1, dtype=torch.uint8, device="cuda")[1:].view(v.shape)
        values.append(shifted.copy_(v))  # contiguous rows starting one byte in
        times.append(t)
        offsets.append(o)
    index = torch.randint(0, 9, (10,), device="cuda")
    deltas = [torch.tensor([0, 20 * MS, -40 * MS], device="cuda")] * len(values)
    args = (values, times, offsets, deltas, anchor[2], anchor[1], index)
    rows = [torch.randint(0, 256, (9, w), dtype=torch.uint8, device="cuda") for w in (1, 3, 16)]
    assert_same(
        robocache.anchor_windows(*args, anchor_rows=rows),
        reference.anchor_windows(*args, anchor_rows=rows),
    )
