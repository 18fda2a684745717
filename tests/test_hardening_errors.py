"""What a hostile user tries, continued: errors that name the argument, one symbolic check per op, and moving grids (voxel_size and origin as tensors)."""

import numpy as np
import pytest
import torch
from conftest import requires_cuda
from resample_cases import F64
from torch.testing import assert_close

import robocache
from robocache import reference

# ---------------------------------------------------------------------------
# 8. Errors that name the argument
# ---------------------------------------------------------------------------


def _valid():
    return torch.randn(2, 5, 3), torch.arange(5.0), torch.rand(4) * 4


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(mode=None), ValueError, r"robocache.resample: mode must be"),
        (dict(mode="li near"), ValueError, r"mode must be"),
        (
            dict(lengths=[5, 2]),
            TypeError,
            r"lengths must be a torch.Tensor or None; got list \(pass a tensor",
        ),
        (
            dict(values=np.zeros((2, 5, 3))),
            TypeError,
            r"values must be a torch.Tensor; got ndarray \(pass a tensor",
        ),
        (dict(times=list(range(5))), TypeError, r"times must be a torch.Tensor; got list"),
    ],
)
def test_resample_argument_errors(kwargs, exc, match):
    values, times, query = _valid()
    args = dict(values=values, times=times, query_times=query)
    args.update(kwargs)
    with pytest.raises(exc, match=match) as info:
        robocache.resample(**args)
    assert len(str(info.value)) < 300  # one line, not the whole array


def test_check_true_runs_shape_checks_before_data_checks():
    values, times, query = _valid()
    with pytest.raises(ValueError, match=r"times must have S = values.shape\[1\] samples"):
        robocache.resample(values, torch.arange(6.0), query, check=True)


def test_check_true_flags_nan_and_infinite_times():
    values, times, query = _valid()
    for bad in (float("nan"), float("inf")):
        t = times.clone()
        t[2] = bad
        with pytest.raises(ValueError, match=r"times must be finite; times\[2\]"):
            robocache.resample(values, t, query, check=True)


def test_check_true_flags_float32_times_too_coarse_for_their_rate():
    values = torch.randn(1, 1000, 2)
    epoch = (1.7e9 + torch.arange(1000, dtype=F64) / 100).float()  # 100 Hz, unix seconds
    with pytest.raises(ValueError, match="float32 times cannot resolve their own sampling period"):
        robocache.resample(values, epoch, epoch[:10], check=True)
    fine = (torch.arange(1000, dtype=F64) / 100).float()
    robocache.resample(values, fine, fine[:10], check=True)  # relative seconds are fine


def test_fuse_argument_errors():
    a = (torch.randn(2, 5, 3), torch.arange(5.0))
    q = torch.rand(4)
    with pytest.raises(
        TypeError, match=r"stream 1: lengths must be a torch.Tensor or None; got list"
    ):
        robocache.fuse([a, (a[0], a[1], [5, 2])], q)
    with pytest.raises(ValueError, match=r"modes must have one mode per stream \(3\); got 1"):
        robocache.fuse([a, a, a], q, modes=["nearest"])
    with pytest.raises(ValueError, match=r"mode"):
        robocache.fuse([a, a], q, modes="li near")
    with pytest.raises(ValueError, match=r"modes must be one mode or one per stream \(2\); got 3"):
        robocache.fuse([a, a], q, modes="previous,linear,linear")
    out = robocache.fuse([a, a], q, modes="previous,linear")  # comma-separated works from Python
    assert_close(out, reference.fuse([a, a], q, modes=["previous", "linear"]))
    with pytest.raises(
        ValueError, match=r"modes\[0\] must be 'linear', 'nearest' or 'previous'; got 'li near'"
    ):
        torch.ops.robocache.fuse([a[0]], [a[1]], q, None, "li near")
    bad = a[1].clone()
    bad[3] = 0.0
    with pytest.raises(
        ValueError, match=r"robocache.fuse: stream 'b': times must be non-decreasing"
    ):
        robocache.fuse({"a": a, "b": (a[0], bad)}, q, check=True)


@pytest.mark.parametrize(
    "kwargs,exc,match",
    [
        (dict(voxel_size=np.float32(0.5)), None, None),
        (dict(voxel_size=torch.tensor(0.5)), None, None),
        (dict(origin=np.zeros(3)), None, None),
        (dict(grid_size=(2.7, 2, 2)), TypeError, r"grid_size must be three integers"),
        (dict(grid_size=(True, 2, 2)), TypeError, r"grid_size must be three integers"),
        (
            dict(voxel_size=1e-50),
            ValueError,
            r"voxel_size 1e-50 is not positive and finite in the points' dtype",
        ),
        (dict(voxel_size=1e39), ValueError, r"not positive and finite in the points' dtype"),
        (
            dict(points=np.zeros((4, 3), dtype=np.float32)),
            TypeError,
            r"points must be a torch.Tensor",
        ),
        (dict(lengths=[4]), TypeError, r"lengths must be a torch.Tensor or None; got list"),
    ],
)
def test_voxelize_argument_errors(kwargs, exc, match):
    args = dict(points=torch.rand(4, 3), grid_size=(2, 2, 2), voxel_size=0.5, origin=(0, 0, 0))
    args.update(kwargs)
    call = lambda: robocache.voxelize(
        args.pop("points"),
        args.pop("grid_size"),  # noqa: E731
        args.pop("voxel_size"),
        args.pop("origin"),
        **args,
    )
    if exc is None:
        assert call().shape == (2, 2, 2)
    else:
        with pytest.raises(exc, match=match):
            call()


class _PretendCuda(torch.Tensor):
    """A CPU tensor that says it is on CUDA, to reach the wrapper's check on a
    machine without a GPU."""

    @property
    def is_cuda(self):
        return True


def test_the_kernel_check_compiles_without_a_graph_break():
    # The wrappers ask is_cuda_available() for every CUDA tensor; under
    # torch.compile(fullgraph=True) that must be a constant, not a dispatcher call.
    compiled = torch.compile(robocache.is_cuda_available, fullgraph=True, backend="eager")
    assert compiled() == robocache.is_cuda_available()


def test_cuda_tensor_on_a_build_without_cuda_kernels(monkeypatch):
    monkeypatch.setattr(robocache._ops, "is_cuda_available", lambda: False)
    values, times, query = _valid()
    values = torch.Tensor._make_subclass(_PretendCuda, values)
    with pytest.raises(RuntimeError, match="built without its CUDA kernels.*FORCE_CUDA=1"):
        robocache.resample(values, times, query)


# ---------------------------------------------------------------------------
# One symbolic check per op, shared by CPU, CUDA and Meta
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("device_name", ["cpu", "meta"])
def test_voxelize_backward_checks_the_grad_shape_on_every_backend(device_name):
    points = torch.rand(2, 10, 3, device=device_name)
    features = torch.randn(2, 10, 4, device=device_name)
    grad = torch.randn(2, 4, 3, 3, 2, device=device_name)  # the result is (2, 4, 3, 3, 3)
    with pytest.raises(ValueError, match=r"grad must have the result's shape \[2, 4, 3, 3, 3\]"):
        torch.ops.robocache._voxelize_backward(
            grad, points, features, None, [3, 3, 3], [0.4], [0.0, 0.0, 0.0], "sum", grad
        )


# ---------------------------------------------------------------------------
# 9. Moving grids: voxel_size and origin as tensors, graph inputs
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("reduce", ["occupancy", "count", "sum", "mean", "max"])
@pytest.mark.parametrize("per_cloud", [False, True])
def test_tensor_origin_and_voxel_size_match_reference(device, reduce, per_cloud):
    B, N = 3, 500
    points = torch.rand(B, N, 3, device=device) * 2 - 1
    features = torch.randn(B, N, 2, device=device) if reduce in ("sum", "mean", "max") else None
    if per_cloud:
        origin = torch.rand(B, 3, device=device) * 0.5 - 1
        voxel_size = torch.rand(B, 3, device=device) * 0.1 + 0.15
    else:
        origin = torch.tensor([-1.0, -0.8, -1.0], device=device)
        voxel_size = torch.tensor([0.2], device=device)
    out = robocache.voxelize(
        points, (8, 9, 10), voxel_size, origin, features=features, reduce=reduce
    )
    expected = reference.voxelize(
        points, (8, 9, 10), voxel_size, origin, features=features, reduce=reduce
    )
    assert_close(out, expected, rtol=1e-5, atol=1e-5)
    if not per_cloud:  # the same grid given as numbers
        same = robocache.voxelize(
            points, (8, 9, 10), 0.2, (-1.0, -0.8, -1.0), features=features, reduce=reduce
        )
        assert_close(out, same)


def test_moving_origin_never_recompiles(device):
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")

    def occupancy(points, origin):
        return robocache.voxelize(points, (6, 6, 6), 0.25, origin)

    compiled = torch.compile(occupancy, backend=counter, fullgraph=True)
    points = torch.rand(2, 300, 3, device=device) * 2 - 1
    for step in range(10):
        origin = torch.tensor([-1.0, -1.0, -1.0], device=device) + step * 0.05
        assert_close(compiled(points, origin), reference.voxelize(points, (6, 6, 6), 0.25, origin))
    assert counter.frame_count == 1


def test_vmap_over_origins_and_gradients_with_per_cloud_grids(device):
    points = torch.rand(2, 100, 3, dtype=F64, device=device)
    origins = torch.rand(4, 3, dtype=F64, device=device) * -0.3
    got = torch.func.vmap(lambda o: robocache.voxelize(points, (4, 4, 4), 0.3, o))(origins)
    expected = torch.stack([reference.voxelize(points, (4, 4, 4), 0.3, o) for o in origins])
    assert_close(got, expected)
    features = torch.randn(2, 100, 2, dtype=F64, device=device, requires_grad=True)
    per_cloud = torch.tensor([[0.0, 0.0, 0.0], [-0.2, 0.1, 0.0]], dtype=F64, device=device)

    def squared_mean(f):
        return robocache.voxelize(points, (4, 4, 4), 0.3, per_cloud, features=f, reduce="mean") ** 2

    assert torch.autograd.gradcheck(squared_mean, (features,))
    assert torch.autograd.gradgradcheck(squared_mean, (features,))


@requires_cuda
def test_moving_grids_make_no_host_sync():
    points = torch.rand(4, 1000, 3, device="cuda") * 2 - 1
    features = torch.randn(4, 1000, 2, device="cuda")
    origin = torch.full((4, 3), -1.0, device="cuda")
    voxel_size = torch.full((3,), 0.25, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        out = robocache.voxelize(
            points, (8, 8, 8), voxel_size, origin, features=features, reduce="mean"
        )
    finally:
        torch.cuda.set_sync_debug_mode("default")
    expected = reference.voxelize(
        points, (8, 8, 8), voxel_size, origin, features=features, reduce="mean"
    )
    assert_close(out, expected, rtol=1e-5, atol=1e-5)


def test_grid_tensor_errors():
    points = torch.rand(2, 10, 3)
    with pytest.raises(
        ValueError, match=r"origin must be \(3,\) or \(B, 3\) = \(2, 3\); got shape \[4\]"
    ):
        robocache.voxelize(points, (2, 2, 2), 0.5, torch.zeros(4))
    with pytest.raises(ValueError, match=r"voxel_size has 3 rows but there are 2 clouds"):
        robocache.voxelize(points, (2, 2, 2), torch.ones(3, 3), (0, 0, 0))
    with pytest.raises(ValueError, match=r"origin must be on the points' device \(meta\)"):
        torch.ops.robocache.voxelize(
            points.to("meta"),
            None,
            None,
            [2, 2, 2],
            [1.0],
            [0.0, 0.0, 0.0],
            "occupancy",
            None,
            torch.zeros(3),
        )
    with pytest.raises(TypeError, match=r"voxel_size must be a float32 or float64 tensor"):
        robocache.voxelize(points, (2, 2, 2), torch.ones(3, dtype=torch.int64), (0, 0, 0))
    with pytest.raises(ValueError, match=r"voxel_size must be positive and finite"):
        robocache.voxelize(points, (2, 2, 2), torch.tensor([0.5, 0.0, 0.5]), (0, 0, 0), check=True)


def test_export_takes_the_origin_as_an_input(device):
    class Occupancy(torch.nn.Module):
        def forward(self, points, origin):
            return robocache.voxelize(points, (4, 4, 4), 0.3, origin, reduce="count")

    example = (torch.rand(2, 50, 3, device=device), torch.zeros(3, device=device))
    program = torch.export.export(Occupancy(), example)
    points = torch.rand(2, 50, 3, device=device)
    origin = torch.tensor([-0.1, 0.0, 0.1], device=device)
    expected = reference.voxelize(points, (4, 4, 4), 0.3, origin, reduce="count")
    assert torch.equal(program.module()(points, origin), expected)


@pytest.mark.parametrize("bad", [0.0, -0.2, float("nan"), float("inf")])
def test_unchecked_bad_grid_tensor_values_follow_the_reference(device, bad):
    points = torch.rand(2, 200, 3, device=device) * 2 - 1
    voxel_size = torch.tensor([bad, 0.5, 0.5], device=device)
    origin = torch.full((2, 3), -1.0, device=device)
    got = robocache.voxelize(points, (4, 4, 4), voxel_size, origin, reduce="count")
    expected = reference.voxelize(points, (4, 4, 4), voxel_size, origin, reduce="count")
    assert torch.equal(got, expected)
    with pytest.raises(ValueError, match="voxel_size must be positive and finite"):
        robocache.voxelize(points, (4, 4, 4), voxel_size, origin, reduce="count", check=True)
