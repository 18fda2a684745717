"""robocache's operators, one module each: its documented wrapper, its
autograd and its vmap rules.

- :func:`resample` (``resample.py``): trajectories onto new timestamps;
- :func:`fuse`, :func:`fuse_columns` (``fuse.py``): several streams onto one timeline;
- :func:`voxelize` (``voxelize.py``): point clouds into dense grids;
- :func:`sample_windows`, :func:`anchor_windows` (``windows.py``): windows of packed streams;
- :func:`augment` (``augment.py``): per-window crops, rotations and colour jitter of frames;
- :func:`draw_mixture` (``draw_mixture.py``): each window's store and anchor in a weighted mixture.

The schemas and kernels are C++ (``csrc/``); ``robocache._ops`` loads them.
"""

from .augment import augment
from .draw_mixture import draw_mixture
from .fuse import fuse, fuse_columns
from .resample import resample
from .voxelize import voxelize
from .windows import anchor_windows, sample_windows

__all__ = [
    "anchor_windows",
    "augment",
    "draw_mixture",
    "fuse",
    "fuse_columns",
    "resample",
    "sample_windows",
    "voxelize",
]
