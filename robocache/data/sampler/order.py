"""Which anchors a batch holds: the anchor rows of a store, each epoch's
permutation, and the ranks of data-parallel training.

Every rank draws the same number of batches an epoch (DistributedDataParallel
hangs otherwise), and reaches every decision from the same inputs, with no
collective call: a whole store's permutation is the same on every rank and
dealt out; a shard's sizes are known to every rank (``Shard.counts``).
"""

import math
import numbers

import torch

from ..time import ns_to_seconds

_WHERE = "WindowSampler"


def resolve_ranks(rank, world_size, store):
    """(rank, world_size): as given, else torch.distributed's, else the
    store's shard's, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError(f"{_WHERE}: give both rank and world_size, or neither")
    if rank is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif store.shard is not None:
            rank, world_size = store.shard.rank, store.shard.world_size
        else:
            rank, world_size = 0, 1
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, numbers.Integral) or isinstance(value, bool):
            raise ValueError(f"{_WHERE}: {name} must be an int; got {value!r}")
    rank, world_size = int(rank), int(world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"{_WHERE}: rank must be in [0, {world_size}); got {rank}")
    shard = store.shard
    if shard is not None and (shard.rank, shard.world_size) != (rank, world_size):
        raise ValueError(
            f"{_WHERE}: the store is rank {shard.rank}'s shard of {shard.world_size}, "
            f"but this sampler is rank {rank} of {world_size}"
        )
    return rank, world_size


def row_episodes(offsets):
    """Each row's episode of a packed stream with these offsets."""
    episodes = torch.arange(offsets.numel() - 1, device=offsets.device)
    return torch.repeat_interleave(episodes, offsets.diff())


def row_tables(episodes, offsets, times, row_episode):
    """Per anchor row, gathered with the windows: its episode_index,
    frame_index and task_index (from the store's ``episodes`` tables), and
    its time from the episode's first frame in seconds (float32, as
    LeRobot's timestamp), on the device of ``offsets``."""
    first_row = offsets[:-1][row_episode]
    tables = {k: episodes[k].to(offsets.device) for k in ("episode_index", "task_index")}
    return {
        "episode_index": tables["episode_index"][row_episode],
        "frame_index": torch.arange(times.numel(), device=offsets.device) - first_row,
        "task_index": tables["task_index"][row_episode],
        "timestamp": ns_to_seconds(times - times[first_row]),
    }


def anchor_rows(offsets, row_episode, drop_n_last_frames):
    """Rows of the anchor stream that may anchor a window, on its device
    (``row_episode``: each row's episode)."""
    rows = torch.arange(row_episode.numel(), device=offsets.device)
    if drop_n_last_frames:
        rows = rows[rows < offsets[1:][row_episode] - drop_n_last_frames]
    return rows


def per_rank(store, anchor, drop_n_last_frames, num_anchors, world_size, drop_last):
    """Anchors each rank visits an epoch: the largest rank's count, the others
    wrapping around their permutation (or, with drop_last, the smallest's).
    A shard whose rank has no anchors raises on every rank alike."""
    if store.shard is None:  # replicated: the epoch's permutation is split
        return num_anchors // world_size if drop_last else math.ceil(num_anchors / world_size)
    counts = store.shard.counts[anchor]
    per_episode = (counts - drop_n_last_frames).clamp(min=0)
    totals = [int(per_episode[a:b].sum()) for a, b in store.shard.ranges]
    empty = [r for r, n in enumerate(totals) if n == 0]
    if empty:
        raise ValueError(
            f"{_WHERE}: rank {empty[0]}'s shard has no anchor frames (stream {anchor!r}"
            f"{', after dropping the last frames' if drop_n_last_frames else ''}), so no rank "
            f"can draw as many batches as the others (anchors per rank: {totals}); use fewer "
            "ranks, or the whole store on every rank (load it without shard=)"
        )
    return min(totals) if drop_last else max(totals)


def check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise ValueError(f"{_WHERE}: seed must be an int; got {seed!r}")
    return int(seed)


def epoch_generator(anchors, seed, epoch, rank, sharded):
    """The generator of an epoch's permutation: fixed by (seed, epoch), and by
    rank for a shard (each rank permutes its own episodes' anchors)."""
    generator = torch.Generator(device=anchors.device)
    value = seed * 1_000_003 + epoch
    if sharded:
        value = value * 1_000_033 + rank
    generator.manual_seed(value % (2**63))
    return generator


def epoch_order(anchors, n, rank, world_size, sharded, generator):
    """This rank's n anchors of an epoch: its own, permuted and wrapped
    (sharded), or every rank's permutation wrapped to n * world_size and
    dealt out (replicated). generator None: no shuffling."""

    def permuted(x):
        if generator is None:
            return x
        permutation = torch.randperm(x.numel(), generator=generator, device=x.device)
        if x.device.type == "cpu":
            # On the host, gathered on this thread: torch's indexing would
            # spread it over the intra-op threads, which wait for cores
            # beside a training loop and the frame decoder's threads.
            return torch.from_numpy(x.numpy()[permutation.numpy()])
        return x[permutation]

    def fit(x, m):
        return x[:m] if x.numel() >= m else x.repeat(math.ceil(m / x.numel()))[:m]

    if sharded:
        return fit(permuted(anchors), n)
    order = permuted(anchors)
    if world_size == 1:
        return order[:n]
    return fit(order, n * world_size)[rank::world_size].contiguous()


def anchor_index(index, device):
    """``batch_at``'s index as an int64 tensor on the store's device: integer
    rows only (no floats, no bools, which torch would read as 0/1 rows), in
    one dimension (a nested list or a matrix is not a batch of rows)."""
    if torch.is_tensor(index):
        if index.dtype == torch.bool or index.is_floating_point() or index.is_complex():
            raise TypeError(
                f"{_WHERE}.batch_at: index must hold integer rows; got a {index.dtype} tensor"
            )
        _check_rows_shape(tuple(index.shape))
        return index.to(device=device, dtype=torch.int64).reshape(-1)
    import numpy as np

    try:
        array = np.asarray(index)
    except ValueError as e:  # ragged nesting
        raise ValueError(
            f"{_WHERE}.batch_at: index must be a (B,) sequence of rows; got {index!r} ({e})"
        ) from None
    if array.dtype.kind not in "iu" and not (array.size == 0 and array.dtype.kind == "f"):
        raise TypeError(
            f"{_WHERE}.batch_at: index must hold integer rows; got {array.dtype} values "
            f"{array.reshape(-1)[:4].tolist()}"
        )
    _check_rows_shape(array.shape)
    return torch.as_tensor(array.astype(np.int64).reshape(-1), device=device)


def _check_rows_shape(shape):
    if len(shape) > 1:
        raise ValueError(
            f"{_WHERE}.batch_at: index must be (B,) rows, one dimension; got shape {shape}"
        )


def default_anchor(store):
    """The key with the most samples in the whole store (so that every shard
    picks alike); ties go to the first key."""

    def samples(key):
        if store.shard is not None:
            return int(store.shard.counts[key].sum())
        return store[key].num_samples

    return max(store.keys(), key=samples)


class StepCursor:
    """A table of per-step inputs on the device and the step read next, also
    on the device: ``take(size)`` reads ``table[step * stride :][:size]``
    and advances the step, so that a CUDA graph holding it needs nothing
    from the host a batch. ``load`` puts a new table in place (an epoch's
    order, a run of a mixture's step keys) and starts again at step 0."""

    def __init__(self, length, stride, device):
        self.table = torch.zeros(max(1, length), dtype=torch.int64, device=device)
        self.step = torch.zeros(1, dtype=torch.int64, device=device)
        self.stride = stride
        self.ramps = {}

    def load(self, values):
        self.table[: values.numel()].copy_(values, non_blocking=True)
        self.step.zero_()

    def take(self, size):
        ramp = self.ramps.get(size)
        if ramp is None:
            ramp = self.ramps[size] = torch.arange(size, device=self.table.device)
        rows = self.table[torch.add(ramp, self.step, alpha=self.stride)]
        self.step.add_(1)
        return rows


class EpochParts:
    """An epoch's batches' anchors, each batch's sliced when asked for:
    ``parts[i]`` holds the anchors of batch i, of ``size(i)`` rows (the
    batch size, the last batch's maybe fewer); ``anchors`` those of every
    batch, in order."""

    def __init__(self, anchors, batch_size, count):
        self.anchors = anchors[: count * batch_size]
        self.batch_size, self.count = batch_size, count

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        if not 0 <= i < self.count:
            raise IndexError(f"batch {i} of an epoch of {self.count}")
        return self.anchors[i * self.batch_size : (i + 1) * self.batch_size]

    def size(self, i):
        return min(self.batch_size, self.anchors.numel() - i * self.batch_size)
