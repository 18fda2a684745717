"""robocache: preprocessing operators for robot learning, as PyTorch custom ops.

Importing robocache loads its compiled library (``robocache._ops``), which
registers the ``torch.ops.robocache.*`` operators with the dispatcher, then
their Python faces (``robocache.ops``). ``robocache.data`` takes a dataset to
training batches on the GPU; ``robocache.reference`` is the pure-PyTorch
oracle; ``robocache.legacy`` keeps the seed API.
"""

from . import _ops, reference  # noqa: F401  (_ops loads the library)
from ._ops import is_cuda_available
from ._version import __version__  # noqa: F401
from .legacy import fuse_multimodal, resample_trajectories, voxelize_point_cloud
from .ops import (
    anchor_windows,
    augment,
    draw_mixture,
    fuse,
    fuse_columns,
    resample,
    sample_windows,
    voxelize,
)

__all__ = [
    "anchor_windows",
    "augment",
    "draw_mixture",
    "fuse",
    "fuse_columns",
    "fuse_multimodal",
    "is_cuda_available",
    "reference",
    "resample",
    "resample_trajectories",
    "sample_windows",
    "voxelize",
    "voxelize_point_cloud",
]
