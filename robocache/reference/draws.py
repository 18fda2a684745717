"""The pure-PyTorch reference of ``robocache.draw_mixture``: SplitMix64's
finaliser in int64 tensor arithmetic, then a search of the weights' running
sums."""

import torch

_GOLDEN = -0x61C8864680B583EB  # 0x9E3779B97F4A7C15 as int64
_MIX1 = -0x40A7B892E31B1A47  # 0xBF58476D1CE4E5B9
_MIX2 = -0x6B2FB644ECCEEE15  # 0x94D049BB133111EB


def _shift(x, bits):
    """x >> bits as unsigned 64-bit (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform(keys, stream):
    """Float64 numbers in [0, 1), one per int64 key, for ``stream`` 0 (the
    store) or 1 (the anchor)."""
    z = (keys * 2 + stream) * _GOLDEN
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    z = z ^ _shift(z, 31)
    return _shift(z, 11).double() * (1.0 / (1 << 53))


def draw_mixture(base, batch_size, weights, counts):
    """What ``robocache.draw_mixture`` computes (valid weights and counts),
    bit for bit on CPU tensors."""
    keys = base.reshape(1) + torch.arange(batch_size, device=base.device)
    w = weights.clamp(min=0)
    running = torch.cumsum(w, 0)
    # The weights' sum as the op makes it: added in order (running[-1], on
    # the CPU, whose cumsum adds in order), not torch.sum's order.
    store = torch.searchsorted(running, uniform(keys, 0) * running[-1], right=True)
    positive = (w > 0).nonzero().view(-1)
    store = torch.minimum(store, positive[-1])  # rounding past the end
    # A zero weight's store is never drawn: its running sum equals the one before.
    count = counts[store]
    within = torch.minimum((uniform(keys, 1) * count).long(), count - 1)
    starts = torch.cumsum(counts, 0) - counts
    return store, starts[store] + within
