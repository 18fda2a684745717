"""Thin, documented Python wrappers over the ``torch.ops.robocache`` operators.

The wrappers turn Python conveniences (dicts of streams, mode names, float
or tensor voxel sizes) into the operators' arguments and reject malformed
ones with a ValueError or TypeError that names the argument. Shapes, dtypes
and devices are checked once, in C++, by the operators themselves. Autograd,
forward-mode AD and vmap are registered in ``_autograd.py``.
"""

import numbers
import operator

import torch

_MODES = ("linear", "nearest", "previous")
_REDUCES = ("occupancy", "count", "sum", "mean", "max")
_OPS = torch.ops.robocache


# Read once, at import (the library is loaded by then): a plain bool that
# torch.compile folds, where the dispatcher query itself would break the graph.
_HAS_CUDA_KERNELS = torch._C._dispatch_has_kernel_for_dispatch_key("robocache::resample", "CUDA")


def is_cuda_available():
    """Whether robocache was built with its CUDA kernels (and they are registered)."""
    return _HAS_CUDA_KERNELS


# ---------------------------------------------------------------------------
# Argument checks shared by the wrappers
# ---------------------------------------------------------------------------


def _tensor(x, name, op, optional=False):
    """``x`` itself when it is a tensor (or None where allowed); else a TypeError."""
    if torch.is_tensor(x) or (optional and x is None):
        return x
    if type(x).__module__.startswith("torch.fx"):  # a proxy while tracing: the op checks it
        return x
    hint = ""
    if type(x).__module__ == "numpy" or isinstance(x, (list, tuple, numbers.Number)):
        hint = " (pass a tensor: torch.from_numpy(array) or torch.tensor(data))"
    raise TypeError(
        f"{op}: {name} must be a torch.Tensor{' or None' if optional else ''}; "
        f"got {type(x).__name__}{hint}"
    )


def _mode(mode, name, op):
    if not isinstance(mode, str) or mode not in _MODES:
        raise ValueError(f"{op}: {name} must be 'linear', 'nearest' or 'previous'; got {mode!r}")
    return mode


def _require_kernels(op, *tensors):
    """A CUDA tensor on a build without CUDA kernels gets a clear error, not
    the dispatcher's 'Could not run ... with arguments from the CUDA backend'."""
    for t in tensors:
        if torch.is_tensor(t) and t.is_cuda and not is_cuda_available():
            raise RuntimeError(
                f"{op}: got a CUDA tensor, but this robocache was built without its CUDA kernels "
                f"(torch {torch.__version__}). Rebuild it against a CUDA build of torch with nvcc "
                "on the PATH: `FORCE_CUDA=1 pip install --no-build-isolation -e .`"
            )


def _on_meta(args):
    """``args`` with every tensor replaced by a meta tensor of its shape: the
    operator's own shape checks, run before any data check reads a value.
    Tensors on different devices are left alone (the operator says which)."""
    devices = {a.device for a in _flat_tensors(args)}
    return args if len(devices) > 1 else _to_meta(args)


def _flat_tensors(x):
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _to_meta(x):
    if torch.is_tensor(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(v) for v in x)
    return x


# ---------------------------------------------------------------------------
# resample
# ---------------------------------------------------------------------------


def _check_times_data(values, times, lengths, op):
    """check=True: lengths in [1, S], and finite, non-decreasing times that
    resolve their own sampling period. Reads tensor data (a host sync on the GPU)."""
    B, S = values.shape[0], values.shape[1]
    if lengths is not None:
        bad = ((lengths < 1) | (lengths > S)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(
                f"{op}: lengths[{b}] = {int(lengths[b])} is outside [1, S] with S = {S}"
            )
    t = times.expand(B, S)
    limit = lengths.view(B, 1) if lengths is not None else torch.full((B, 1), S, device=t.device)
    valid = torch.arange(S, device=t.device) < limit

    def where(b, j):
        return f"times[{j}]" if times.dim() == 1 else f"times[{b}, {j}]"

    if t.is_floating_point():
        bad = (~torch.isfinite(t) & valid).nonzero()
        if bad.numel():
            b, j = int(bad[0, 0]), int(bad[0, 1])
            raise ValueError(f"{op}: times must be finite; {where(b, j)} = {t[b, j].item()}")
    if S < 2:
        return
    decreasing = (t[:, 1:] < t[:, :-1]) & valid[..., 1:]
    bad = decreasing.nonzero()
    if bad.numel():
        b, j = int(bad[0, 0]), int(bad[0, 1]) + 1
        raise ValueError(
            f"{op}: times must be non-decreasing within the valid samples; "
            f"{where(b, j)} = {t[b, j].item()} < the sample before it "
            f"({t[b, j - 1].item()})"
        )
    if t.dtype == torch.float32:
        _check_time_resolution(t, valid, op)


def _check_time_resolution(t, valid, op):
    """float32 times too coarse for their own spacing (e.g. unix-epoch seconds:
    at 1.7e9 a float32 step is 128 s, so 100 Hz samples collapse)."""
    n = valid.sum(1)
    rows = (n >= 2).nonzero().flatten()
    if rows.numel() == 0:
        return
    big = torch.finfo(t.dtype).max
    first = torch.where(valid, t, big).amin(1)
    last = torch.where(valid, t, -big).amax(1)
    magnitude = torch.maximum(first.abs(), last.abs())
    step = torch.nextafter(magnitude, torch.full_like(magnitude, torch.inf)) - magnitude
    period = (last - first) / (n - 1).clamp(min=1)
    bad = ((period < 4 * step) & (n >= 2)).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(
            f"{op}: float32 times cannot resolve their own sampling period in row {b}: near "
            f"{magnitude[b].item():.6g} a float32 step is {step[b].item():.3g}, but the samples "
            f"are {period[b].item():.3g} apart on average. Use float64 or int64 nanosecond "
            "times, or subtract the episode's start time first"
        )


def resample(
    values, times, query_times, lengths=None, mode="linear", *, interval=None, check=False
):
    """Resample batched trajectories onto new timestamps.

    Args:
        values: (B, S, D) samples; float32, float64, float16 or bfloat16.
        times: (B, S) sample times, or (S,) shared by the batch; float32,
            float64 or int64 (e.g. nanosecond stamps). Must be finite and
            non-decreasing within each row's valid samples; this is not
            checked unless ``check=True``.
        query_times: (B, T) or (T,) times to sample at; same dtype as ``times``.
        lengths: optional (B,) int64 tensor, the number of valid leading
            samples per row (default S). Samples past it are ignored.
        mode: ``"linear"`` (interpolate), ``"nearest"`` (closest sample; a tie
            goes to the later one), ``"previous"`` (zero-order hold: the last
            sample at or before the query) or ``"mean"`` (the mean of the
            samples in ``(q - interval, q]``: downsampling without aliasing;
            int64 times, run by ``sample_windows``; an empty interval holds
            the previous sample).
        interval: for ``"mean"``, the interval in the times' unit (int; e.g.
            the query timeline's step in nanoseconds).
        check: validate the shapes, then ``lengths`` and the times (finite,
            non-decreasing, and for float32 fine enough to resolve their own
            spacing), and raise on a violation. This reads tensor data, so on
            a GPU it synchronizes the host; it is meant for debugging, not for
            compiled graphs.

    Returns:
        (B, T, D) tensor in the dtype of ``values``.

    Queries outside the valid range take the first/last valid sample; a query
    exactly at a sample time returns that sample exactly; repeated times are
    right-continuous; a NaN query gives NaN. Weights are computed in the
    precision of the times (float64 for float64 and int64 times). Non-finite
    values follow numpy.interp (docs/ops.md).

    Without ``check=True`` the CUDA kernel never reads ``lengths`` on the host:
    a row with length < 1 comes out as NaN and a length above S is treated as
    S. The CPU kernel raises for lengths outside [1, S].

    Gradients flow to ``values``, ``query_times`` and floating ``times``
    (for ``linear``, the slope: the right-hand slope at a knot, zero outside
    the range; zero for ``nearest`` and ``previous``), to any order; for
    ``mean``, to ``values`` only.
    """
    op = "robocache.resample"
    _tensor(values, "values", op)
    _tensor(times, "times", op)
    _tensor(query_times, "query_times", op)
    _tensor(lengths, "lengths", op, optional=True)
    if mode == "mean":
        if check:
            _check_times_data(values, times, lengths, op)
        return _resample_mean(values, times, query_times, lengths, interval, op)
    _mode(mode, "mode", op)
    if interval is not None:
        raise ValueError(f"{op}: interval is for mode 'mean' only; got mode {mode!r}")
    _require_kernels(op, values, times, query_times, lengths)
    if check:
        _OPS.resample(*_on_meta((values, times, query_times, lengths)), mode)  # shapes first
        _check_times_data(values, times, lengths, op)
    return _OPS.resample(values, times, query_times, lengths, mode)


def _resample_mean(values, times, query_times, lengths, interval, op):
    """resample's interval mean through sample_windows: each row is an
    episode of a packed stream (its padding past ``lengths`` another, never
    read)."""
    from ._windows import sample_windows

    if times.dtype != torch.int64 or query_times.dtype != torch.int64:
        raise TypeError(
            f"{op}: mode 'mean' needs int64 times and query_times (e.g. nanoseconds); got "
            f"{times.dtype} and {query_times.dtype}"
        )
    if isinstance(interval, bool) or not isinstance(interval, numbers.Integral) or interval <= 0:
        raise ValueError(f"{op}: mode 'mean' needs interval, a positive int; got {interval!r}")
    if values.dim() != 3:
        raise ValueError(f"{op}: values must be 3-D (B, S, D); got shape {list(values.shape)}")
    B, S, D = values.shape
    if S == 0:
        raise ValueError(f"{op}: values has no source samples (S == 0); resampling needs one")
    if times.shape not in ((S,), (B, S)) or query_times.dim() not in (1, 2):
        raise ValueError(
            f"{op}: times must be (B, S) or (S,) and query_times (B, T) or (T,); got values "
            f"{list(values.shape)}, times {list(times.shape)}, query_times "
            f"{list(query_times.shape)}"
        )
    device = values.device
    starts = torch.arange(B, device=device) * S
    if lengths is None:
        offsets = torch.cat([starts, torch.full((1,), B * S, device=device)])
        episode = torch.arange(B, device=device)
    else:
        if not values.is_cuda and bool(((lengths < 1) | (lengths > S)).any()):
            raise ValueError(f"{op}: lengths must lie in [1, S = {S}]; got {lengths.tolist()}")
        ends = starts + lengths.clamp(0, S)
        offsets = torch.cat(
            [torch.stack([starts, ends], 1).reshape(-1), starts.new_full((1,), B * S)]
        )
        episode = 2 * torch.arange(B, device=device)
    query = query_times.expand(B, query_times.shape[-1]).contiguous()
    flat_times = times.expand(B, S).reshape(B * S)
    out, _, _ = sample_windows(
        values.reshape(B * S, D),
        flat_times,
        offsets,
        episode,
        query,
        "mean",
        interval=int(interval),
    )
    if lengths is not None:  # a row without samples is NaN, as in the other modes
        out = torch.where((lengths < 1).view(B, 1, 1), torch.full_like(out, torch.nan), out)
    return out


# ---------------------------------------------------------------------------
# fuse
# ---------------------------------------------------------------------------


def _unpack_streams(streams, modes):
    """(names or None, values, times, lengths, modes) from fuse's arguments."""
    op = "robocache.fuse"
    if isinstance(streams, dict):
        names = list(streams)
        entries = [streams[n] for n in names]
    elif isinstance(streams, (list, tuple)):
        names = None
        entries = list(streams)
    else:
        raise TypeError(
            f"{op}: streams must be a sequence of (values, times[, lengths]) tuples "
            f"or a dict of them; got {type(streams).__name__}"
        )
    if not entries:
        raise ValueError(f"{op}: streams is empty; give at least one (values, times) pair")
    labels = [repr(n) for n in names] if names else [str(k) for k in range(len(entries))]
    values, times, lengths = [], [], []
    for label, entry in zip(labels, entries):
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
            raise ValueError(
                f"{op}: stream {label} must be a (values, times) or "
                f"(values, times, lengths) tuple; got {type(entry).__name__}"
            )
        values.append(_tensor(entry[0], f"stream {label}: values", op))
        times.append(_tensor(entry[1], f"stream {label}: times", op))
        lengths.append(
            _tensor(entry[2], f"stream {label}: lengths", op, optional=True)
            if len(entry) == 3
            else None
        )
    K = len(entries)
    if isinstance(modes, str):
        parts = modes.split(",")
        if len(parts) not in (1, K):
            raise ValueError(
                f"{op}: modes must be one mode or one per stream ({K}); got "
                f"{len(parts)} in {modes!r}"
            )
        modes = [_mode(m.strip(), "modes", op) for m in parts] * (K if len(parts) == 1 else 1)
    elif isinstance(modes, dict):
        if names is None:
            raise ValueError(f"{op}: modes may be a dict only when streams is one")
        unknown = set(modes) - set(names)
        if unknown:
            raise ValueError(
                f"{op}: modes names unknown streams {sorted(unknown)}; the streams are {names}"
            )
        modes = [_mode(modes.get(n, "linear"), f"modes[{n!r}]", op) for n in names]
    elif isinstance(modes, (list, tuple)):
        if len(modes) != K:
            raise ValueError(
                f"{op}: modes must have one mode per stream ({K}); got {len(modes)}: "
                f"{list(modes)!r}"
            )
        modes = [_mode(m, f"modes[{k}]", op) for k, m in enumerate(modes)]
    else:
        raise TypeError(
            f"{op}: modes must be a mode name, a sequence of them or a dict; got "
            f"{type(modes).__name__}"
        )
    return names, labels, values, times, lengths, modes


def fuse_columns(streams):
    """Which output columns of :func:`fuse` belong to which stream.

    Returns a dict of name -> slice when ``streams`` is a mapping, otherwise a
    list of slices in stream order. Only the shapes of the values are read.
    """
    names, _, values, _, _, _ = _unpack_streams(streams, "linear")
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
        modes: ``"linear"``, ``"nearest"`` or ``"previous"`` for every stream;
            or one per stream: a sequence of K modes, a string of K
            comma-separated modes, or a mapping by stream name (streams it
            leaves out are linear).
        check: validate every stream as :func:`resample`'s ``check`` does (a
            host sync on the GPU); messages name the stream.

    Returns:
        (B, T, sum D_k): the streams' channels in the order given. Each stream
        follows exactly the semantics of :func:`resample`; use
        :func:`fuse_columns` to find a stream's columns.

    On CUDA one launch writes every stream into the output (up to 32 streams
    per launch). Gradients flow to every stream's values and to ``query_times``.
    """
    op = "robocache.fuse"
    names, labels, values, times, lengths, modes = _unpack_streams(streams, modes)
    _tensor(query_times, "query_times", op)
    _require_kernels(op, query_times, *values, *times, *lengths)
    stacked = _stack_lengths(labels, values, lengths)
    modes = ",".join(modes)
    if check:
        _OPS.fuse(*_on_meta((values, times, query_times, stacked)), modes)  # shapes first
        for label, v, t, n in zip(labels, values, times, lengths):
            _check_times_data(v, t, n, f"{op}: stream {label}")
    return _OPS.fuse(values, times, query_times, stacked, modes)


def _stack_lengths(labels, values, lengths):
    """Per-stream lengths (or None) -> the operator's (K, B) int64 tensor, or None.

    A stream without lengths gets S_k (all its samples valid)."""
    if all(n is None for n in lengths):
        return None
    B = values[0].shape[0]
    rows = []
    for label, v, n in zip(labels, values, lengths):
        if n is None:
            rows.append(torch.full((B,), v.shape[1], dtype=torch.long, device=v.device))
            continue
        if not torch.is_tensor(n):  # e.g. an FX proxy: the operator checks it
            rows.append(n)
            continue
        if n.dtype != torch.long:
            raise TypeError(
                f"robocache.fuse: stream {label}: lengths must be an int64 tensor; got {n.dtype}"
            )
        if n.dim() != 1 or n.shape[0] != B:
            raise ValueError(
                f"robocache.fuse: stream {label}: lengths must be (B,) = ({B},); "
                f"got shape {list(n.shape)}"
            )
        rows.append(n)
    return torch.stack(rows)


# ---------------------------------------------------------------------------
# voxelize
# ---------------------------------------------------------------------------


def _floats(x, name, sizes):
    """A number, sequence, numpy value or tensor -> list of floats, with one of
    the allowed counts ``sizes``. Tensors are read on the host."""
    op = "robocache.voxelize"
    if torch.is_tensor(x):
        x = x.detach().cpu().reshape(-1).tolist()  # a GPU tensor syncs once
    elif type(x).__module__ == "numpy":
        x = x.reshape(-1).tolist() if hasattr(x, "reshape") else [x.item()]
    elif isinstance(x, numbers.Real):
        x = [x]
    elif not isinstance(x, (list, tuple)):
        raise TypeError(
            f"{op}: {name} must be a number, a sequence or a tensor; got {type(x).__name__}"
        )
    out = []
    for v in x:
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise TypeError(f"{op}: {name} entries must be real numbers; got {v!r}")
        out.append(float(v))
    if len(out) not in sizes:
        raise ValueError(
            f"{op}: {name} must have {' or '.join(map(str, sizes))} values; got {len(out)}: {out}"
        )
    return out


def _grid_size(grid_size):
    op = "robocache.voxelize"
    if torch.is_tensor(grid_size) or type(grid_size).__module__ == "numpy":
        grid_size = grid_size.tolist()
    if not isinstance(grid_size, (list, tuple, torch.Size)):
        raise TypeError(f"{op}: grid_size must be three integers (X, Y, Z); got {grid_size!r}")
    if len(grid_size) != 3:
        raise ValueError(f"{op}: grid_size must have 3 entries (X, Y, Z); got {len(grid_size)}")
    grid = []
    for g in grid_size:
        if isinstance(g, torch.SymInt):
            grid.append(g)
            continue
        if isinstance(g, bool) or not isinstance(g, numbers.Integral):
            raise TypeError(
                f"{op}: grid_size must be three integers; got {grid_size!r} "
                f"(entry {g!r} is a {type(g).__name__})"
            )
        if g < 1:
            raise ValueError(f"{op}: grid_size must be positive; got {list(grid_size)}")
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
    op = "robocache.voxelize"
    if not isinstance(reduce, str) or reduce not in _REDUCES:
        raise ValueError(f"{op}: reduce must be one of {_REDUCES}; got {reduce!r}")
    _tensor(points, "points", op)
    _tensor(features, "features", op, optional=True)
    _tensor(lengths, "lengths", op, optional=True)
    _require_kernels(op, points, features, lengths)
    grid = _grid_size(grid_size)
    voxel_size, voxel_size_tensor = _grid_values(voxel_size, "voxel_size", (1, 3), points)
    origin, origin_tensor = _grid_values(origin, "origin", (3,), points)
    if check:
        _OPS.voxelize(
            *_on_meta((points, features, lengths)),
            grid,
            voxel_size,
            origin,
            reduce,
            *_on_meta((voxel_size_tensor, origin_tensor)),
        )
        _check_grid_tensors(voxel_size_tensor, origin_tensor, op)
    if check and lengths is not None:
        N = points.shape[-2]
        bad = ((lengths < 0) | (lengths > N)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(
                f"{op}: lengths[{b}] = {int(lengths[b])} is outside [0, N] with N = {N}"
            )
    return _OPS.voxelize(
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


def _check_grid_tensors(voxel_size, origin, op):
    """check=True: the values of voxel_size and origin tensors (a host sync)."""
    if voxel_size is not None and not bool(((voxel_size > 0) & voxel_size.isfinite()).all()):
        raise ValueError(f"{op}: voxel_size must be positive and finite; got {voxel_size.tolist()}")
    if origin is not None and not bool(origin.isfinite().all()):
        raise ValueError(f"{op}: origin must be finite; got {origin.tolist()}")
