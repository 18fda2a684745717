"""Episode shards for data-parallel training: whole episodes go to ranks,
contiguous and balanced by frame count, so windows never cross ranks and
each rank holds only its own episodes."""

from dataclasses import dataclass

import torch

__all__ = ["Shard", "shard_ranges", "shard_parts"]


@dataclass(frozen=True)
class Shard:
    """Which part of a store this is: rank ``rank`` of ``world_size``, its
    episodes ``ranges[rank]`` of the whole store's, and per stream the
    whole store's per-episode sample counts (so every rank can count every
    other rank's anchors without a collective)."""

    rank: int
    world_size: int
    ranges: tuple  # ((first, end), ...) episode ranges, one a rank
    counts: dict  # key -> (E_whole,) int64 samples per episode, on the host


def shard_ranges(lengths, world_size):
    """Contiguous episode ranges, one a rank, each with about 1/world_size of
    the frames (``lengths``: frames per episode) and at least one episode."""
    lengths = torch.as_tensor(lengths, dtype=torch.int64).cpu()
    E = lengths.numel()
    if not isinstance(world_size, int) or isinstance(world_size, bool) or world_size < 1:
        raise ValueError(f"shard: world_size must be a positive int; got {world_size!r}")
    if E < world_size:
        raise ValueError(f"shard: {E} episodes cannot give each of {world_size} ranks one")
    cumulative = lengths.cumsum(0).double()
    total = float(cumulative[-1]) if E else 0.0
    bounds = [0]
    for k in range(1, world_size):
        # The first episode boundary at or past k/world_size of the frames,
        # leaving at least one episode for this rank and each one after it.
        cut = int(torch.searchsorted(cumulative, total * k / world_size)) + 1
        bounds.append(min(max(cut, bounds[-1] + 1), E - (world_size - k)))
    bounds.append(E)
    return tuple((bounds[r], bounds[r + 1]) for r in range(world_size))


def check_rank(rank, world_size):
    if not isinstance(rank, int) or isinstance(rank, bool) or not 0 <= rank < max(world_size, 1):
        raise ValueError(f"shard: rank must be an int in [0, {world_size}); got {rank!r}")


def shard_parts(streams, episodes, rank, world_size):
    """Rank ``rank``'s part of a whole store's ``streams`` and ``episodes``:
    (streams, episodes, Shard), views of the given tensors (nothing is
    copied, so a mapped store reads only these bytes when they are used)."""
    check_rank(rank, world_size)
    ranges = shard_ranges(episodes["length"], world_size)
    first, end = ranges[rank]
    part, counts = {}, {}
    for key, s in streams.items():
        offsets = s.offsets.cpu()
        counts[key] = offsets.diff()
        lo, hi = int(offsets[first]), int(offsets[end])
        byte_offsets, values = None, s.values[lo:hi]
        if s.encoding is not None:  # the episodes' bytes, their offsets from 0
            byte_offsets = s.byte_offsets[lo : hi + 1]
            begin = int(byte_offsets[0])
            values = s.values[begin : int(byte_offsets[-1])]
            byte_offsets = byte_offsets - begin
        part[key] = s.with_values(
            values, s.times[lo:hi], s.offsets[first : end + 1] - lo, dict(s.stats), byte_offsets
        )
    rows = {k: v[first:end] for k, v in episodes.items()}
    return part, rows, Shard(rank, world_size, ranges, counts)
