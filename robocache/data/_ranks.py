"""Ranks for WindowSampler: who this process is, and how many anchors each
rank visits an epoch, so that every rank draws the same number of batches
(DistributedDataParallel hangs otherwise) with no collective call."""

import math

import torch


def resolve(rank, world_size, store):
    """(rank, world_size): as given, else torch.distributed's, else the
    store's shard's, else (0, 1)."""
    if (rank is None) != (world_size is None):
        raise ValueError("WindowSampler: give both rank and world_size, or neither")
    if rank is None:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            rank, world_size = dist.get_rank(), dist.get_world_size()
        elif store.shard is not None:
            rank, world_size = store.shard.rank, store.shard.world_size
        else:
            rank, world_size = 0, 1
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"WindowSampler: {name} must be an int; got {value!r}")
    if not 0 <= rank < world_size:
        raise ValueError(f"WindowSampler: rank must be in [0, {world_size}); got {rank}")
    shard = store.shard
    if shard is not None and (shard.rank, shard.world_size) != (rank, world_size):
        raise ValueError(
            f"WindowSampler: the store is rank {shard.rank}'s shard of {shard.world_size}, "
            f"but this sampler is rank {rank} of {world_size}"
        )
    return rank, world_size


def per_rank(store, anchor, drop_n_last_frames, num_anchors, world_size, drop_last):
    """Anchors each rank visits an epoch: the largest rank's count, the others
    wrapping around their permutation (or, with drop_last, the smallest's)."""
    if store.shard is None:  # replicated: the epoch's permutation is split
        return num_anchors // world_size if drop_last else math.ceil(num_anchors / world_size)
    counts = store.shard.counts[anchor]
    per_episode = (counts - drop_n_last_frames).clamp(min=0)
    totals = [int(per_episode[a:b].sum()) for a, b in store.shard.ranges]
    return min(totals) if drop_last else max(totals)


def epoch_order(anchors, n, rank, world_size, sharded, generator):
    """This rank's n anchors of an epoch: its own, permuted and wrapped
    (sharded), or every rank's permutation wrapped to n * world_size and
    dealt out (replicated). generator None: no shuffling."""

    def permuted(x):
        if generator is None:
            return x
        return x[torch.randperm(x.numel(), generator=generator, device=x.device)]

    def fit(x, m):
        return x[:m] if x.numel() >= m else x.repeat(math.ceil(m / x.numel()))[:m]

    if sharded:
        return fit(permuted(anchors), n)
    order = permuted(anchors)
    if world_size == 1:
        return order[:n]
    return fit(order, n * world_size)[rank::world_size].contiguous()
