"""What a hostile user tries: higher-order and
torch.func derivatives, non-finite data, overflow, and argument errors."""

import numpy as np
import pytest
import torch
from conftest import tolerance
from helpers import query_times, sorted_times
from resample_cases import F64, resample_inputs
from torch.testing import assert_close

import robocache
from robocache import reference

# ---------------------------------------------------------------------------
# 1. Double backward
# ---------------------------------------------------------------------------


def test_double_backward_of_the_issue_example():
    t = torch.arange(4.0).double()
    v = torch.tensor([[[0.0], [1.0], [4.0], [9.0]]], dtype=F64, requires_grad=True)
    q = torch.tensor([[0.5, 1.5, 2.5]], dtype=F64, requires_grad=True)
    (gq,) = torch.autograd.grad(robocache.resample(v, t, q).sum(), q, create_graph=True)
    (gq**2).sum().backward()
    assert_close(v.grad, torch.tensor([[[-2.0], [-4.0], [-4.0], [10.0]]], dtype=F64))


@pytest.mark.parametrize("mode", ["linear", "nearest", "previous"])
@pytest.mark.parametrize("shared_query", [False, True])
@pytest.mark.parametrize("with_lengths", [False, True])
def test_resample_gradgradcheck(device, mode, shared_query, with_lengths):
    values, times, query = resample_inputs(device, shared_query=shared_query)
    lengths = torch.tensor([7, 4], device=device) if with_lengths else None
    values.requires_grad_()
    query.requires_grad_()
    times.requires_grad_()
    fn = lambda v, t, q: robocache.resample(v, t, q, lengths, mode)  # noqa: E731
    assert torch.autograd.gradcheck(
        fn, (values, times, query), check_forward_ad=True, check_batched_grad=True
    )
    assert torch.autograd.gradgradcheck(fn, (values, times, query), check_fwd_over_rev=True)


def test_fuse_gradgradcheck(device):
    a = (
        torch.randn(2, 6, 2, device=device, dtype=F64, requires_grad=True),
        sorted_times(2, 6, F64, device).requires_grad_(),
    )
    b = (
        torch.randn(2, 9, 3, device=device, dtype=F64, requires_grad=True),
        sorted_times(1, 9, F64, device, shared=True).requires_grad_(),
        torch.tensor([9, 5], device=device),
    )
    query = query_times(2, 4, F64, device, lo=0.5, hi=9.5).requires_grad_()
    fn = lambda va, ta, vb, tb, q: robocache.fuse(  # noqa: E731
        [(va, ta), (vb, tb, b[2])], q, modes=["linear", "previous"]
    )
    args = (a[0], a[1], b[0], b[1], query)
    assert torch.autograd.gradcheck(fn, args, check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, args, check_fwd_over_rev=True)


@pytest.mark.parametrize("reduce", ["sum", "mean"])
def test_voxelize_gradgradcheck(device, reduce):
    points = torch.rand(2, 40, 3, device=device, dtype=F64)
    features = torch.randn(2, 40, 3, device=device, dtype=F64, requires_grad=True)
    fn = lambda f: (
        robocache.voxelize(
            points,
            (3, 3, 3),
            1 / 3,
            (0, 0, 0),
            features=f,  # noqa: E731
            reduce=reduce,
        )
        ** 2
    )
    assert torch.autograd.gradcheck(fn, (features,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(fn, (features,))


def test_voxelize_max_double_backward_raises(device):
    points = torch.rand(30, 3, device=device)
    features = torch.randn(30, 2, device=device, requires_grad=True)
    out = robocache.voxelize(points, (2, 2, 2), 0.5, (0, 0, 0), features=features, reduce="max")
    (g,) = torch.autograd.grad((out**2).sum(), features, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward is not supported for reduce='max'"):
        g.sum().backward()


# ---------------------------------------------------------------------------
# 2. torch.func
# ---------------------------------------------------------------------------


def _leaves_close(a, b):
    for x, y in zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)):
        assert_close(x, y, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("transform", ["grad", "jacrev", "jacfwd", "vmap"])
def test_torch_func_resample(device, transform):
    values, times, query = resample_inputs(device)

    def run(fn):
        f = lambda v, t, q: fn(v, t, q)  # noqa: E731
        if transform == "grad":
            return torch.func.grad(lambda v, t, q: (f(v, t, q) ** 2).sum(), argnums=(0, 1, 2))(
                values, times, query
            )
        if transform == "jacrev":
            return torch.func.jacrev(f, argnums=(0, 1, 2))(values, times, query)
        if transform == "jacfwd":
            return torch.func.jacfwd(f, argnums=(0, 1, 2))(values, times, query)
        many = values + torch.arange(4, device=device, dtype=F64).view(4, 1, 1, 1)
        return torch.func.vmap(f, in_dims=(0, None, None))(many, times, query)

    _leaves_close(run(robocache.resample), run(reference.resample))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd", "vmap"])
def test_torch_func_fuse_and_voxelize(device, transform):
    values, times, query = resample_inputs(device)
    other = torch.randn(2, 4, 2, device=device, dtype=F64)
    other_t = sorted_times(2, 4, F64, device)
    points = torch.rand(2, 30, 3, device=device, dtype=F64)
    features = torch.randn(2, 30, 2, device=device, dtype=F64)

    def fused(fn):
        return lambda v, q: fn([(v, times), (other, other_t)], q)

    def voxels(fn):
        return lambda f: fn(points, (2, 2, 2), 0.5, (0, 0, 0), features=f, reduce="mean")

    ref_voxelize = lambda p, g, s, o, features, reduce: reference.voxelize(  # noqa: E731
        p, g, s, o, features=features, reduce=reduce
    )
    if transform == "vmap":
        many = values + torch.arange(3, device=device, dtype=F64).view(3, 1, 1, 1)
        run_fuse = lambda fn: torch.func.vmap(fused(fn), in_dims=(0, None))(many, query)  # noqa: E731
        run_vox = lambda fn: torch.func.vmap(voxels(fn))(torch.stack([features, -features]))  # noqa: E731
    else:
        jac = getattr(torch.func, transform)
        run_fuse = lambda fn: jac(fused(fn), argnums=(0, 1))(values, query)  # noqa: E731
        run_vox = lambda fn: jac(voxels(fn))(features)  # noqa: E731
    _leaves_close(run_fuse(robocache.fuse), run_fuse(reference.fuse))
    _leaves_close(run_vox(robocache.voxelize), run_vox(ref_voxelize))


def test_nested_torch_func_raises_instead_of_a_zero_derivative(device):
    values, times, query = resample_inputs(device)
    with pytest.raises(NotImplementedError, match="nested torch.func differentiation"):
        torch.func.hessian(lambda q: (robocache.resample(values, times, q) ** 2).sum())(query)


# ---------------------------------------------------------------------------
# 3, 7. Sizes that overflow
# ---------------------------------------------------------------------------


def test_grid_size_that_overflows_raises():
    with pytest.raises(ValueError, match="too many elements"):
        robocache.voxelize(
            torch.tensor([[0.6, 0.1, 0.1]]), (3, 6148914691236517206, 1), 0.5, (0, 0, 0)
        )
    with pytest.raises(ValueError, match="too many elements"):
        torch.ops.robocache.voxelize(
            torch.rand(2, 4, 3, device="meta"),
            None,
            None,
            [2**40, 2**20, 2**4],
            [1.0],
            [0.0, 0.0, 0.0],
            "occupancy",
        )


@pytest.mark.parametrize("reduce", ["count", "max"])
def test_more_points_than_int32_counters_raise(reduce):
    n = 2**31 + 5
    points = torch.full((1, 3), 0.5).expand(n, 3)  # no memory: one point, repeated
    features = torch.ones(1, 1).expand(n, 1) if reduce == "max" else None
    with pytest.raises(ValueError, match=r"at most 2\^31 - 1 points per cloud"):
        robocache.voxelize(points, (1, 1, 1), 1.0, (0, 0, 0), features=features, reduce=reduce)


# ---------------------------------------------------------------------------
# 4, 5, 6. Non-finite values, numpy.interp and the blend
# ---------------------------------------------------------------------------

NUMPY_CASES = [  # (values, query) on times [0, 1]; numpy's TestInterp non-finite cases
    ([0, -np.inf], 0.5),
    ([0, np.inf], 0.5),
    ([-np.inf, 10], 0.5),
    ([np.inf, 10], 0.5),
    ([-np.inf, -np.inf], 0.5),
    ([np.inf, np.inf], 0.5),
    ([-np.inf, np.inf], 0.5),
    ([np.inf, -np.inf], 0.5),
    ([np.nan, 10], 0.5),
    ([0, np.nan], 0.5),
    ([1, np.inf], 0.0),
    ([np.inf, 4], 1.0),
    ([1, 2], 0.25),
]


@pytest.mark.parametrize("values,q", NUMPY_CASES)
@pytest.mark.parametrize("dtype", [torch.float32, F64])
def test_non_finite_values_match_numpy_interp(device, values, q, dtype):
    expected = np.interp(q, [0.0, 1.0], values)
    v = torch.tensor(values, dtype=dtype, device=device).view(1, 2, 1)
    t = torch.tensor([0.0, 1.0], dtype=F64, device=device)
    qt = torch.tensor([q], dtype=F64, device=device)
    for fn in (robocache.resample, reference.resample):
        got = fn(v, t, qt).item()
        assert (np.isnan(expected) and np.isnan(got)) or got == expected, (fn, got, expected)


@pytest.mark.parametrize("channels", [5, 16])  # 16: vector loads mixing finite and not
def test_reference_equals_operator_on_non_finite_data(device, channels):
    special = torch.tensor([np.nan, np.inf, -np.inf, 0.0, 1.0, -2.5, 3e38], dtype=F64)
    for dtype in (torch.float32, F64, torch.bfloat16):
        values = special[torch.randint(0, 7, (4, 9, channels))].to(dtype).to(device)
        times = sorted_times(4, 9, F64, device)
        query = query_times(4, 40, F64, device)
        query[:, :9] = times  # on the knots too
        for mode in ("linear", "nearest", "previous"):
            got = robocache.resample(values, times, query, mode=mode)
            expected = reference.resample(values, times, query, mode=mode)
            # Non-finite outputs must match exactly; finite ones within the
            # dtype's rounding (CUDA and the reference may round a blend
            # apart; a blend of 1 and -2.5 near 0 needs an absolute margin).
            assert torch.equal(got.isnan(), expected.isnan())
            assert torch.equal(got.isinf(), expected.isinf())
            # A blend's rounding error scales with its two knots, not with
            # its result (3e38 blended towards 0 cancels): the margin is the
            # dtype's epsilon times the knots' magnitude.
            loc = reference.locate(times, query, None, 9, 4, mode)
            size = values.double().abs().nan_to_num(0.0, posinf=0.0)
            knots = [size.gather(1, i.unsqueeze(-1).expand(-1, -1, channels)) for i in loc[:2]]
            rtol = tolerance(dtype)[0]
            margin = rtol * (4 + knots[0] + knots[1])
            finite = expected.isfinite()
            error = (got.double() - expected.double()).abs()
            assert (error[finite] <= margin[finite]).all(), error[finite].max()


def test_issue_example_non_finite_reference():
    v = torch.tensor([1.0, np.nan, np.inf]).view(1, 3, 1)
    t, q = torch.tensor([0.0, 1.0, 2.0]), torch.tensor([0.0, 2.0, 5.0])
    for fn in (robocache.resample, reference.resample):
        assert fn(v, t, q).flatten().tolist() == [1.0, np.inf, np.inf]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_blend_does_not_overflow_a_representable_result(device, dtype):
    v = torch.tensor([-3e38, 3e38], device=device).to(dtype).view(1, 2, 1)
    t = torch.tensor([0.0, 1.0], device=device)
    q = torch.tensor([0.5, 0.25], device=device)
    for fn in (robocache.resample, reference.resample):
        out = fn(v, t, q).double().flatten()
        assert torch.isfinite(out).all()
        assert_close(
            out,
            torch.tensor([0.0, -1.5e38], dtype=F64, device=device),
            rtol=1e-2,
            atol=float(v.double().abs().max()) * 1e-2,
        )
