"""robocache.voxelize: point clouds into dense voxel grids."""

import pytest
import torch
from torch.testing import assert_close
from voxelize_cases import FEATURE_REDUCES, REDUCES, assert_matches, cloud, numpy_voxelize, run

import robocache
from robocache import reference


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
