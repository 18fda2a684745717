"""Loaders: one small module per format, each a thin adapter that reads the
format with its own library and streams episodes into
``EpisodeStore.from_episodes``."""

from .bags import load_bag
from .calvin import load_calvin
from .lerobot import load_lerobot
from .mcap_logs import load_mcap
from .rlds import load_rlds
from .robomimic import load_robomimic
from .zarr import load_zarr

__all__ = [
    "load_bag",
    "load_calvin",
    "load_lerobot",
    "load_mcap",
    "load_rlds",
    "load_robomimic",
    "load_zarr",
]
