"""``robocache.voxelize``: batched point clouds into dense voxel grids.

The wrapper over ``torch.ops.robocache.voxelize``, its autograd (to the
features, for sum, mean and max; double backward for sum and mean) and its
vmap rules.
"""

import numbers
import operator

import torch

from .._ops import (
    OPS,
    SingleLevelFunction,
    batch_size,
    below_autograd,
    check_tensor,
    fold_rows,
    logical_dim,
    on_meta,
    padded_in_dims,
    register_autograd,
    require_kernels,
    unfold_rows,
)

_OP = "robocache.voxelize"
_REDUCES = ("occupancy", "count", "sum", "mean", "max")


def _floats(x, name, sizes):
    """A number, sequence, numpy value or tensor -> list of floats, with one of
    the allowed counts ``sizes``. Tensors are read on the host."""
    if torch.is_tensor(x):
        x = x.detach().cpu().reshape(-1).tolist()  # a GPU tensor syncs once
    elif type(x).__module__ == "numpy":
        x = x.reshape(-1).tolist() if hasattr(x, "reshape") else [x.item()]
    elif isinstance(x, numbers.Real):
        x = [x]
    elif not isinstance(x, (list, tuple)):
        raise TypeError(
            f"{_OP}: {name} must be a number, a sequence or a tensor; got {type(x).__name__}"
        )
    out = []
    for v in x:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{_OP}: {name} entries must be real numbers; got {v!r}")
        out.append(float(v))
    if len(out) not in sizes:
        raise ValueError(
            f"{_OP}: {name} must have {' or '.join(map(str, sizes))} values; got {len(out)}: {out}"
        )
    return out


def _grid_size(grid_size):
    if torch.is_tensor(grid_size) or type(grid_size).__module__ == "numpy":
        grid_size = grid_size.tolist()
    if not isinstance(grid_size, (list, tuple, torch.Size)):
        raise TypeError(f"{_OP}: grid_size must be three integers (X, Y, Z); got {grid_size!r}")
    if len(grid_size) != 3:
        raise ValueError(f"{_OP}: grid_size must have 3 entries (X, Y, Z); got {len(grid_size)}")
    grid = []
    for g in grid_size:
        if isinstance(g, torch.SymInt):
            grid.append(g)
            continue
        if isinstance(g, bool) or not isinstance(g, numbers.Integral):
            raise TypeError(
                f"{_OP}: grid_size must be three integers; got {grid_size!r} "
                f"(entry {g!r} is a {type(g).__name__})"
            )
        if g < 1:
            raise ValueError(f"{_OP}: grid_size must be positive; got {list(grid_size)}")
        grid.append(operator.index(g))
    return grid


def voxelize(
    points,
    grid_size,
    voxel_size,
    origin,
    *,
    features=None,
    lengths=None,
    reduce="occupancy",
    check=False,
):
    """Batched point clouds into dense voxel grids.

    Args:
        points: (B, N, 3) or (N, 3) float32/float64 xyz.
        grid_size: (X, Y, Z) voxels per axis, positive integers.
        voxel_size: one edge length, or three (x, y, z), as numbers; or a
            tensor on the points' device: (1,), (3,) or (B, 3), one row per
            cloud. Must be positive and finite in the points' dtype (numbers
            are checked; device tensors only with ``check=True``).
        origin: the grid's min corner: 3 numbers, or a tensor on the points'
            device, (3,) or (B, 3). Tensors on the points' device are read by
            the kernels, never on the host: under torch.compile they are
            graph inputs, so a robot-centred grid that moves every step never
            recompiles. A host tensor for device points is read on the host.
        features: (B, N, C) or (N, C) per-point features for
            ``sum``/``mean``/``max`` (float32, float64, float16, bfloat16).
        lengths: optional (B,) int64 tensor, valid points per cloud; padding
            past it is ignored.
        reduce: ``"occupancy"``, ``"count"``, ``"sum"``, ``"mean"`` or ``"max"``.
        check: validate ``lengths`` (in [0, N]) and the values of
            voxel_size/origin tensors on any device and raise; on a GPU this
            synchronizes the host.

    A point lands in voxel ``floor((p - origin) / voxel_size)`` per axis and is
    kept only when ``0 <= index < grid_size`` on every axis (half-open, as in
    mmcv and spconv); NaN and infinite points are dropped.

    Returns (indexing is x first: ``grid[b, c, ix, iy, iz]``):
        occupancy: (B, X, Y, Z) 0/1 in the points' dtype; count: (B, X, Y, Z)
        int32; sum, mean, max: (B, C, X, Y, Z) in the features' dtype, empty
        voxels 0. A single (N, 3) cloud drops the B dimension.

    Gradients flow to ``features`` for sum, mean and max (max: to the
    lowest-index point at the maximum); nothing flows to ``points`` (the
    result is piecewise constant in them). Double backward: sum and mean.
    """
    if not isinstance(reduce, str) or reduce not in _REDUCES:
        raise ValueError(f"{_OP}: reduce must be one of {_REDUCES}; got {reduce!r}")
    check_tensor(points, "points", _OP)
    check_tensor(features, "features", _OP, optional=True)
    check_tensor(lengths, "lengths", _OP, optional=True)
    require_kernels(_OP, points, features, lengths)
    grid = _grid_size(grid_size)
    voxel_size, voxel_size_tensor = _grid_values(voxel_size, "voxel_size", (1, 3), points)
    origin, origin_tensor = _grid_values(origin, "origin", (3,), points)
    if check:
        OPS.voxelize(
            *on_meta((points, features, lengths)),
            grid,
            voxel_size,
            origin,
            reduce,
            *on_meta((voxel_size_tensor, origin_tensor)),
        )
        _check_grid_tensors(voxel_size_tensor, origin_tensor)
    if check and lengths is not None:
        N = points.shape[-2]
        bad = ((lengths < 0) | (lengths > N)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(
                f"{_OP}: lengths[{b}] = {int(lengths[b])} is outside [0, N] with N = {N}"
            )
    return OPS.voxelize(
        points,
        features,
        lengths,
        grid,
        voxel_size,
        origin,
        reduce,
        voxel_size_tensor,
        origin_tensor,
    )


def _grid_values(x, name, sizes, points):
    """(floats, None) for a number, sequence, numpy value or host tensor read
    on the host; (placeholder floats, tensor) for a tensor on the points'
    device, which the kernels read: a graph input, never a host sync."""
    if (
        torch.is_tensor(x)
        and (x.device == points.device or x.dim() == 2)
        and x.device.type != "meta"
    ):
        t = x.reshape(1) if x.dim() == 0 else x
        return ([1.0] if name == "voxel_size" else [0.0, 0.0, 0.0]), t
    if torch.is_tensor(x) and points.device.type == "meta":
        return ([1.0] if name == "voxel_size" else [0.0, 0.0, 0.0]), x.to("meta")
    return _floats(x, name, sizes), None


def _check_grid_tensors(voxel_size, origin):
    """check=True: the values of voxel_size and origin tensors (a host sync)."""
    if voxel_size is not None and not bool(((voxel_size > 0) & voxel_size.isfinite()).all()):
        raise ValueError(
            f"{_OP}: voxel_size must be positive and finite; got {voxel_size.tolist()}"
        )
    if origin is not None and not bool(origin.isfinite().all()):
        raise ValueError(f"{_OP}: origin must be finite; got {origin.tolist()}")


# ---------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------


class _Voxelize(SingleLevelFunction):
    # Arguments: points, features, lengths, then the grid (grid_size,
    # voxel_size, origin, reduce), then voxel_size_tensor and origin_tensor.
    @staticmethod
    def forward(*args):
        return below_autograd(OPS.voxelize, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        points, features, lengths, *grid, voxel_t, origin_t = inputs
        ctx.grid = tuple(grid)
        result = output if ctx.grid[3] == "max" else None
        ctx.save_for_backward(points, features, lengths, result, voxel_t, origin_t)
        ctx.save_for_forward(points, features, lengths, voxel_t, origin_t)

    @staticmethod
    def backward(ctx, grad):
        points, features, lengths, result, voxel_t, origin_t = ctx.saved_tensors
        grad_features = None
        if ctx.needs_input_grad[1]:
            if result is None:
                result = grad  # only max reads it; this keeps the schema's shape check simple
            grad_features = OPS._voxelize_backward(
                grad, points, features, lengths, *ctx.grid, result, voxel_t, origin_t
            )
        # points, voxel sizes and origins: the result is piecewise constant in
        # them, so their gradient is zero wherever it exists.
        return None, grad_features, None, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, points_t, features_t, *rest):
        points, features, lengths, voxel_t, origin_t = ctx.saved_tensors
        if features_t is None:
            features_t = torch.zeros_like(features) if features is not None else None
        if features_t is None:  # occupancy, count: no float result to carry a tangent
            return None
        if ctx.grid[3] == "max":
            raise RuntimeError(
                "robocache.voxelize: forward-mode AD (torch.func.jvp, jacfwd) is "
                "not supported for reduce='max'; use reverse mode (jacrev)"
            )
        return OPS.voxelize(points, features_t, lengths, *ctx.grid, voxel_t, origin_t)


class _VoxelizeBackward(SingleLevelFunction):
    # Arguments: grad, points, features, lengths, the grid (4), result,
    # voxel_size_tensor and origin_tensor.
    @staticmethod
    def forward(*args):
        return below_autograd(OPS._voxelize_backward, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        _, points, _, lengths, *grid, _, voxel_t, origin_t = inputs
        ctx.grid = tuple(grid)
        ctx.save_for_backward(points, lengths, voxel_t, origin_t)

    @staticmethod
    def backward(ctx, up):
        points, lengths, voxel_t, origin_t = ctx.saved_tensors
        if ctx.grid[3] == "max":
            raise RuntimeError(
                "robocache.voxelize: double backward is not supported for reduce='max' (the "
                "gradient's routing to each voxel's winning point is not differentiable); "
                "use reduce='sum' or 'mean', or do not differentiate the gradient"
            )
        # sum and mean: grad_features = grad gathered at each point's voxel
        # (divided by its count for mean), linear in grad and independent of
        # the features and results. Its adjoint scatters back: voxelize itself.
        d_grad = None
        if ctx.needs_input_grad[0]:
            d_grad = OPS.voxelize(points, up, lengths, *ctx.grid, voxel_t, origin_t)
        return (d_grad,) + (None,) * 10


register_autograd("voxelize", _Voxelize)
register_autograd("_voxelize_backward", _VoxelizeBackward)


# ---------------------------------------------------------------------------
# vmap
# ---------------------------------------------------------------------------


def _fold_clouds(points, p_dim, features, f_dim, lengths, l_dim, V):
    """(points, features, lengths) as one batch of clouds, and B (None when
    each vmapped slice is a single (N, 3) cloud)."""
    if logical_dim(points, p_dim) == 3:
        B = batch_size(points, p_dim)
        return (
            fold_rows(points, p_dim, V, B, True),
            fold_rows(features, f_dim, V, B, True),
            fold_rows(lengths, l_dim, V, B, True),
            B,
        )
    clouds = (
        fold_rows(points.unsqueeze(0) if p_dim is None else points, p_dim, V, 1, True)
        if p_dim is not None
        else points.unsqueeze(0).expand(V, *points.shape)
    )
    feats = None
    if features is not None:
        feats = (
            features.movedim(f_dim, 0)
            if f_dim is not None
            else features.unsqueeze(0).expand(V, *features.shape)
        )
    lens = None
    if lengths is not None:  # logical (1,)
        lens = (
            lengths.movedim(l_dim, 0)
            if l_dim is not None
            else lengths.unsqueeze(0).expand(V, *lengths.shape)
        ).reshape(V)
    return clouds, feats, lens, None


def _fold_grid_tensor(t, dim, V, B):
    """A voxel_size or origin tensor for the folded clouds: kept as it is when
    it is shared and not vmapped, else one (V * B, 3) row per cloud (B is 1
    when each vmapped slice is a single cloud)."""
    if t is None or (dim is None and t.dim() == 1):
        return t
    if dim is not None:
        t = t.movedim(dim, 0)  # (V, 3), (V, 1) or (V, B, 3)
    else:
        t = t.unsqueeze(0).expand(V, *t.shape)  # (V, B, 3)
    if t.dim() == 2:  # shared by the clouds of each slice
        t = t.expand(V, 3).unsqueeze(1).expand(V, B, 3)
    return t.reshape(V * B, 3)


@torch.library.register_vmap("robocache::voxelize")
def _voxelize_vmap(
    info,
    in_dims,
    points,
    features,
    lengths,
    grid_size,
    voxel_size,
    origin,
    reduce="occupancy",
    voxel_size_tensor=None,
    origin_tensor=None,
):
    V = info.batch_size
    in_dims = padded_in_dims(in_dims)
    p_dim, f_dim, l_dim = in_dims[:3]
    points, features, lengths, B = _fold_clouds(points, p_dim, features, f_dim, lengths, l_dim, V)
    out = OPS.voxelize(
        points,
        features,
        lengths,
        grid_size,
        voxel_size,
        origin,
        reduce,
        _fold_grid_tensor(voxel_size_tensor, in_dims[7], V, B or 1),
        _fold_grid_tensor(origin_tensor, in_dims[8], V, B or 1),
    )
    return (out if B is None else unfold_rows(out, V)), 0


@torch.library.register_vmap("robocache::_voxelize_backward")
def _voxelize_backward_vmap(
    info,
    in_dims,
    grad,
    points,
    features,
    lengths,
    grid_size,
    voxel_size,
    origin,
    reduce,
    result,
    voxel_size_tensor=None,
    origin_tensor=None,
):
    V = info.batch_size
    in_dims = padded_in_dims(in_dims)
    g_dim, p_dim, f_dim, l_dim = in_dims[:4]
    r_dim = in_dims[8]
    batched = logical_dim(points, p_dim) == 3
    points_rows, features_rows, lengths_rows, B = _fold_clouds(
        points, p_dim, features, f_dim, lengths, l_dim, V
    )

    def fold_grid(x, dim):
        if batched:
            return fold_rows(x, dim, V, B, True)
        return x.movedim(dim, 0) if dim is not None else x.unsqueeze(0).expand(V, *x.shape)

    out = OPS._voxelize_backward(
        fold_grid(grad, g_dim),
        points_rows,
        features_rows,
        lengths_rows,
        grid_size,
        voxel_size,
        origin,
        reduce,
        fold_grid(result, r_dim),
        _fold_grid_tensor(voxel_size_tensor, in_dims[9], V, B or 1),
        _fold_grid_tensor(origin_tensor, in_dims[10], V, B or 1),
    )
    return (unfold_rows(out, V) if batched else out), 0
