"""robocache.voxelize: point clouds into dense voxel grids."""

import numpy as np
import pytest
import torch
from conftest import requires_cuda, tolerance
from torch.testing import assert_close

import robocache
from robocache import reference

REDUCES = ["occupancy", "count", "sum", "mean", "max"]
FEATURE_REDUCES = ["sum", "mean", "max"]


def numpy_voxelize(
    points, grid, voxel_size, origin, features=None, lengths=None, reduce="occupancy"
):
    """An independent NumPy computation (same float arithmetic in the points' dtype)."""
    p = points.cpu().numpy()
    batched = p.ndim == 3
    if not batched:
        p = p[None]
    B, N, _ = p.shape
    X, Y, Z = grid
    vs = np.broadcast_to(np.asarray(voxel_size, dtype=np.float64), (3,)).astype(p.dtype)
    o = np.asarray(origin, dtype=np.float64).astype(p.dtype)
    f = None
    if features is not None:
        f = features.cpu().double().numpy()
        f = f if batched else f[None]
    counts = np.zeros((B, X, Y, Z), np.int64)
    C = 0 if f is None else f.shape[-1]
    acc = np.zeros((B, C, X, Y, Z)) if reduce != "max" else np.full((B, C, X, Y, Z), -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        idx = np.floor((p - o) / vs)
    for b in range(B):
        n_valid = N if lengths is None else int(lengths[b])
        for n in range(n_valid):
            if not np.isfinite(p[b, n]).all():
                continue
            i, j, k = idx[b, n]
            if not (0 <= i < X and 0 <= j < Y and 0 <= k < Z):
                continue
            i, j, k = int(i), int(j), int(k)
            counts[b, i, j, k] += 1
            if f is not None:
                if reduce == "max":
                    acc[b, :, i, j, k] = np.maximum(acc[b, :, i, j, k], f[b, n])
                else:
                    acc[b, :, i, j, k] += f[b, n]
    if reduce == "occupancy":
        out = (counts > 0).astype(np.float64)
    elif reduce == "count":
        out = counts
    else:
        occupied = (counts > 0)[:, None]
        if reduce == "mean":
            acc = acc / np.maximum(counts, 1)[:, None]
        out = np.where(occupied, acc, 0.0)
    return torch.from_numpy(out if batched else out[0])


def cloud(B, N, device, dtype=torch.float32, lo=-0.2, hi=1.2):
    """Random points in a box a little larger than the grid."""
    return (lo + (hi - lo) * torch.rand(B, N, 3, dtype=torch.float64, device=device)).to(dtype)


def run(points, grid, voxel_size, origin, features=None, lengths=None, reduce="occupancy"):
    out = robocache.voxelize(
        points, grid, voxel_size, origin, features=features, lengths=lengths, reduce=reduce
    )
    ref = reference.voxelize(points, grid, voxel_size, origin, features, lengths, reduce)
    npy = numpy_voxelize(points, grid, voxel_size, origin, features, lengths, reduce)
    return out, ref, npy


def assert_matches(out, ref, npy, dtype=torch.float32, atol=None):
    rtol, default_atol = tolerance(dtype) if dtype.is_floating_point else (0, 0)
    atol = default_atol if atol is None else atol
    assert out.shape == ref.shape == npy.shape
    if not out.dtype.is_floating_point:
        assert torch.equal(out.cpu(), ref.cpu()) and torch.equal(out.cpu().long(), npy)
        return
    assert_close(out.double().cpu(), ref.double().cpu(), rtol=rtol, atol=atol, equal_nan=True)
    assert_close(out.double().cpu(), npy.double(), rtol=rtol, atol=atol, equal_nan=True)


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("point_dtype", [torch.float32, torch.float64])
def test_matches_reference_and_numpy(device, reduce, point_dtype):
    B, N = 3, 2000
    points = cloud(B, N, device, point_dtype)
    features = torch.randn(B, N, 4, device=device) if reduce in FEATURE_REDUCES else None
    out, ref, npy = run(
        points, (10, 7, 12), (0.1, 0.15, 0.09), (0.0, -0.05, 0.02), features, reduce=reduce
    )
    assert_matches(out, ref, npy)
    if reduce == "occupancy":
        assert out.dtype == point_dtype
    if reduce == "count":
        assert out.dtype == torch.int32
        assert int(out.sum()) <= B * N


@pytest.mark.parametrize("reduce", FEATURE_REDUCES)
@pytest.mark.parametrize(
    "feature_dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16]
)
def test_feature_dtypes(device, reduce, feature_dtype):
    B, N = 2, 3000
    points = cloud(B, N, device)
    features = torch.randn(B, N, 6, device=device).to(feature_dtype)
    out, ref, npy = run(points, (6, 6, 6), 1 / 6, (0, 0, 0), features, reduce=reduce)
    assert out.dtype == feature_dtype and out.shape == (B, 6, 6, 6, 6)
    assert_matches(out, ref, npy, feature_dtype)


@pytest.mark.parametrize("B", [1, 64])
def test_batch_sizes_and_single_cloud(device, B):
    points = cloud(B, 300, device)
    features = torch.randn(B, 300, 3, device=device)
    out, ref, npy = run(points, (5, 4, 3), 0.25, (0, 0, 0), features, reduce="mean")
    assert_matches(out, ref, npy)
    single = robocache.voxelize(
        points[0], (5, 4, 3), 0.25, (0, 0, 0), features=features[0], reduce="mean"
    )
    assert single.shape == (3, 5, 4, 3)
    assert_close(single, out[0])
    assert robocache.voxelize(points[0], (5, 4, 3), 0.25, (0, 0, 0)).shape == (5, 4, 3)


def test_boundaries_are_half_open(device):
    # Exactly representable: voxel 0.25, origin 0. A point on a boundary goes
    # to the voxel above it; the upper edge of the grid is outside.
    points = torch.tensor(
        [
            [0.0, 0.0, 0.0],
            [0.25, 0.5, 0.75],
            [1.0, 0.1, 0.1],
            [0.1, 1.0, 0.1],
            [0.1, 0.1, 1.0],
            [0.999, 0.999, 0.999],
            [-1e-7, 0.1, 0.1],
        ],
        device=device,
    )
    count = robocache.voxelize(points, (4, 4, 4), 0.25, (0, 0, 0), reduce="count")
    expected = torch.zeros(4, 4, 4, dtype=torch.int32)
    expected[0, 0, 0] = 1
    expected[1, 2, 3] = 1
    expected[3, 3, 3] = 1
    assert torch.equal(count.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_points_just_below_the_origin_and_far_away_are_dropped(device, dtype):
    # (p - origin) / voxel in (-1, 0) truncates to 0 but floors to -1: dropped.
    # Far finite points would overflow an int64 voxel coordinate: dropped.
    points = torch.tensor(
        [
            [-0.2, 0.1, 0.1],
            [0.1, -0.249, 0.1],
            [0.1, 0.1, -0.01],
            [1e30, 0.1, 0.1],
            [0.1, -1e30, 0.1],
            [0.1, 0.1, 3e38],
            [-0.0, -0.0, -0.0],
            [0.3, 0.3, 0.3],
        ],
        device=device,
        dtype=dtype,
    )
    count = robocache.voxelize(points, (4, 4, 4), 0.25, (0, 0, 0), reduce="count")
    expected = torch.zeros(4, 4, 4, dtype=torch.int32)
    expected[0, 0, 0] = 1
    expected[1, 1, 1] = 1
    assert torch.equal(count.cpu(), expected)
    ref = reference.voxelize(points, (4, 4, 4), 0.25, (0, 0, 0), reduce="count")
    assert torch.equal(ref.cpu(), expected)


def test_negative_coordinates_and_all_out_of_range(device):
    points = cloud(2, 500, device, lo=-3.0, hi=-1.0)
    out, ref, npy = run(points, (8, 8, 8), 0.25, (-3.0, -3.0, -3.0), reduce="count")
    assert_matches(out, ref, npy)
    assert int(out.sum()) == 1000
    outside = robocache.voxelize(points, (8, 8, 8), 0.25, (5.0, 5.0, 5.0), reduce="count")
    assert int(outside.abs().sum()) == 0


@pytest.mark.parametrize("reduce", REDUCES)
def test_empty_clouds_and_zero_lengths(device, reduce):
    features = torch.randn(2, 0, 3, device=device) if reduce in FEATURE_REDUCES else None
    out = robocache.voxelize(
        torch.empty(2, 0, 3, device=device),
        (3, 4, 5),
        0.1,
        (0, 0, 0),
        features=features,
        reduce=reduce,
    )
    assert out.shape[-3:] == (3, 4, 5) and int(out.abs().sum()) == 0
    points = cloud(2, 50, device)
    features = torch.randn(2, 50, 3, device=device) if reduce in FEATURE_REDUCES else None
    lengths = torch.tensor([0, 20], device=device)
    out, ref, npy = run(points, (4, 4, 4), 0.25, (0, 0, 0), features, lengths, reduce)
    assert_matches(out, ref, npy)
    assert int(out[0].abs().sum()) == 0


@pytest.mark.parametrize("reduce", REDUCES)
def test_nan_and_inf_points_are_dropped(device, reduce):
    nan, inf = float("nan"), float("inf")
    points = torch.tensor(
        [
            [nan, 0.1, 0.1],
            [0.1, nan, 0.1],
            [inf, 0.1, 0.1],
            [0.1, -inf, 0.1],
            [0.1, 0.1, nan],
            [0.6, 0.6, 0.6],
        ],
        device=device,
    )
    features = torch.ones(6, 2, device=device) if reduce in FEATURE_REDUCES else None
    out = robocache.voxelize(points, (2, 2, 2), 0.5, (0, 0, 0), features=features, reduce=reduce)
    total = out.double().sum().item()
    assert total == {"occupancy": 1, "count": 1, "sum": 2, "mean": 2, "max": 2}[reduce]
    assert out[..., 0, 0, 0].abs().sum().item() == 0  # nothing landed in voxel 0


def test_hot_voxel(device):
    N = 20000
    points = 0.5 + 0.001 * torch.rand(1, N, 3, device=device)
    features = torch.randn(1, N, 3, device=device)
    for reduce in ["count", "sum", "mean", "max"]:
        kw = {"features": features} if reduce != "count" else {}
        out = robocache.voxelize(points, (4, 4, 4), 0.25, (0, 0, 0), reduce=reduce, **kw)
        if reduce == "count":
            assert int(out[0, 2, 2, 2]) == N and int(out.sum()) == N
        elif reduce == "sum":
            assert_close(out[0, :, 2, 2, 2], features[0].sum(0), rtol=1e-4, atol=1e-3)
        elif reduce == "mean":
            assert_close(out[0, :, 2, 2, 2], features[0].mean(0), rtol=1e-4, atol=1e-5)
        else:
            assert torch.equal(out[0, :, 2, 2, 2], features[0].amax(0))


def test_non_contiguous_inputs(device):
    points = cloud(3, 400, device).transpose(0, 1).contiguous().transpose(0, 1)
    features = torch.randn(3, 5, 400, device=device).transpose(1, 2)
    assert not points.is_contiguous() and not features.is_contiguous()
    out, ref, npy = run(points, (5, 5, 5), 0.2, (0, 0, 0), features, reduce="max")
    assert_matches(out, ref, npy)


def test_padding_past_lengths_is_ignored(device):
    points = cloud(2, 100, device)
    features = torch.randn(2, 100, 2, device=device)
    lengths = torch.tensor([100, 37], device=device)
    out = robocache.voxelize(
        points, (4, 4, 4), 0.25, (0, 0, 0), features=features, lengths=lengths, reduce="sum"
    )
    points2, features2 = points.clone(), features.clone()
    points2[1, 37:] = 0.5
    features2[1, 37:] = 1e6
    out2 = robocache.voxelize(
        points2, (4, 4, 4), 0.25, (0, 0, 0), features=features2, lengths=lengths, reduce="sum"
    )
    assert_close(out, out2)


# ---------------------------------------------------------------------------
# Autograd
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grid", [(1, 1, 1), (3, 5, 7), (3, 4, 5), (2, 4, 4), (4, 4, 6), (7, 9, 11)]
)
@pytest.mark.parametrize("reduce", REDUCES)
def test_grid_sizes(device, reduce, grid):
    # Cells per cloud that are odd, a multiple of 4 but not of 32, one or a
    # few 32-voxel words (CUDA occupancy keeps one bit per voxel, per cloud,
    # and writes whole words when the cells are a multiple of 32), or span
    # several 32-voxel words.
    points = cloud(3, 3000, device)
    features = torch.randn(3, 3000, 2, device=device) if reduce in FEATURE_REDUCES else None
    lengths = torch.tensor([3000, 17, 0], device=device)
    voxel = tuple(1.0 / g for g in grid)
    out, ref, npy = run(points, grid, voxel, (0, 0, 0), features, lengths, reduce)
    # A (1, 1, 1) grid sums up to 3000 N(0, 1) features in float32, in an
    # order of the backend's choosing, with partial sums of tens: errors of
    # 2.5e-5 were seen against float64 on a total of 1.4.
    assert_matches(out, ref, npy, atol=1e-4 if reduce == "sum" else None)
    if reduce == "occupancy":
        assert out[0].sum() > 0 and out[2].sum() == 0


@pytest.mark.parametrize("C", [1, 3, 4, 5, 8])
@pytest.mark.parametrize("reduce", FEATURE_REDUCES)
def test_channel_counts(device, reduce, C):
    # On CUDA, float sum/mean slots are padded to a multiple of 4 channels and
    # mean keeps its counts in a padding lane when there is one (C % 4 != 0).
    points = 0.2 + 0.3 * cloud(2, 5000, device)  # many points per voxel
    features = torch.randn(2, 5000, C, device=device)
    out, ref, npy = run(points, (4, 5, 6), 0.05, (0.2, 0.2, 0.2), features, reduce=reduce)
    assert out.shape == (2, C, 4, 5, 6)
    assert_matches(out, ref, npy)


@pytest.mark.parametrize("reduce", FEATURE_REDUCES)
def test_gradcheck(device, reduce):
    points = cloud(2, 40, device, torch.float64)
    features = torch.randn(2, 40, 3, dtype=torch.float64, device=device, requires_grad=True)
    lengths = torch.tensor([40, 25], device=device)
    fn = lambda f: robocache.voxelize(
        points,
        (3, 3, 3),
        1 / 3,
        (0, 0, 0),
        features=f,  # noqa: E731
        lengths=lengths,
        reduce=reduce,
    )
    assert torch.autograd.gradcheck(fn, (features,), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_gradient_matches_reference(device, reduce):
    points = cloud(2, 300, device)
    features = torch.randn(2, 300, 4, device=device, requires_grad=True)
    out = robocache.voxelize(points, (5, 5, 5), 0.2, (0, 0, 0), features=features, reduce=reduce)
    grad = torch.randn_like(out)
    got = torch.autograd.grad(out, features, grad)[0]
    ref = reference.voxelize(points, (5, 5, 5), 0.2, (0, 0, 0), features, reduce=reduce)
    expected = torch.autograd.grad(ref, features, grad)[0]
    assert_close(got, expected)


def test_max_tie_gives_gradient_to_lowest_index(device):
    points = torch.tensor(
        [[0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [0.3, 0.3, 0.3], [0.9, 0.9, 0.9]], device=device
    )
    features = torch.tensor([[1.0], [5.0], [5.0], [2.0]], device=device, requires_grad=True)
    out = robocache.voxelize(points, (2, 2, 2), 0.5, (0, 0, 0), features=features, reduce="max")
    out.sum().backward()
    assert features.grad.flatten().tolist() == [0.0, 1.0, 0.0, 1.0]


def test_no_gradient_to_points(device):
    points = cloud(1, 20, device).requires_grad_()
    features = torch.randn(1, 20, 2, device=device, requires_grad=True)
    robocache.voxelize(
        points, (2, 2, 2), 0.5, (0, 0, 0), features=features, reduce="sum"
    ).sum().backward()
    assert points.grad is None and features.grad is not None


@pytest.mark.parametrize("reduce", REDUCES)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_opcheck(device, reduce, requires_grad):
    points = cloud(2, 60, device)
    features = None
    if reduce in FEATURE_REDUCES:
        features = torch.randn(2, 60, 3, device=device, requires_grad=requires_grad)
    lengths = torch.tensor([60, 31], device=device)
    op = torch.ops.robocache.voxelize.default
    torch.library.opcheck(
        op, (points, features, lengths, [4, 3, 5], [0.25], [0.0, 0.0, 0.0], reduce)
    )
    torch.library.opcheck(
        op,
        (
            points[0],
            features[0] if features is not None else None,
            None,
            [4, 3, 5],
            [0.25, 0.3, 0.2],
            [0.0, -0.1, 0.0],
            reduce,
        ),
    )


def test_opcheck_backward_op(device):
    points = cloud(2, 60, device)
    features = torch.randn(2, 60, 3, device=device)
    for reduce in FEATURE_REDUCES:
        result = robocache.voxelize(
            points, (4, 3, 5), 0.25, (0, 0, 0), features=features, reduce=reduce
        )
        torch.library.opcheck(
            torch.ops.robocache._voxelize_backward.default,
            (
                torch.randn_like(result),
                points,
                features,
                None,
                [4, 3, 5],
                [0.25],
                [0.0, 0.0, 0.0],
                reduce,
                result,
            ),
        )


@pytest.mark.parametrize("dynamic", [False, True])
def test_torch_compile_fullgraph(device, dynamic):
    torch._dynamo.reset()
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def f(points, features):
        grid = robocache.voxelize(
            points, (6, 6, 6), 1 / 6, (0, 0, 0), features=features, reduce="mean"
        )
        return grid.sum(dim=1)

    compiled = torch.compile(f, backend=counter, fullgraph=True, dynamic=dynamic)
    for B, N in [(2, 100), (3, 170), (4, 230)]:
        points, features = cloud(B, N, device), torch.randn(B, N, 4, device=device)
        assert_close(compiled(points, features), f(points, features))
    if dynamic:
        assert counter.frame_count == 1, "changing B and N recompiled under dynamic=True"


def test_torch_compile_backward(device):
    torch._dynamo.reset()

    def loss(points, features):
        return (
            robocache.voxelize(points, (4, 4, 4), 0.25, (0, 0, 0), features=features, reduce="max")
            ** 2
        ).sum()

    points = cloud(2, 100, device)
    features = torch.randn(2, 100, 3, device=device, requires_grad=True)
    got = torch.autograd.grad(torch.compile(loss, fullgraph=True)(points, features), features)[0]
    expected = torch.autograd.grad(loss(points, features), features)[0]
    assert_close(got, expected)


# ---------------------------------------------------------------------------
# The seed API
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", [None, "auto", "pytorch"])
def test_voxelize_point_cloud(device, backend):
    points = torch.rand(1000, 3, device=device)
    for origin in (torch.zeros(3, device=device), [0.0, 0.0, 0.0], (0, 0, 0)):
        grid = robocache.voxelize_point_cloud(points, (32, 32, 32), 1 / 32, origin, backend=backend)
        assert grid.shape == (32, 32, 32) and grid.dtype == torch.float32
        expected = numpy_voxelize(points, (32, 32, 32), 1 / 32, (0, 0, 0))
        assert torch.equal(grid.cpu().double(), expected)


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
