"""robocache.voxelize: errors that name the argument, and the CUDA-only contracts."""

import pytest
import torch
from conftest import requires_cuda, tolerance
from torch.testing import assert_close
from voxelize_cases import FEATURE_REDUCES, REDUCES, cloud

import robocache
from robocache import reference

# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------


def _voxel_call(**over):
    args = dict(
        points=torch.rand(2, 10, 3),
        grid_size=(4, 4, 4),
        voxel_size=0.25,
        origin=(0, 0, 0),
        features=None,
        lengths=None,
        reduce="occupancy",
    )
    args.update(over)
    return robocache.voxelize(
        args.pop("points"),
        args.pop("grid_size"),
        args.pop("voxel_size"),
        args.pop("origin"),
        **args,
    )


@pytest.mark.parametrize(
    "over,exc,match",
    [
        (dict(grid_size=(4, 0, 4)), ValueError, r"grid_size must be positive; got \[4, 0, 4\]"),
        (dict(grid_size=(4, -2, 4)), ValueError, r"grid_size must be positive"),
        (dict(grid_size=(4, 4)), ValueError, r"grid_size must have 3 entries \(X, Y, Z\); got 2"),
        (dict(voxel_size=0.0), ValueError, r"voxel_size must be positive and finite; got \[0\]"),
        (dict(voxel_size=(0.1, -0.1, 0.1)), ValueError, r"voxel_size must be positive and finite"),
        (dict(voxel_size=float("nan")), ValueError, r"voxel_size must be positive and finite"),
        (dict(voxel_size=float("inf")), ValueError, r"voxel_size must be positive and finite"),
        (dict(origin=(0, 0)), ValueError, r"origin must have 3 values; got 2"),
        (dict(origin=(0, float("nan"), 0)), ValueError, r"origin must be finite"),
        (
            dict(points=torch.rand(2, 10, 2)),
            ValueError,
            r"points must be \(B, N, 3\) or \(N, 3\); got shape \[2, 10, 2\]",
        ),
        (
            dict(points=torch.rand(1, 2, 10, 3)),
            ValueError,
            r"points must be \(B, N, 3\) or \(N, 3\)",
        ),
        (
            dict(points=torch.rand(2, 10, 3).half()),
            TypeError,
            r"points must be float32 or float64; got Half",
        ),
        (dict(reduce="sum"), ValueError, r"reduce='sum' needs features; got None"),
        (
            dict(reduce="count", features=torch.rand(2, 10, 4)),
            ValueError,
            r"reduce='count' takes no features",
        ),
        (
            dict(reduce="mean", features=torch.rand(2, 9, 4)),
            ValueError,
            r"features has 9 points but points has 10",
        ),
        (
            dict(reduce="mean", features=torch.rand(3, 10, 4)),
            ValueError,
            r"features has batch size 3 but points has 2",
        ),
        (
            dict(reduce="mean", features=torch.rand(10, 4)),
            ValueError,
            r"features must be \(B, N, C\) like points",
        ),
        (
            dict(reduce="max", features=torch.rand(2, 10, 4).long()),
            TypeError,
            r"features must be float32",
        ),
        (
            dict(lengths=torch.tensor([10, 11])),
            ValueError,
            r"lengths\[1\] = 11 is outside \[0, N\] with N = 10",
        ),
        (dict(lengths=torch.tensor([-1, 3])), ValueError, r"lengths\[0\] = -1 is outside \[0, N\]"),
        (dict(lengths=torch.tensor([10])), ValueError, r"lengths must have B = 2 entries"),
        (dict(lengths=torch.tensor([10, 10]).int()), TypeError, r"lengths must be int64; got Int"),
        (dict(reduce="median"), ValueError, r"reduce must be one of"),
    ],
)
def test_errors(over, exc, match):
    with pytest.raises(exc, match=match):
        _voxel_call(**over)


def test_error_unknown_reduce_in_the_operator():
    with pytest.raises(
        ValueError,
        match=r"reduce must be 'occupancy', 'count', 'sum', 'mean' or 'max'; got 'median'",
    ):
        torch.ops.robocache.voxelize(
            torch.rand(10, 3), None, None, [2, 2, 2], [0.5], [0.0] * 3, "median"
        )


def test_error_grid_too_large_is_torch_out_of_memory(device):
    with pytest.raises(RuntimeError, match=r"(?i)memory|allocate"):
        robocache.voxelize(
            torch.rand(10, 3, device=device), (200000, 200000, 200000), 1.0, (0, 0, 0)
        )


# ---------------------------------------------------------------------------
# CUDA-only contracts
# ---------------------------------------------------------------------------


@requires_cuda
def test_cuda_no_host_sync_and_lengths_contract():
    points = cloud(3, 100, "cuda")
    features = torch.randn(3, 100, 2, device="cuda", requires_grad=True)
    lengths = torch.tensor([-1, 500, 40], device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        count = robocache.voxelize(
            points, (4, 4, 4), 0.25, (0, 0, 0), lengths=lengths, reduce="count"
        )
        occupied = [
            robocache.voxelize(points, grid, 0.25, (0, 0, 0), lengths=lengths)
            for grid in [(4, 4, 4), (3, 4, 3), (3, 5, 3)]
        ]  # word, vector, scalar writes
        mean = robocache.voxelize(
            points, (4, 4, 4), 0.25, (0, 0, 0), features=features, lengths=lengths, reduce="max"
        )
        mean.sum().backward()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert (count[0] == -1).all()  # a negative length is visibly wrong
    for occ in occupied:
        assert torch.isnan(occ[0]).all() and not torch.isnan(occ[1:]).any()
        part = robocache.voxelize(points[2, :40], tuple(occ.shape[1:]), 0.25, (0, 0, 0))
        assert occ[1].sum() > 0 and torch.equal(occ[2], part)
    assert torch.isnan(mean[0]).all()
    full = robocache.voxelize(points[1], (4, 4, 4), 0.25, (0, 0, 0), reduce="count")
    assert torch.equal(count[1], full)  # a length above N is treated as N
    part = robocache.voxelize(points[2, :40], (4, 4, 4), 0.25, (0, 0, 0), reduce="count")
    assert torch.equal(count[2], part)


@requires_cuda
@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_cuda_float_atomics_raise_nondeterminism_alert(reduce):
    points = cloud(1, 50, "cuda")
    features = torch.randn(1, 50, 2, device="cuda")
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.raises(RuntimeError, match="robocache::voxelize"):
            robocache.voxelize(points, (2, 2, 2), 0.5, (0, 0, 0), features=features, reduce=reduce)
        for exact in ["count", "max"]:  # exact reductions stay allowed
            kw = {"features": features} if exact == "max" else {}
            robocache.voxelize(points, (2, 2, 2), 0.5, (0, 0, 0), reduce=exact, **kw)
    finally:
        torch.use_deterministic_algorithms(False)


@requires_cuda
def test_cuda_graph_capture():
    points = cloud(2, 1000, "cuda")
    features = torch.randn(2, 1000, 3, device="cuda")
    f = lambda: robocache.voxelize(
        points,
        (8, 8, 8),
        0.125,
        (0, 0, 0),
        features=features,  # noqa: E731
        reduce="mean",
    )
    f()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = f()
    points.copy_(cloud(2, 1000, "cuda"))
    features.copy_(torch.randn(2, 1000, 3, device="cuda"))
    graph.replay()
    torch.cuda.synchronize()
    expected = reference.voxelize(points, (8, 8, 8), 0.125, (0, 0, 0), features, reduce="mean")
    assert_close(out, expected)


def _mixed_cloud(B, N, grid, generator):
    """Uniform points over a box a little larger than the grid, a quarter of
    them packed into a few hot voxels in runs (like a depth image in pixel
    order), some non-finite."""
    g = torch.tensor(grid, dtype=torch.float64)
    p = (-0.1 + 1.2 * torch.rand(B, N, 3, dtype=torch.float64, generator=generator)) * g
    hot = torch.randint(0, 4, (B, N // 4, 1), generator=generator).double()
    p[:, : N // 4] = (
        hot * g / 5
        + 0.5
        + 0.01 * torch.rand(B, N // 4, 3, dtype=torch.float64, generator=generator)
    )
    p[:, N // 4 : N // 4 + 7, 1] = float("nan")
    p[:, N // 4 + 7 : N // 4 + 9, 2] = float("inf")
    return p


@requires_cuda
@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("case", ["one cloud", "odd grid", "4k grid", "many small clouds"])
def test_cuda_large_grids_match_float64_reference(reduce, case):
    # Grids of 2^18 cells or more per batch, as in the benchmarks (the tests
    # above use small grids): cells a multiple of 32 (whole bit words), of 4
    # only (vector stores), of neither (scalar stores), many small clouds, hot
    # voxels, non-finite points and lengths.
    cases = ["one cloud", "odd grid", "4k grid", "many small clouds"]
    gen = torch.Generator().manual_seed(10 * REDUCES.index(reduce) + cases.index(case))
    B, N, grid = {
        "one cloud": (2, 20000, (64, 64, 64)),
        "odd grid": (2, 30000, (63, 65, 67)),
        "4k grid": (2, 30000, (61, 62, 66)),
        "many small clouds": (300, 50, (16, 16, 16)),
    }[case]
    points = _mixed_cloud(B, N, grid, gen)
    features = torch.randn(B, N, 5, dtype=torch.float64, generator=gen)
    lengths = torch.randint(0, N + 1, (B,), generator=gen)
    lengths[0] = N
    kw = dict(lengths=lengths.cuda(), reduce=reduce)
    if reduce in FEATURE_REDUCES:
        kw["features"] = features.float().cuda()
    out = robocache.voxelize(points.float().cuda(), grid, 1.0, (0, 0, 0), **kw)
    ref = reference.voxelize(
        points.float().double(),
        grid,
        1.0,
        (0, 0, 0),
        features.float().double() if reduce in FEATURE_REDUCES else None,
        lengths,
        reduce,
    )
    if reduce == "count":
        assert out.dtype == torch.int32 and torch.equal(out.cpu().long(), ref.long())
        assert int(out[0].max()) >= (N // 4) // 4  # the hot voxels were hit
    elif reduce in ("occupancy", "max"):
        assert torch.equal(out.cpu().double(), ref)  # exact
    else:  # float32 sums of up to a few thousand points, in any order
        assert_close(out.cpu().double(), ref, rtol=1e-4, atol=1e-4)


@requires_cuda
@pytest.mark.parametrize("feature_dtype", [torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("reduce", FEATURE_REDUCES)
def test_cuda_large_grid_feature_dtypes(reduce, feature_dtype):
    gen = torch.Generator().manual_seed(7)
    points = _mixed_cloud(1, 40000, (80, 60, 70), gen)
    features = torch.randn(1, 40000, 3, dtype=torch.float64, generator=gen).to(feature_dtype)
    out = robocache.voxelize(
        points.float().cuda(), (80, 60, 70), 1.0, (0, 0, 0), features=features.cuda(), reduce=reduce
    )
    ref = reference.voxelize(
        points.float().double(), (80, 60, 70), 1.0, (0, 0, 0), features.double(), None, reduce
    )
    assert out.dtype == feature_dtype
    assert_close(
        out.cpu().double(),
        ref.to(feature_dtype).double(),
        rtol=tolerance(feature_dtype)[0],
        atol=tolerance(feature_dtype)[1],
    )


@requires_cuda
def test_cuda_large_grid_negative_length_and_no_host_sync():
    gen = torch.Generator().manual_seed(3)
    points = _mixed_cloud(3, 5000, (64, 64, 64), gen).float().cuda()
    features = torch.randn(3, 5000, 2, device="cuda")
    lengths = torch.tensor([5000, -1, 100], device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        outs = {
            r: robocache.voxelize(
                points,
                (64, 64, 64),
                1.0,
                (0, 0, 0),
                lengths=lengths,
                features=features if r in FEATURE_REDUCES else None,
                reduce=r,
            )
            for r in REDUCES
        }
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for r, out in outs.items():
        if r == "count":
            assert (out[1] == -1).all() and (out[0] >= 0).all() and (out[2] >= 0).all()
        else:
            assert torch.isnan(out[1]).all() and not torch.isnan(out[2]).any()
        alone = robocache.voxelize(
            points[2, :100],
            (64, 64, 64),
            1.0,
            (0, 0, 0),
            reduce=r,
            features=features[2, :100] if r in FEATURE_REDUCES else None,
        )
        assert_close(out[2], alone)
