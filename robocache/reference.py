"""Pure-PyTorch reference implementations of robocache's operators.

These have exactly the semantics of the compiled operators, written with
ordinary torch ops (searchsorted, gather, arithmetic). They are the oracle for
the tests, the baseline for the benchmarks, and what ``backend="pytorch"`` runs.
They are differentiable through ordinary autograd.
"""

import bisect
from typing import NamedTuple

import torch

_MODES = ("linear", "nearest", "previous")


def _compute_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _weight_dtype(time_dtype):
    # Weights keep the precision of the times (int64 and float64 -> float64).
    return torch.float32 if time_dtype == torch.float32 else torch.float64


class Location(NamedTuple):
    """Where each query lands, all (B, T): ``out = v[i0] + w (v[i1] - v[i0])``;
    ``dt = t[i1] - t[i0]`` for a linear query strictly inside the valid range
    (0 elsewhere); ``nan`` marks a NaN query or a row with no valid sample."""

    i0: torch.Tensor
    i1: torch.Tensor
    w: torch.Tensor
    dt: torch.Tensor
    nan: torch.Tensor


def locate(times, query_times, lengths, S, B, mode):
    """Where every query lands among its row's valid samples (see Location)."""
    T = query_times.shape[-1]
    times = times.expand(B, S)
    q = query_times.expand(B, T)
    if lengths is None:
        L = torch.full((B, 1), S, dtype=torch.long, device=times.device)
    else:
        L = lengths.clamp(max=S).view(B, 1)
    # Padding past a row's length sorts after every query, so the search
    # only sees the valid prefix.
    big = torch.inf if times.is_floating_point() else torch.iinfo(times.dtype).max
    valid = torch.arange(S, device=times.device) < L
    searchable = torch.where(valid, times, torch.full_like(times, big))
    k = torch.searchsorted(searchable.contiguous(), q.contiguous(), right=True)
    k = torch.minimum(k, L)
    i0 = torch.minimum((k - 1).clamp(min=0), L - 1).clamp(0, S - 1)
    i1 = torch.minimum(k, L - 1).clamp(0, S - 1)
    t0 = times.gather(1, i0)
    t1 = times.gather(1, i1)
    inside = (k > 0) & (k < L)
    wdt = _weight_dtype(times.dtype)
    zero = torch.zeros(q.shape, dtype=wdt, device=q.device)
    if mode == "linear":
        dt = torch.where(inside, (t1 - t0).to(wdt), zero)
        w = torch.where(inside, (q - t0).to(wdt) / torch.where(inside, dt, zero + 1), zero)
    else:
        if mode == "nearest":
            later = inside & ((t1 - q) <= (q - t0))  # a tie goes to the later sample
            i0 = torch.where(later, i1, i0)
        i1 = i0
        w = dt = zero
    nan = (L < 1).expand(B, T)
    if q.is_floating_point():
        nan = nan | torch.isnan(q)
    return Location(i0, i1, w, dt, nan)


def blend(v0, v1, w):
    """``v0 + w (v1 - v0)`` as the operators evaluate it (interp.h's blend).

    - ``w == 0`` returns ``v0`` exactly, whatever ``v1`` is (a query on a knot).
    - When both samples are finite the result is finite: if ``v1 - v0``
      overflows, ``(1 - w) v0 + w v1`` is used instead.
    - With a non-finite sample, numpy.interp's rule: an infinite result
      stands; otherwise interpolate from ``v1``'s side; if that is NaN too,
      equal samples give that sample, else NaN.
    """
    d = v1 - v0
    r = v0 + w * d
    from_right = v1 + (w - 1) * d
    fallback = torch.where(
        torch.isfinite(v0) & torch.isfinite(v1),
        (1 - w) * v0 + w * v1,
        torch.where(
            ~torch.isnan(r),
            r,
            torch.where(
                ~torch.isnan(from_right), from_right, torch.where(v0 == v1, v0, from_right)
            ),
        ),
    )
    # w == 0 with a finite difference gives r == v0 exactly; written this way
    # the derivative in w stays the slope (the right-hand one at a knot).
    return torch.where(torch.isfinite(r), r, torch.where(w == 0, v0, fallback))


def resample(values, times, query_times, lengths=None, mode="linear", interval=None):
    """Reference for :func:`robocache.resample` (same arguments, same result)."""
    if mode == "mean":
        return _resample_mean(values, times, query_times, lengths, interval)
    if mode not in _MODES:
        raise ValueError(f"mode must be one of {_MODES}; got {mode!r}")
    B, S, D = values.shape
    loc = locate(times, query_times, lengths, S, B, mode)
    cdt = _compute_dtype(values.dtype)
    v = values.to(cdt)
    T = loc.i0.shape[1]
    v0 = v.gather(1, loc.i0.unsqueeze(-1).expand(B, T, D))
    if mode == "linear":
        v1 = v.gather(1, loc.i1.unsqueeze(-1).expand(B, T, D))
        out = blend(v0, v1, loc.w.to(cdt).unsqueeze(-1))
    else:
        out = v0
    out = torch.where(loc.nan.unsqueeze(-1), torch.full_like(out, torch.nan), out)
    return out.to(values.dtype)


def _resample_mean(values, times, query_times, lengths, interval):
    """The mean of each row's valid samples in (q - interval, q], in float64
    (an empty interval holds the last sample at or before q, or the first)."""
    B, S, D = values.shape
    T = query_times.shape[-1]
    t = times.expand(B, S).tolist()
    q = query_times.expand(B, T).tolist()
    n = [S] * B if lengths is None else lengths.tolist()
    out = torch.full((B, T, D), torch.nan, dtype=torch.float64)
    v = values.detach().cpu().double()
    for b in range(B):
        for j in range(T):
            if n[b] < 1:
                continue
            rows = [s for s in range(n[b]) if q[b][j] - interval < t[b][s] <= q[b][j]]
            if rows:
                out[b, j] = v[b, rows].mean(0)
            else:
                held = [s for s in range(n[b]) if t[b][s] <= q[b][j]]
                out[b, j] = v[b, held[-1] if held else 0]
    return out.to(values.dtype).to(values.device)


def fuse(streams, query_times, modes="linear"):
    """Reference for :func:`robocache.fuse`: per-stream resample, then concatenate.

    ``streams`` is a sequence of (values, times[, lengths]) tuples or a mapping
    of name -> tuple; ``modes`` a mode for all, or one per stream.
    """
    entries = list(streams.values()) if isinstance(streams, dict) else list(streams)
    if isinstance(modes, str):
        modes = [modes] * len(entries)
    elif isinstance(modes, dict):
        modes = [modes.get(n, "linear") for n in streams]
    outs = []
    for entry, mode in zip(entries, modes):
        values, times = entry[0], entry[1]
        lengths = entry[2] if len(entry) == 3 else None
        outs.append(resample(values, times, query_times, lengths, mode))
    return torch.cat(outs, dim=-1)


def _floats(x):
    """A number, or nested lists, tuples or numpy arrays of them, as a flat list of floats."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return [f for v in x for f in _floats(v)]
    return [float(x)]


def _per_cloud(x, B, points):
    """A voxel size or origin (a number, 1 or 3 values, or a (B, 3) tensor of
    one row per cloud) as (B or 1, 1, 3) in the points' dtype."""
    if torch.is_tensor(x):
        t = x.to(device=points.device, dtype=points.dtype)
    else:  # flattened in Python: torch.compile traces it with no graph break
        t = torch.tensor(_floats(x), device=points.device, dtype=points.dtype)
    if t.dim() == 2:
        return t.view(B, 1, 3)
    return t.reshape(-1).expand(3).view(1, 1, 3) if t.numel() == 1 else t.view(1, 1, 3)


def voxelize(
    points, grid_size, voxel_size, origin, features=None, lengths=None, reduce="occupancy"
):
    """Reference for :func:`robocache.voxelize` (same arguments, same result).

    Dropped points (not finite, out of range, past ``lengths``) are masked:
    they scatter zero weight into in-range slots spread over the grid, never
    onto one sentinel voxel, so the reference has no artificial hot spot.
    """
    batched = points.dim() == 3
    if not batched:
        points = points.unsqueeze(0)
        features = features.unsqueeze(0) if features is not None else None
    B, N, _ = points.shape
    X, Y, Z = (int(g) for g in grid_size)
    cells = X * Y * Z
    o = _per_cloud(origin, B, points)
    v = _per_cloud(voxel_size, B, points)
    f = torch.floor((points - o) / v)
    dims = torch.tensor([X, Y, Z], dtype=points.dtype, device=points.device)
    keep = torch.isfinite(points).all(-1) & ((f >= 0) & (f < dims)).all(-1)
    if lengths is not None:
        keep &= torch.arange(N, device=points.device) < lengths.view(B, 1)
    ijk = torch.where(keep.unsqueeze(-1), f, torch.zeros_like(f)).long()
    flat = (ijk[..., 0] * Y + ijk[..., 1]) * Z + ijk[..., 2]
    spread = torch.arange(B * N, device=points.device).view(B, N) % cells
    flat = (
        torch.where(keep, flat, spread) + torch.arange(B, device=points.device).view(B, 1) * cells
    )
    flat = flat.reshape(-1)
    counts = torch.zeros(B * cells, dtype=torch.int32, device=points.device)
    counts.index_add_(0, flat, keep.reshape(-1).to(torch.int32))

    def shaped(grid, with_channels):
        if with_channels:
            C = grid.shape[-1]
            grid = grid.view(B, X, Y, Z, C).permute(0, 4, 1, 2, 3).contiguous()
        else:
            grid = grid.view(B, X, Y, Z)
        return grid if batched else grid[0]

    if reduce == "occupancy":
        return shaped((counts > 0).to(points.dtype), False)
    if reduce == "count":
        return shaped(counts, False)
    C = features.shape[-1]
    acc_dtype = torch.float64 if features.dtype == torch.float64 else torch.float32
    feats = features.reshape(B * N, C).to(acc_dtype)
    kept = keep.reshape(-1, 1)
    if reduce in ("sum", "mean"):
        src = torch.where(kept, feats, torch.zeros_like(feats))
        acc = torch.zeros(B * cells, C, dtype=acc_dtype, device=points.device).index_add(
            0, flat, src
        )
        if reduce == "mean":
            acc = acc / counts.clamp(min=1).unsqueeze(-1)
    elif reduce == "max":
        src = torch.where(kept, feats, torch.full_like(feats, -torch.inf))
        acc = torch.full((B * cells, C), -torch.inf, dtype=acc_dtype, device=points.device)
        acc = acc.scatter_reduce(0, flat.unsqueeze(-1).expand(-1, C), src, "amax")
        acc = torch.where((counts > 0).unsqueeze(-1), acc, torch.zeros_like(acc))
    else:
        raise ValueError(f"unknown reduce {reduce!r}")
    return shaped(acc.to(features.dtype), True)


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def sample_windows(
    values,
    times,
    offsets,
    episode,
    query_times,
    mode="nearest",
    interval=0,
    tolerance=None,
    edge_tolerance=0,
):
    """robocache.sample_windows, query by query in Python integers (the
    oracle: plain and slow). Blends and averages are computed in the
    operators' compute dtype (float32 for float16/bfloat16/float32), adding
    in sample order as the kernels do."""
    N, shape = values.shape[0], values.shape[1:]
    flat = values.reshape(N, -1).cpu()
    t, off = times.tolist(), offsets.tolist()
    E = len(off) - 1
    B, W = query_times.shape
    compute = _compute_dtype(values.dtype) if values.is_floating_point() else values.dtype
    out = torch.zeros(B, W, flat.shape[1], dtype=values.dtype)
    is_pad = torch.zeros(B, W, dtype=torch.bool)
    age = torch.zeros(B, W, dtype=torch.int64)
    for b, (e, row) in enumerate(zip(episode.tolist(), query_times.tolist())):
        if not 0 <= e < E:
            raise ValueError(f"episode[{b}] = {e} is not an episode (there are {E})")
        a, z = off[e], off[e + 1]
        for j, q in enumerate(row):
            if z <= a:
                is_pad[b, j] = True
                continue
            k = bisect.bisect_right(t, q, a, z)
            i0 = i1 = k - 1 if k > a else a
            w, span, pad = 0.0, None, False
            if mode == "nearest" and k < z and (k == a or t[k] - q <= q - t[k - 1]):
                i0 = i1 = k
            elif mode == "linear" and a < k < z and t[k - 1] < q:
                i1, w = k, (q - t[k - 1]) / (t[k] - t[k - 1])
            elif mode == "mean":
                lo = bisect.bisect_right(t, q - interval, a, k)
                span, pad = ((lo, k), False) if lo < k else (None, True)
            if span is not None:  # summed in order in the compute dtype, as the kernels do
                total = torch.zeros(flat.shape[1], dtype=compute)
                for r in range(span[0], span[1]):
                    total += flat[r].to(compute)
                value = total / (span[1] - span[0])
                oldest, newest, aged = span[0], span[1] - 1, span[1] - 1
            elif w > 0:
                v0, v1 = flat[i0].to(compute), flat[i1].to(compute)
                value = blend(v0, v1, torch.tensor(w, dtype=compute))
                oldest, newest, aged = i0, i1, i0
            else:
                value = flat[i0]
                oldest, newest, aged = i0, i0, i0
            out[b, j] = value.to(values.dtype)
            age[b, j] = min(max(q - t[aged], _INT64_MIN), _INT64_MAX)
            outside = (q < t[a] and t[a] - q > edge_tolerance) or (
                q > t[z - 1] and q - t[z - 1] > edge_tolerance
            )
            stale = tolerance is not None and (
                abs(q - t[oldest]) > tolerance or abs(q - t[newest]) > tolerance
            )
            is_pad[b, j] = pad or outside or stale
    device = values.device
    return out.reshape(B, W, *shape).to(device), is_pad.to(device), age.to(device)


def anchor_windows(
    values,
    times,
    offsets,
    deltas,
    anchor_offsets,
    anchor_times,
    index,
    modes="nearest",
    intervals=None,
    tolerances=None,
    edge_tolerance=0,
    anchor_rows=None,
):
    """robocache.anchor_windows: each anchor row's episode by bisection of
    anchor_offsets, then every stream through :func:`sample_windows` at
    ``anchor_times[index] + deltas[k]``, and each anchor_rows table indexed."""
    K = len(values)

    def per_stream(x, fallback):
        x = fallback if x is None else x
        return list(x) if isinstance(x, (list, tuple)) else [x] * K

    modes = per_stream(modes, "nearest")
    modes = modes * K if len(modes) == 1 else modes
    intervals, tolerances = per_stream(intervals, 0), per_stream(tolerances, None)
    off = anchor_offsets.tolist()
    episode = []
    for b, row in enumerate(index.tolist()):
        if not off[0] <= row < off[-1]:
            raise ValueError(f"index[{b}] = {row} is not a row of any episode")
        episode.append(bisect.bisect_right(off, row) - 1)
    episode = torch.tensor(episode, dtype=torch.int64, device=index.device)
    anchor_time = anchor_times[index].unsqueeze(1)
    outs, pads, ages = [], [], []
    for k in range(K):
        out, pad, age = sample_windows(
            values[k],
            times[k],
            offsets[k],
            episode,
            anchor_time + deltas[k],
            modes[k],
            intervals[k],
            tolerances[k],
            edge_tolerance,
        )
        outs.append(out)
        pads.append(pad)
        ages.append(age)
    return outs, pads, ages, episode, [table[index] for table in anchor_rows or []]
