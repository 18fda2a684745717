"""A mixture's draws from (seed, step, rank): each window's store by weight,
then its anchor uniformly among that store's anchors.

Each window's numbers come from a counter-based hash (SplitMix64) of a key,
``base + window``, in int64 tensor arithmetic: the same draws on the host
and on a GPU, computed by kernels, so that they can be captured in a CUDA
graph and fed one number a step."""

import hashlib

import torch

_GOLDEN = -0x61C8864680B583EB  # 0x9E3779B97F4A7C15 as int64
_MIX1 = -0x40A7B892E31B1A47  # 0xBF58476D1CE4E5B9
_MIX2 = -0x6B2FB644ECCEEE15  # 0x94D049BB133111EB


def hashed(text, bits):
    """A ``bits``-bit number fixed by ``text`` (SHA-256): the seed of one
    step's draws, from (seed, step, rank, ...)."""
    digest = hashlib.sha256(text.encode()).digest()
    return int.from_bytes(digest[:8], "little") >> (64 - bits)


def step_base(seed, step, rank):
    """The key of window 0 of a step: a 62-bit number fixed by (seed, step, rank)."""
    return hashed(f"mixture,{seed},{step},{rank}", 62)


def _shift(x, bits):
    """x >> bits as unsigned 64-bit (torch shifts int64 arithmetically)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def uniform(keys, stream):
    """Float64 numbers in [0, 1), one per key, for ``stream`` 0 or 1 (or a
    tensor of streams that broadcasts with ``keys``)."""
    z = (keys * 2 + stream) * _GOLDEN
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    z = z ^ _shift(z, 31)
    return _shift(z, 11).double() * (1.0 / (1 << 53))


class Draws:
    """The tables the draws read, on one device: the weights' running sums,
    and each store's first position and count among ``anchors``."""

    def __init__(self, weights, counts, device):
        self.cumulative = torch.cumsum(weights.double(), 0).to(device)
        self.counts = torch.tensor(counts, dtype=torch.int64, device=device)
        starts = [0]
        for n in counts[:-1]:
            starts.append(starts[-1] + n)
        self.starts = torch.tensor(starts, dtype=torch.int64, device=device)
        self.last = len(counts) - 1
        self.streams = torch.tensor([0, 1], device=device)

    def __call__(self, keys):
        """(store of each window, anchor position within its store), for
        ``keys`` (B,) int64 on the tables' device."""
        u = uniform(keys.unsqueeze(1), self.streams)  # (B, 2): one pass for both
        store = torch.searchsorted(self.cumulative, u[:, 0].contiguous(), right=True)
        store = store.clamp_(max=self.last)
        count = self.counts[store]
        within = (u[:, 1] * count).long()
        return store, torch.minimum(within, count - 1)
