"""The pure-PyTorch oracle of sample_windows and anchor_windows: query by
query in Python integers, plain and slow."""

import bisect

import torch

from .interp import blend, compute_dtype

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
    compute = compute_dtype(values.dtype) if values.is_floating_point() else values.dtype
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
