"""The pure-PyTorch oracle of resample and fuse."""

from typing import NamedTuple

import torch

MODES = ("linear", "nearest", "previous")


def compute_dtype(dtype):
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
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}; got {mode!r}")
    B, S, D = values.shape
    loc = locate(times, query_times, lengths, S, B, mode)
    cdt = compute_dtype(values.dtype)
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
