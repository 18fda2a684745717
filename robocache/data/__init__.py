"""robocache.data: from a dataset to a training batch on the GPU.

``EpisodeStore`` packs a dataset's episodes once (per stream: values, int64
nanosecond times, episode offsets) and keeps them on one device;
``WindowSampler`` cuts each batch's windows from it with
``robocache.sample_windows``, one launch per stream, with no worker
processes and no per-sample Python.
"""

from .loaders import (
    load_bag,
    load_calvin,
    load_lerobot,
    load_mcap,
    load_rlds,
    load_robomimic,
    load_zarr,
)
from .sampler import WindowSampler
from .store import EpisodeStore, PackedStream

__all__ = [
    "EpisodeStore",
    "PackedStream",
    "WindowSampler",
    "load_bag",
    "load_calvin",
    "load_lerobot",
    "load_mcap",
    "load_rlds",
    "load_robomimic",
    "load_zarr",
]
