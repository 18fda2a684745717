"""Thin, documented Python wrappers over the ``torch.ops.robocache`` operators.

Also registers each operator's autograd formula. Every backward calls another
registered operator, so backward graphs trace under torch.compile.
"""
import torch

from . import reference

_BACKENDS = (None, "auto", "robocache", "cuda", "pytorch")


def is_cuda_available():
    """Whether robocache was built with its CUDA kernels (and they are registered)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("robocache::resample", "CUDA")


# ---------------------------------------------------------------------------
# resample
# ---------------------------------------------------------------------------

def _check_resample_data(values, times, lengths):
    """Value checks that need to read tensor data (a host sync on the GPU)."""
    B, S = values.shape[0], values.shape[1]
    if lengths is not None:
        bad = ((lengths < 1) | (lengths > S)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(f"robocache.resample: lengths[{b}] = {int(lengths[b])} is outside "
                             f"[1, S] with S = {S}")
    if S < 2:
        return
    t = times.expand(B, S)
    decreasing = t[:, 1:] < t[:, :-1]
    if lengths is not None:
        decreasing &= torch.arange(1, S, device=t.device) < lengths.view(B, 1)
    bad = decreasing.nonzero()
    if bad.numel():
        b, j = int(bad[0, 0]), int(bad[0, 1]) + 1
        row = f"times[{j}]" if times.dim() == 1 else f"times[{b}, {j}]"
        raise ValueError(f"robocache.resample: times must be non-decreasing within the valid "
                         f"samples; {row} = {t[b, j].item()} < the sample before it "
                         f"({t[b, j - 1].item()})")


def resample(values, times, query_times, lengths=None, mode="linear", *, check=False):
    """Resample batched trajectories onto new timestamps.

    Args:
        values: (B, S, D) samples; float32, float64, float16 or bfloat16.
        times: (B, S) sample times, or (S,) shared by the batch; float32,
            float64 or int64 (e.g. nanosecond stamps). Must be non-decreasing
            within each row's valid samples; this is not checked unless
            ``check=True``.
        query_times: (B, T) or (T,) times to sample at; same dtype as ``times``.
        lengths: optional (B,) int64, the number of valid leading samples per
            row (default S). Samples past it are ignored.
        mode: ``"linear"`` (interpolate), ``"nearest"`` (closest sample; a tie
            goes to the later one) or ``"previous"`` (zero-order hold: the last
            sample at or before the query).
        check: validate ``lengths`` and the order of ``times`` and raise on a
            violation. This reads tensor data, so on a GPU it synchronizes the
            host; it is meant for debugging, not for compiled graphs.

    Returns:
        (B, T, D) tensor in the dtype of ``values``.

    Queries outside the valid range take the first/last valid sample; a query
    exactly at a sample time returns that sample exactly; repeated times are
    right-continuous; a NaN query gives NaN. Weights are computed in the
    precision of the times (float64 for float64 and int64 times).

    Without ``check=True`` the CUDA kernel never reads ``lengths`` on the host:
    a row with length < 1 comes out as NaN and a length above S is treated as
    S. The CPU kernel raises for lengths outside [1, S].

    Gradients flow to ``values`` and ``query_times`` (for ``linear``, the
    slope: the right-hand slope at a knot, zero outside the range; zero for
    ``nearest`` and ``previous``). ``times`` and ``lengths`` get no gradient.
    """
    if check:
        _check_resample_data(values, times, lengths)
    return torch.ops.robocache.resample(values, times, query_times, lengths, mode)


def _resample_setup_context(ctx, inputs, output):
    values, times, query_times, lengths, mode = inputs
    ctx.mode = mode
    ctx.save_for_backward(values, times, query_times, lengths)


def _resample_backward(ctx, grad):
    values, times, query_times, lengths = ctx.saved_tensors
    need_values, need_query = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    grad_values, grad_query = torch.ops.robocache._resample_backward(
        grad, values, times, query_times, lengths, ctx.mode, need_values, need_query)
    return (grad_values if need_values else None, None,
            grad_query if need_query else None, None, None)


torch.library.register_autograd(
    "robocache::resample", _resample_backward, setup_context=_resample_setup_context)


# ---------------------------------------------------------------------------
# fuse
# ---------------------------------------------------------------------------

def _unpack_streams(streams, modes):
    """(names or None, values, times, lengths, modes) from fuse's arguments."""
    if isinstance(streams, dict):
        names = list(streams)
        entries = [streams[n] for n in names]
    else:
        names = None
        entries = list(streams)
    if not entries:
        raise ValueError("robocache.fuse: streams is empty; give at least one (values, times) pair")
    values, times, lengths = [], [], []
    for k, entry in enumerate(entries):
        label = repr(names[k]) if names else str(k)
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
            raise ValueError(f"robocache.fuse: stream {label} must be a (values, times) or "
                             f"(values, times, lengths) tuple; got {type(entry).__name__}")
        values.append(entry[0])
        times.append(entry[1])
        lengths.append(entry[2] if len(entry) == 3 else None)
    if isinstance(modes, str):
        modes = [modes] * len(entries)
    elif isinstance(modes, dict):
        if names is None:
            raise ValueError("robocache.fuse: modes may be a dict only when streams is one")
        unknown = set(modes) - set(names)
        if unknown:
            raise ValueError(f"robocache.fuse: modes names unknown streams {sorted(unknown)}")
        modes = [modes.get(n, "linear") for n in names]
    else:
        modes = list(modes)
    return names, values, times, lengths, modes


def fuse_columns(streams):
    """Which output columns of :func:`fuse` belong to which stream.

    Returns a dict of name -> slice when ``streams`` is a mapping, otherwise a
    list of slices in stream order. Only the shapes of the values are read.
    """
    names, values, _, _, _ = _unpack_streams(streams, "linear")
    slices, start = [], 0
    for v in values:
        slices.append(slice(start, start + v.shape[-1]))
        start += v.shape[-1]
    return dict(zip(names, slices)) if names is not None else slices


def fuse(streams, query_times, *, modes="linear", check=False):
    """Align several sensor streams onto one timeline and concatenate them, in one kernel.

    The operator underneath is ``torch.ops.robocache.fuse(values, times,
    query_times, lengths=None, modes="linear")`` with ``lengths`` a (K, B)
    tensor (a row per stream) and ``modes`` one mode or K comma-separated.

    Args:
        streams: a sequence of ``(values, times)`` or ``(values, times, lengths)``
            tuples, or a mapping of name -> such a tuple (dicts keep their order).
            Stream k has values (B, S_k, D_k) and times (B, S_k) or (S_k,); S_k
            and D_k may differ between streams. All values share one dtype and
            all times (and ``query_times``) another, as for :func:`resample`.
        query_times: (B, T) or (T,) timeline to align onto.
        modes: ``"linear"``, ``"nearest"`` or ``"previous"`` for every stream,
            or one per stream (a sequence, or a mapping by stream name; streams
            a mapping leaves out are linear).
        check: validate every stream's lengths and time order (a host sync on
            the GPU), as in :func:`resample`.

    Returns:
        (B, T, sum D_k): the streams' channels in the order given. Each stream
        follows exactly the semantics of :func:`resample`; use
        :func:`fuse_columns` to find a stream's columns.

    On CUDA one launch writes every stream into the output (up to 32 streams
    per launch). Gradients flow to every stream's values and to ``query_times``.
    """
    names, values, times, lengths, modes = _unpack_streams(streams, modes)
    if check:
        for v, t, n in zip(values, times, lengths):
            _check_resample_data(v, t, n)
    return torch.ops.robocache.fuse(values, times, query_times,
                                    _stack_lengths(names, values, lengths), ",".join(modes))


def _stack_lengths(names, values, lengths):
    """Per-stream lengths (or None) -> the operator's (K, B) int64 tensor, or None.

    A stream without lengths gets S_k (all its samples valid)."""
    if all(n is None for n in lengths):
        return None
    B = values[0].shape[0]
    rows = []
    for k, (v, n) in enumerate(zip(values, lengths)):
        label = repr(names[k]) if names else str(k)
        if n is None:
            rows.append(torch.full((B,), v.shape[1], dtype=torch.long, device=v.device))
            continue
        if not isinstance(n, torch.Tensor):  # e.g. an FX proxy: the operator checks it
            rows.append(n)
            continue
        if n.dtype != torch.long:
            raise TypeError(f"robocache.fuse: stream {label}: lengths must be an int64 tensor; "
                            f"got {n.dtype}")
        if n.dim() != 1 or n.shape[0] != B:
            raise ValueError(f"robocache.fuse: stream {label}: lengths must be (B,) = ({B},); "
                             f"got shape {list(n.shape)}")
        rows.append(n)
    return torch.stack(rows)


def _fuse_setup_context(ctx, inputs, output):
    values, times, query_times, lengths, modes = inputs
    ctx.num_streams = len(values)
    ctx.modes = modes
    ctx.save_for_backward(*values, *times, query_times, lengths)


def _fuse_backward(ctx, grad):
    K = ctx.num_streams
    saved = ctx.saved_tensors
    values, times = list(saved[:K]), list(saved[K:2 * K])
    query_times, lengths = saved[2 * K], saved[2 * K + 1]
    need_values = list(ctx.needs_input_grad[0])
    need_query = bool(ctx.needs_input_grad[2])
    grad_values, grad_query = torch.ops.robocache._fuse_backward(
        grad, values, times, query_times, lengths, ctx.modes, need_values, need_query)
    # Gradients mirror the inputs' structure: a list for each list of tensors.
    # Trailing arguments left at their defaults (lengths, modes) may not have
    # reached autograd at all: return one entry per input it saw.
    grads = ([g if n else None for g, n in zip(grad_values, need_values)], [None] * K,
             grad_query if need_query else None, None, None)
    return grads[:len(ctx.needs_input_grad)]


torch.library.register_autograd(
    "robocache::fuse", _fuse_backward, setup_context=_fuse_setup_context)


# ---------------------------------------------------------------------------
# voxelize
# ---------------------------------------------------------------------------

_REDUCES = ("occupancy", "count", "sum", "mean", "max")


def _as_floats(x, name, n):
    """A float, sequence or tensor -> list of n floats (a 1-value input is repeated)."""
    if torch.is_tensor(x):
        x = x.detach().cpu().flatten().tolist()  # read on the host: a GPU tensor syncs once
    elif isinstance(x, (int, float)):
        x = [x]
    x = [float(v) for v in x]
    if n == 3 and len(x) == 1 and name == "voxel_size":
        return x
    if len(x) != n:
        raise ValueError(f"robocache.voxelize: {name} must have {n} values; got {len(x)}")
    return x


def voxelize(points, grid_size, voxel_size, origin, *, features=None, lengths=None,
             reduce="occupancy", check=False):
    """Batched point clouds into dense voxel grids.

    Args:
        points: (B, N, 3) or (N, 3) float32/float64 xyz.
        grid_size: (X, Y, Z) voxels per axis.
        voxel_size: one edge length, or three (x, y, z).
        origin: the grid's min corner (3 values; a sequence or a tensor, read
            on the host).
        features: (B, N, C) or (N, C) per-point features for
            ``sum``/``mean``/``max`` (float32, float64, float16, bfloat16).
        lengths: optional (B,) int64 valid points per cloud; padding past it
            is ignored.
        reduce: ``"occupancy"``, ``"count"``, ``"sum"``, ``"mean"`` or ``"max"``.
        check: validate ``lengths`` (in [0, N]) on any device and raise; on a
            GPU this synchronizes the host.

    A point lands in voxel ``floor((p - origin) / voxel_size)`` per axis and is
    kept only when ``0 <= index < grid_size`` on every axis (half-open, as in
    mmcv and spconv); NaN and infinite points are dropped.

    Returns (indexing is x first: ``grid[b, c, ix, iy, iz]``):
        occupancy: (B, X, Y, Z) 0/1 in the points' dtype; count: (B, X, Y, Z)
        int32; sum, mean, max: (B, C, X, Y, Z) in the features' dtype, empty
        voxels 0. A single (N, 3) cloud drops the B dimension.

    Gradients flow to ``features`` for sum, mean and max (max: to the
    lowest-index point at the maximum); nothing flows to ``points``.
    """
    if reduce not in _REDUCES:
        raise ValueError(f"robocache.voxelize: reduce must be one of {_REDUCES}; got {reduce!r}")
    grid = [g if isinstance(g, torch.SymInt) else int(g) for g in grid_size]
    if check and lengths is not None:
        N = points.shape[-2]
        bad = ((lengths < 0) | (lengths > N)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(f"robocache.voxelize: lengths[{b}] = {int(lengths[b])} is outside "
                             f"[0, N] with N = {N}")
    return torch.ops.robocache.voxelize(
        points, features, lengths, grid, _as_floats(voxel_size, "voxel_size", 3),
        _as_floats(origin, "origin", 3), reduce)


def _voxelize_setup_context(ctx, inputs, output):
    points, features, lengths, grid_size, voxel_size, origin, reduce = inputs
    ctx.args = (grid_size, voxel_size, origin, reduce)
    ctx.save_for_backward(points, features, lengths, output if reduce == "max" else None)


def _voxelize_backward(ctx, grad):
    points, features, lengths, result = ctx.saved_tensors
    grid_size, voxel_size, origin, reduce = ctx.args
    grad_features = None
    if ctx.needs_input_grad[1]:
        if result is None:
            result = grad  # only max reads it; this keeps the schema's shape check simple
        grad_features = torch.ops.robocache._voxelize_backward(
            grad, points, features, lengths, grid_size, voxel_size, origin, reduce, result)
    return None, grad_features, None, None, None, None, None


torch.library.register_autograd(
    "robocache::voxelize", _voxelize_backward, setup_context=_voxelize_setup_context)


# ---------------------------------------------------------------------------
# The earlier Python API, kept working as written.
# ---------------------------------------------------------------------------

def _use_reference(backend, *tensors):
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}; got {backend!r}")
    if backend == "cuda":
        if not is_cuda_available():
            raise RuntimeError("backend='cuda': robocache was built without its CUDA kernels")
        for t in tensors:
            if torch.is_tensor(t) and not t.is_cuda:
                raise ValueError("backend='cuda' needs CUDA tensors; got one on " + str(t.device))
    return backend == "pytorch"


def resample_trajectories(src, src_t, tgt_t, backend=None):
    """Linear resampling, as in robocache's first API (argument names kept).

    ``src`` is (B, S, D), ``src_t`` (B, S) or (S,), ``tgt_t`` (B, T) or (T,).
    ``backend="pytorch"`` runs the pure-PyTorch reference; None, "auto" or
    "robocache" run the operator; "cuda" runs the operator and insists on CUDA.
    """
    if _use_reference(backend, src, src_t, tgt_t):
        return reference.resample(src, src_t, tgt_t)
    return resample(src, src_t, tgt_t)


def fuse_multimodal(vision, vision_t, proprio, proprio_t, force, force_t, target_t, backend=None):
    """Three streams (vision, proprioception, force) linearly onto ``target_t``,
    as in robocache's first API: returns (B, T, D_vision + D_proprio + D_force).

    ``backend="pytorch"`` runs the pure-PyTorch reference; None, "auto" or
    "robocache" run the operator; "cuda" runs the operator and insists on CUDA.
    """
    streams = [(vision, vision_t), (proprio, proprio_t), (force, force_t)]
    if _use_reference(backend, vision, vision_t, proprio, proprio_t, force, force_t, target_t):
        return reference.fuse(streams, target_t)
    return fuse(streams, target_t)


def voxelize_point_cloud(points, grid_size, voxel_size, origin, backend=None):
    """A float occupancy grid of shape ``grid_size`` (or (B, *grid_size) for a
    batch), as in robocache's first API. ``voxel_size`` is a float (or three);
    ``origin`` a tensor or a sequence.

    ``backend="pytorch"`` runs the pure-PyTorch reference; None, "auto" or
    "robocache" run the operator; "cuda" runs the operator and insists on CUDA.
    """
    if _use_reference(backend, points):
        return reference.voxelize(points, grid_size, voxel_size, origin)
    return voxelize(points, grid_size, voxel_size, origin)
