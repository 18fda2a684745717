"""A mixture's draws from (seed, step, rank): each window's store by weight,
then its anchor uniformly among that store's anchors.

Window ``i`` of a step has the key ``base + i``, ``base`` fixed by (seed,
step, rank); ``robocache.draw_mixture`` hashes each key into its draws in
one kernel, the same on the host and on a GPU, so that a CUDA graph holds
it and is fed one number a step."""

import torch

from ...ops import draw_mixture
from ..seeds import hashed


def step_base(seed, step, rank):
    """The key of window 0 of a step: a 62-bit number fixed by (seed, step, rank)."""
    return hashed(f"mixture,{seed},{step},{rank}", 62)


class Draws:
    """The tables the draws read, on one device: the weights, and each
    store's count of anchors and first position among all of them."""

    def __init__(self, weights, counts, device):
        for i, (w, n) in enumerate(zip(weights.tolist(), counts)):
            if w > 0 and n == 0:
                raise ValueError(f"Mixture: store {i} has weight {w} but no anchors")
        self.weights = weights.double().to(device)
        self.counts = torch.tensor(counts, dtype=torch.int64, device=device)
        self.starts = torch.cumsum(self.counts, 0) - self.counts

    def __call__(self, base, batch_size):
        """(store of each window, its anchor's position among all stores'
        anchors), each (batch_size,), for windows with keys ``base + i``:
        ``base`` an int, or a (1,) int64 tensor on the tables' device."""
        if not torch.is_tensor(base):
            base = torch.tensor([base], dtype=torch.int64, device=self.counts.device)
        return draw_mixture(base, batch_size, self.weights, self.counts)
