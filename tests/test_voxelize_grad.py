"""robocache.voxelize's gradients (sum, mean, max; double backward) and its autograd contracts."""

import pytest
import torch
from torch.testing import assert_close
from voxelize_cases import FEATURE_REDUCES, REDUCES, assert_matches, cloud, run

import robocache
from robocache import reference

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
