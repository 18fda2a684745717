"""Diffusion Policy replay buffers (zarr; zarr 3 reads the v2 stores):
``data/<key>`` arrays, time-major, and ``meta/episode_ends`` (cumulative)."""

import numpy as np

from ..store import EpisodeStore
from ._common import LoaderError, frame_times, skipping

__all__ = ["load_zarr"]


def load_zarr(path, fps, keys=None, *, progress=True, skip_bad=False, device=None):
    """An EpisodeStore of a replay buffer, one episode per ``episode_ends`` entry.

    Args:
        path: the .zarr directory (or any store zarr.open_group takes).
        fps: the rate the buffer was recorded at (frame k is at k / fps).
        keys: arrays under ``data/`` to load (default: all of them).
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Each episode's rows are read as one slice per key (chunked reads), so
    memory holds one episode at a time besides the store being built.
    """
    import zarr

    where = f"load_zarr({path})"
    try:
        root = zarr.open_group(str(path), mode="r")
    except Exception as e:  # zarr raises several types for a missing or foreign store
        raise LoaderError(f"{where}: cannot open as a zarr group: {e}") from e
    if "data" not in root or "meta/episode_ends" not in root:
        raise LoaderError(f"{where}: needs data/<key> arrays and meta/episode_ends")
    data = root["data"]
    ends = np.asarray(root["meta/episode_ends"][:], dtype=np.int64)
    if ends.ndim != 1 or (ends.size and (ends[0] < 0 or np.any(np.diff(ends) < 0))):
        raise LoaderError(
            f"{where}: meta/episode_ends must be non-decreasing and >= 0; got {ends[:8]}..."
        )
    available = sorted(name for name, _ in data.arrays())
    keys = list(keys) if keys is not None else available
    total = int(ends[-1]) if ends.size else 0
    for key in keys:
        if key not in available:
            raise LoaderError(f"{where}: no data/{key}; the arrays are {available}")
        rows = data[key].shape[0]
        if rows < total:
            raise LoaderError(
                f"{where}, key {key!r}: {rows} rows, but episode_ends reaches {total} (truncated?)"
            )
    starts = np.concatenate([[0], ends[:-1]])

    def episode(e):
        a, z = int(starts[e]), int(ends[e])
        out = {"episode_index": e, "length": z - a}
        for key in keys:
            try:
                values = data[key][a:z]
            except Exception as err:
                raise LoaderError(
                    f"{where}, episode {e}, key {key!r}: cannot be read: {err}"
                ) from err
            out[key] = (values, frame_times(z - a, fps, where))
        return out

    episodes = skipping(
        ((f"episode {e}", lambda e=e: episode(e)) for e in range(len(ends))), skip_bad, where
    )
    return EpisodeStore.from_episodes(
        episodes, fps=fps, progress=progress, total=len(ends), device=device
    )
