"""What a store must be, checked where it comes from a file: its structure
(shapes, dtypes, offsets, indices: O(E + streams)), its times sorted within
each episode (one vectorised pass, O(N), on the store's device), and the
CRC-32 checksums its file carries."""

import zlib

import torch

from ..errors import LoaderError


def tensor_crc32(t):
    """CRC-32 of a tensor's bytes (C order), as the file stores it."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return zlib.crc32(b"")
    return zlib.crc32(flat.cpu().view(torch.uint8).numpy())


def episode_crc32(values, offsets):
    """(E,) int64: the CRC-32 of each episode's rows of ``values``."""
    flat = values.detach().contiguous().reshape(values.shape[0], -1)
    bounds = offsets.tolist()
    sums = [tensor_crc32(flat[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    return torch.tensor(sums, dtype=torch.int64)


def check_structure(streams, episodes, tasks, where):
    """Shapes, dtypes, offsets and indices of a store read from a file: a
    LoaderError naming the file (``where``) and the tensor otherwise."""
    E = None
    for name in ("episode_index", "length", "task_index"):
        t = episodes.get(name)
        if t is None:
            raise LoaderError(f"{where}: the file has no tensor episodes/{name}")
        if t.dtype != torch.int64 or t.dim() != 1:
            raise LoaderError(
                f"{where}: episodes/{name} must be (E,) int64; got {tuple(t.shape)} {t.dtype}"
            )
        if E is not None and t.shape[0] != E:
            raise LoaderError(f"{where}: episodes/{name} has {t.shape[0]} rows; the others {E}")
        E = t.shape[0]
    task_index = episodes["task_index"]
    if E and (int(task_index.min()) < 0 or int(task_index.max()) >= len(tasks)):
        bad = int(((task_index < 0) | (task_index >= len(tasks))).nonzero()[0, 0])
        raise LoaderError(
            f"{where}: episodes/task_index[{bad}] = {int(task_index[bad])} is not one of the "
            f"{len(tasks)} tasks"
        )
    if E and int(episodes["length"].min()) < 0:
        raise LoaderError(f"{where}: episodes/length holds a negative length")
    for key, s in streams.items():
        here = f"{where}, stream {key!r}"
        if s.times.dtype != torch.int64 or s.times.dim() != 1:
            raise LoaderError(
                f"{here}: times must be (N,) int64; got {tuple(s.times.shape)} {s.times.dtype}"
            )
        if s.offsets.dtype != torch.int64 or tuple(s.offsets.shape) != (E + 1,):
            raise LoaderError(
                f"{here}: offsets must be ({E + 1},) int64 for {E} episodes; got "
                f"{tuple(s.offsets.shape)} {s.offsets.dtype}"
            )
        N = s.times.shape[0]
        if s.encoding is not None:
            _check_encoded(s, N, here)
        elif s.values.dim() < 1 or s.values.shape[0] != N:
            raise LoaderError(
                f"{here}: values {tuple(s.values.shape)} and times ({N},) must have the same N"
            )
        offsets = s.offsets.cpu()
        if int(offsets[0]) != 0 or int(offsets[-1]) != N or bool((offsets.diff() < 0).any()):
            raise LoaderError(
                f"{here}: offsets must rise from 0 to the {N} rows; got {_ends(offsets)}"
            )
        for name, stat in s.stats.items():
            if tuple(stat.shape) != s.sample_shape:
                raise LoaderError(
                    f"{here}: statistic {name!r} is {tuple(stat.shape)}, not the sample shape "
                    f"{s.sample_shape}"
                )


def _check_encoded(s, N, here):
    """An encoded stream's bytes and byte offsets: every frame's bytes inside
    the values, in order (the bytes themselves are checked by their CRCs and
    by the decoder)."""
    if s.values.dtype != torch.uint8 or s.values.dim() != 1:
        raise LoaderError(
            f"{here}: an encoded stream's values must be (bytes,) uint8; got "
            f"{tuple(s.values.shape)} {s.values.dtype}"
        )
    b = s.byte_offsets
    if b is None or b.dtype != torch.int64 or tuple(b.shape) != (N + 1,):
        got = None if b is None else f"{tuple(b.shape)} {b.dtype}"
        raise LoaderError(f"{here}: byte_offsets must be ({N + 1},) int64; got {got}")
    b = b.cpu()
    if int(b[0]) != 0 or int(b[-1]) != s.values.numel() or bool((b.diff() <= 0).any()):
        raise LoaderError(
            f"{here}: byte_offsets must rise (each frame at least one byte) from 0 to the "
            f"{s.values.numel()} bytes; got {_ends(b)}"
        )


def _ends(offsets):
    values = offsets.tolist()
    return values if len(values) <= 8 else values[:4] + ["..."] + values[-3:]


def check_sorted_times(streams, where, error=LoaderError):
    """Times non-decreasing within each episode: one pass a stream, on the
    stream's device (a host read of one flag). ``error``: the exception
    raised (a LoaderError for a file, a ValueError for tensors handed in)."""
    for key, s in streams.items():
        gaps = s.times.diff()
        if gaps.numel() == 0:
            continue
        backwards = gaps < 0
        starts = s.offsets[1:-1]
        starts = starts[(starts > 0) & (starts < s.times.numel())]
        backwards[starts - 1] = False  # across an episode boundary times may fall
        if bool(backwards.any()):
            row = int(backwards.nonzero()[0, 0]) + 1
            episode = int(torch.searchsorted(s.offsets[1:].cpu(), row, right=True))
            raise error(
                f"{where}, stream {key!r}: times must be non-decreasing within an episode; "
                f"row {row} (episode {episode}) is {int(s.times[row])} ns, after "
                f"{int(s.times[row - 1])} ns"
            )


def verify_checksums(tensors, expected, where):
    """Each tensor's CRC-32 against the file's (``expected``: name -> CRC;
    the values' are checked per episode as they are read, checks.py)."""
    for name, crc in expected.items():
        if tensor_crc32(tensors[name]) != crc:
            raise LoaderError(f"{where}: {name} does not match its checksum: the file is corrupt")
