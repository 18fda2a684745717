"""vmap rules for the ``torch.ops.robocache`` operators.

Every operator already takes a batch: a vmapped call folds the vmapped
dimension V into the batch B (rows V*B), runs the operator once, and unfolds
the result. Tensors shared by the batch ((S,) times, (T,) queries) stay
shared where the result allows it.
"""

import torch

_OPS = torch.ops.robocache


def _logical_dim(x, bdim):
    return x.dim() - (0 if bdim is None else 1)


def _rows(x, bdim, V, B, batched, expand_shared=False):
    """x as V*B rows: ``batched`` says whether x's logical shape starts with
    B; a shared x stays shared unless it is vmapped or ``expand_shared``."""
    if x is None:
        return None
    if batched:
        if bdim is None:
            return x.unsqueeze(0).expand(V, *x.shape).reshape(V * B, *x.shape[1:])
        x = x.movedim(bdim, 0)
        return x.reshape(V * B, *x.shape[2:])
    if bdim is None and not expand_shared:
        return x
    base = x.movedim(bdim, 0) if bdim is not None else x.unsqueeze(0).expand(V, *x.shape)
    return base.unsqueeze(1).expand(V, B, *base.shape[1:]).reshape(V * B, *base.shape[1:])


def _batch_size(x, bdim):
    return x.shape[0] if bdim is None else x.movedim(bdim, 0).shape[1]


def _stream(values, v_dim, times, t_dim, V, B, expand_shared=False):
    return (
        _rows(values, v_dim, V, B, True),
        _rows(times, t_dim, V, B, _logical_dim(times, t_dim) == 2, expand_shared),
    )


def _query(query, q_dim, V, B, expand_shared=False):
    return _rows(query, q_dim, V, B, _logical_dim(query, q_dim) == 2, expand_shared)


def _unfold(x, V):
    return x.reshape(V, x.shape[0] // V, *x.shape[1:])


def _query_grad(gq, V, query, q_dim):
    """The backward's (V*B, T) query gradient, summed over B for a shared query."""
    gq = _unfold(gq, V)
    return gq.sum(1) if _logical_dim(query, q_dim) == 1 else gq


@torch.library.register_vmap("robocache::resample")
def _resample_vmap(info, in_dims, values, times, query_times, lengths=None, mode="linear"):
    V = info.batch_size
    in_dims = tuple(in_dims) + (None,) * 9  # arguments left at their defaults have none
    v_dim, t_dim, q_dim, l_dim = in_dims[:4]
    B = _batch_size(values, v_dim)
    values, times = _stream(values, v_dim, times, t_dim, V, B)
    out = _OPS.resample(
        values, times, _query(query_times, q_dim, V, B), _rows(lengths, l_dim, V, B, True), mode
    )
    return _unfold(out, V), 0


@torch.library.register_vmap("robocache::_resample_backward")
def _resample_backward_vmap(
    info, in_dims, grad_out, values, times, query_times, lengths, mode, values_grad, query_grad
):
    V = info.batch_size
    in_dims = tuple(in_dims) + (None,) * 9  # arguments left at their defaults have none
    g_dim, v_dim, t_dim, q_dim, l_dim = in_dims[:5]
    B = _batch_size(values, v_dim)
    values_rows, times_rows = _stream(values, v_dim, times, t_dim, V, B)
    gv, gq = _OPS._resample_backward(
        _rows(grad_out, g_dim, V, B, True),
        values_rows,
        times_rows,
        _query(query_times, q_dim, V, B, expand_shared=True),
        _rows(lengths, l_dim, V, B, True),
        mode,
        values_grad,
        query_grad,
    )
    gv = _unfold(gv, V) if values_grad else gv
    gq = _query_grad(gq, V, query_times, q_dim) if query_grad else gq
    return (gv, gq), (0 if values_grad else None, 0 if query_grad else None)


def _fuse_rows(values, times, query_times, lengths, in_dims, V, expand_shared=False):
    v_dims, t_dims, q_dim, l_dim = in_dims
    v_dims = v_dims if isinstance(v_dims, (list, tuple)) else [v_dims] * len(values)
    t_dims = t_dims if isinstance(t_dims, (list, tuple)) else [t_dims] * len(times)
    B = _batch_size(values[0], v_dims[0])
    streams = [_stream(v, vd, t, td, V, B) for v, vd, t, td in zip(values, v_dims, times, t_dims)]
    if lengths is not None:  # (K, B) -> (K, V*B)
        per_stream = lengths if l_dim is None else lengths.movedim(l_dim, 1)  # (K, [V,] B)
        lengths = torch.stack(
            [_rows(row, None if l_dim is None else 0, V, B, True) for row in per_stream]
        )
    return (
        [s[0] for s in streams],
        [s[1] for s in streams],
        _query(query_times, q_dim, V, B, expand_shared),
        lengths,
    )


@torch.library.register_vmap("robocache::fuse")
def _fuse_vmap(info, in_dims, values, times, query_times, lengths=None, modes="linear"):
    V = info.batch_size
    in_dims = tuple(in_dims) + (None,) * 9  # arguments left at their defaults have none
    values, times, query, lengths = _fuse_rows(values, times, query_times, lengths, in_dims[:4], V)
    return _unfold(_OPS.fuse(values, times, query, lengths, modes), V), 0


@torch.library.register_vmap("robocache::_fuse_backward")
def _fuse_backward_vmap(
    info, in_dims, grad_out, values, times, query_times, lengths, modes, values_grad, query_grad
):
    V = info.batch_size
    in_dims = tuple(in_dims) + (None,) * 9  # arguments left at their defaults have none
    g_dim = in_dims[0]
    values_rows, times_rows, query, lengths = _fuse_rows(
        values, times, query_times, lengths, tuple(in_dims[1:5]), V, expand_shared=True
    )
    B = values_rows[0].shape[0] // V
    gvs, gq = _OPS._fuse_backward(
        _rows(grad_out, g_dim, V, B, True),
        values_rows,
        times_rows,
        query,
        lengths,
        modes,
        values_grad,
        query_grad,
    )
    gvs = [_unfold(g, V) if need else g for g, need in zip(gvs, values_grad)]
    q_dim = in_dims[3]
    gq = _query_grad(gq, V, query_times, q_dim) if query_grad else gq
    return (gvs, gq), ([0 if need else None for need in values_grad], 0 if query_grad else None)


def _voxel_rows(points, p_dim, features, f_dim, lengths, l_dim, V):
    """(points, features, lengths) as one batch of clouds, and B (None when
    each vmapped slice is a single (N, 3) cloud)."""
    if _logical_dim(points, p_dim) == 3:
        B = _batch_size(points, p_dim)
        return (
            _rows(points, p_dim, V, B, True),
            _rows(features, f_dim, V, B, True),
            _rows(lengths, l_dim, V, B, True),
            B,
        )
    clouds = (
        _rows(points.unsqueeze(0) if p_dim is None else points, p_dim, V, 1, True)
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


def _grid_tensor_rows(t, dim, V, B):
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
    in_dims = tuple(in_dims) + (None,) * 9  # arguments left at their defaults have none
    p_dim, f_dim, l_dim = in_dims[:3]
    points, features, lengths, B = _voxel_rows(points, p_dim, features, f_dim, lengths, l_dim, V)
    out = _OPS.voxelize(
        points,
        features,
        lengths,
        grid_size,
        voxel_size,
        origin,
        reduce,
        _grid_tensor_rows(voxel_size_tensor, in_dims[7], V, B or 1),
        _grid_tensor_rows(origin_tensor, in_dims[8], V, B or 1),
    )
    return (out if B is None else _unfold(out, V)), 0


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
    in_dims = tuple(in_dims) + (None,) * 11  # arguments left at their defaults have none
    g_dim, p_dim, f_dim, l_dim = in_dims[:4]
    r_dim = in_dims[8]
    batched = _logical_dim(points, p_dim) == 3
    points_rows, features_rows, lengths_rows, B = _voxel_rows(
        points, p_dim, features, f_dim, lengths, l_dim, V
    )

    def grid_rows(x, dim):
        if batched:
            return _rows(x, dim, V, B, True)
        return x.movedim(dim, 0) if dim is not None else x.unsqueeze(0).expand(V, *x.shape)

    out = _OPS._voxelize_backward(
        grid_rows(grad, g_dim),
        points_rows,
        features_rows,
        lengths_rows,
        grid_size,
        voxel_size,
        origin,
        reduce,
        grid_rows(result, r_dim),
        _grid_tensor_rows(voxel_size_tensor, in_dims[9], V, B or 1),
        _grid_tensor_rows(origin_tensor, in_dims[10], V, B or 1),
    )
    return (_unfold(out, V) if batched else out), 0
