"""``robocache.draw_mixture``: each window's store and anchor in a weighted
mixture of stores, drawn from a key per window.

The wrapper over ``torch.ops.robocache.draw_mixture``. The draws are a
counter-based hash of the key, so the same keys draw the same on the CPU
and on every GPU, in one kernel that a CUDA graph can hold (the mixture
sampler feeds it one number a step). Integer outputs: no autograd.
"""

import numbers

import torch

from .._ops import OPS, check_tensor, require_kernels

_OP = "robocache.draw_mixture"


def draw_mixture(base, batch_size, weights, counts):
    """Draws ``batch_size`` windows: for each, a store by weight, then an
    anchor uniformly among that store's anchors.

    Args:
        base: (1,) int64, the key of window 0; window ``i``'s key is
            ``base + i`` (wrapping as int64 does). A tensor, so that a
            captured call reads a new key each replay.
        batch_size: how many windows (>= 0).
        weights: (S,) float64 on ``base``'s device, >= 0 and not all 0:
            store ``s`` is drawn with probability ``weights[s] / weights.sum()``.
        counts: (S,) int64 on that device, each store's anchors (> 0 where
            its weight is); the stores' anchors lie back to back.

    Returns:
        ``(store, position)``, each (batch_size,) int64: the drawn store, and
        the anchor's index among all stores' anchors (``position -
        counts[:store].sum()`` is its index within the store).

    The CPU checks the weights' and counts' values; a CUDA call reads none
    on the host (weights all 0 draw store -1; a drawn store without anchors
    gives position -1).
    """
    for name, t in (("base", base), ("weights", weights), ("counts", counts)):
        check_tensor(t, name, _OP)
    require_kernels(_OP, base, weights, counts)
    if not isinstance(batch_size, torch.SymInt) and (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, numbers.Integral)
        or batch_size < 0
    ):
        raise ValueError(f"{_OP}: batch_size must be an int >= 0; got {batch_size!r}")
    return OPS.draw_mixture(base, batch_size, weights, counts)
