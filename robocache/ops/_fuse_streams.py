"""fuse's ``streams`` and ``modes`` arguments, as its operator takes them:
per-stream values, times and lengths, one mode a stream, and the (K, B)
lengths tensor."""

import torch

from .._ops import check_mode, check_tensor

_OP = "robocache.fuse"


def unpack_streams(streams, modes):
    """(names or None, labels, values, times, lengths, modes) from fuse's arguments."""
    if isinstance(streams, dict):
        names = list(streams)
        entries = [streams[n] for n in names]
    elif isinstance(streams, (list, tuple)):
        names = None
        entries = list(streams)
    else:
        raise TypeError(
            f"{_OP}: streams must be a sequence of (values, times[, lengths]) tuples "
            f"or a dict of them; got {type(streams).__name__}"
        )
    if not entries:
        raise ValueError(f"{_OP}: streams is empty; give at least one (values, times) pair")
    labels = [repr(n) for n in names] if names else [str(k) for k in range(len(entries))]
    values, times, lengths = [], [], []
    for label, entry in zip(labels, entries):
        if not isinstance(entry, (tuple, list)) or len(entry) not in (2, 3):
            raise ValueError(
                f"{_OP}: stream {label} must be a (values, times) or "
                f"(values, times, lengths) tuple; got {type(entry).__name__}"
            )
        values.append(check_tensor(entry[0], f"stream {label}: values", _OP))
        times.append(check_tensor(entry[1], f"stream {label}: times", _OP))
        lengths.append(
            check_tensor(entry[2], f"stream {label}: lengths", _OP, optional=True)
            if len(entry) == 3
            else None
        )
    return names, labels, values, times, lengths, _stream_modes(modes, names, len(entries))


def _stream_modes(modes, names, K):
    """One interpolation mode per stream from fuse's ``modes``."""
    if isinstance(modes, str):
        parts = modes.split(",")
        if len(parts) not in (1, K):
            raise ValueError(
                f"{_OP}: modes must be one mode or one per stream ({K}); got "
                f"{len(parts)} in {modes!r}"
            )
        return [check_mode(m.strip(), "modes", _OP) for m in parts] * (K if len(parts) == 1 else 1)
    if isinstance(modes, dict):
        if names is None:
            raise ValueError(f"{_OP}: modes may be a dict only when streams is one")
        unknown = set(modes) - set(names)
        if unknown:
            raise ValueError(
                f"{_OP}: modes names unknown streams {sorted(unknown)}; the streams are {names}"
            )
        return [check_mode(modes.get(n, "linear"), f"modes[{n!r}]", _OP) for n in names]
    if isinstance(modes, (list, tuple)):
        if len(modes) != K:
            raise ValueError(
                f"{_OP}: modes must have one mode per stream ({K}); got {len(modes)}: "
                f"{list(modes)!r}"
            )
        return [check_mode(m, f"modes[{k}]", _OP) for k, m in enumerate(modes)]
    raise TypeError(
        f"{_OP}: modes must be a mode name, a sequence of them or a dict; got "
        f"{type(modes).__name__}"
    )


def stack_lengths(labels, values, lengths):
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
                f"{_OP}: stream {label}: lengths must be an int64 tensor; got {n.dtype}"
            )
        if n.dim() != 1 or n.shape[0] != B:
            raise ValueError(
                f"{_OP}: stream {label}: lengths must be (B,) = ({B},); got shape {list(n.shape)}"
            )
        rows.append(n)
    return torch.stack(rows)
