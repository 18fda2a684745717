"""Pure-PyTorch reference implementations of robocache's operators.

These have exactly the semantics of the compiled operators, written with
ordinary torch ops (searchsorted, gather, arithmetic) and, for the windows,
plain Python. They are the oracle of the tests, the plain-PyTorch peer of
``python -m robocache.bench``, and what the seed API's ``backend="pytorch"``
runs; nothing in ``robocache.ops`` or ``robocache.data`` uses them. They are
differentiable through ordinary autograd.
"""

from .augment import augment
from .draws import draw_mixture
from .interp import Location, blend, fuse, locate, resample
from .voxelize import voxelize
from .windows import anchor_windows, sample_windows

__all__ = [
    "Location",
    "anchor_windows",
    "augment",
    "blend",
    "draw_mixture",
    "fuse",
    "locate",
    "resample",
    "sample_windows",
    "voxelize",
]
