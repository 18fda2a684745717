"""robocache.data: from a dataset to a training batch on the GPU.

- ``EpisodeStore`` (store/) packs a dataset's episodes once, per stream:
  values, int64 nanosecond times (time.py) and episode offsets;
- the loaders (loaders/) read each format with its own library into one;
- ``WindowSampler`` (sampler/) cuts each batch's windows from it with one
  ``robocache.anchor_windows`` launch, with no worker processes and no
  per-sample Python;
- synthetic.py makes multi-rate episodes for demos, tests and benchmarks.

Nothing flows backwards: the loaders know the store, the sampler knows the
store and the operators, and neither the store nor the operators know them.
"""

from .augment import Augment
from .errors import LoaderError
from .loaders import (
    load_bag,
    load_calvin,
    load_lerobot,
    load_mcap,
    load_rlds,
    load_robomimic,
    load_zarr,
)
from .mixture import Mixture
from .sampler import WindowSampler
from .store import EpisodeStore, PackedStream

__all__ = [
    "Augment",
    "EpisodeStore",
    "LoaderError",
    "Mixture",
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
