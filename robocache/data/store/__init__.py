"""The store: a dataset's episodes packed per stream (``PackedStream``), in
one container (``EpisodeStore``, store.py), built in one streaming pass
(build.py), kept on disk (format.py) and split between ranks (shards.py)."""

from .build import quantile_name
from .packed import PackedStream
from .shards import Shard, shard_ranges
from .store import EpisodeStore

__all__ = ["EpisodeStore", "PackedStream", "Shard", "quantile_name", "shard_ranges"]
