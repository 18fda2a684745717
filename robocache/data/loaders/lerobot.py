"""LeRobot v3 datasets (pyarrow for the tables, PyAV for the videos).

Layout: ``meta/info.json``; ``meta/episodes/chunk-*/file-*.parquet`` (one row
per episode: where its rows and video segments are); ``meta/tasks.parquet``;
``data/chunk-*/file-*.parquet`` (many episodes per file, each feature a
column, ``timestamp`` in float32 seconds from the episode's start);
``videos/<key>/chunk-*/file-*.mp4`` (many episodes per file, each the
segment from ``from_timestamp`` to ``to_timestamp``).
"""

import glob
import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..store import EpisodeStore
from ._common import LoaderError, skipping

__all__ = ["load_lerobot"]

_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _ns(seconds):
    return np.round(np.asarray(seconds, dtype=np.float64) * 1e9).astype(np.int64)


def _column(table, name, n, shape, where):
    """A column of fixed-size lists (or scalars) as an (n, *shape) array."""
    import pyarrow.types as pat

    flat = table.column(name).combine_chunks()
    while (
        pat.is_list(flat.type) or pat.is_fixed_size_list(flat.type) or pat.is_large_list(flat.type)
    ):
        flat = flat.flatten()
    values = flat.to_numpy(zero_copy_only=False)
    try:
        return values.reshape(n, *shape)
    except ValueError as e:
        raise LoaderError(
            f"{where}, key {name!r}: {values.size} values do not make {n} rows of {shape}"
        ) from e


def _decode_segment(path, start, end, where):
    """The frames of one video file between start and end (seconds), each
    (H, W, 3) uint8, and their times from the file's start."""
    import av

    tolerance = 1e-4  # LeRobot's tolerance for timestamps
    frames, times = [], []
    try:
        with av.open(path) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            if start > 0:
                container.seek(int(start / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                t = float(frame.time)
                if t < start - tolerance:
                    continue
                if t >= end - tolerance:
                    break
                frames.append(frame.to_ndarray(format="rgb24"))
                times.append(t - start)
    except (av.error.FFmpegError, OSError) as e:
        raise LoaderError(f"{where}: cannot decode {path}: {e}") from e
    return frames, times


def load_lerobot(
    root, keys=None, *, video_backend="pyav", threads=4, progress=True, skip_bad=False
):
    """An EpisodeStore of a LeRobot v3 dataset directory (no hub, no network).

    Args:
        root: the dataset's root (holding ``meta/info.json``).
        keys: features to load (default: every feature but the bookkeeping
            columns ``timestamp``, ``frame_index``, ``episode_index``,
            ``index``, ``task_index``).
        video_backend: ``"pyav"``.
        threads: video segments decoded at once.
        skip_bad: skip episodes that fail a check (reported) instead of raising.

    Each episode's video segment is decoded once, start to end (AV1, H.264 or
    anything the installed FFmpeg reads), as (n, H, W, 3) uint8 frames with
    their own timestamps; table features keep LeRobot's names and shapes, on
    the ``timestamp`` clock. Episodes load in ``episode_index`` order; tasks
    are the episode's first task. Data files are read one at a time.
    """
    import pyarrow.parquet as pq

    where = f"load_lerobot({root})"
    if video_backend != "pyav":
        raise ValueError(f"{where}: video_backend must be 'pyav'; got {video_backend!r}")
    info_path = os.path.join(root, "meta", "info.json")
    try:
        with open(info_path) as f:
            info = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise LoaderError(f"{where}: cannot read meta/info.json: {e}") from e
    if not str(info.get("codebase_version", "")).startswith("v3"):
        raise LoaderError(f"{where}: codebase_version {info.get('codebase_version')!r} is not v3")
    fps, features = info["fps"], info["features"]
    keys = list(keys) if keys is not None else [k for k in features if k not in _BOOKKEEPING]
    for key in keys:
        if key not in features:
            raise LoaderError(f"{where}: no feature {key!r}; the features are {sorted(features)}")
    videos = [k for k in keys if features[k]["dtype"] == "video"]
    episode_files = sorted(
        glob.glob(os.path.join(root, "meta", "episodes", "chunk-*", "file-*.parquet"))
    )
    if not episode_files:
        raise LoaderError(f"{where}: no meta/episodes/chunk-*/file-*.parquet")
    episodes = sorted(
        (row for path in episode_files for row in pq.read_table(path).to_pylist()),
        key=lambda row: row["episode_index"],
    )
    data_cache = {}

    def data_table(chunk, file):
        path = os.path.join(root, info["data_path"].format(chunk_index=chunk, file_index=file))
        if path not in data_cache:
            data_cache.clear()  # one data file in memory at a time
            try:
                data_cache[path] = pq.read_table(path)
            except (OSError, ValueError) as e:
                raise LoaderError(f"{where}: cannot read {path}: {e}") from e
        return data_cache[path]

    def episode(row, pool):
        e = row["episode_index"]
        here = f"{where}, episode {e}"
        n = row["length"]
        out = {"episode_index": e, "length": n, "task": (row.get("tasks") or [""])[0]}
        table_keys = [k for k in keys if k not in videos]
        if table_keys:
            table = data_table(row["data/chunk_index"], row["data/file_index"])
            first = table.column("index")[0].as_py()
            rows = table.slice(row["dataset_from_index"] - first, n)
            if rows.num_rows != n:
                raise LoaderError(f"{here}: the data file holds {rows.num_rows} of its {n} rows")
            times = _ns(rows.column("timestamp").to_numpy())
            for key in table_keys:
                shape = tuple(features[key]["shape"])
                if features[key]["dtype"] == "image":
                    raise LoaderError(f"{here}, key {key!r}: image features are not supported yet")
                out[key] = (_column(rows, key, n, shape, here), times)
        jobs = {}
        for key in videos:
            path = os.path.join(
                root,
                info["video_path"].format(
                    video_key=key,
                    chunk_index=row[f"videos/{key}/chunk_index"],
                    file_index=row[f"videos/{key}/file_index"],
                ),
            )
            start, end = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
            jobs[key] = (
                path,
                pool.submit(_decode_segment, path, start, end, f"{here}, key {key!r}"),
            )
        for key, (path, job) in jobs.items():
            frames, times = job.result()
            if len(frames) < n:
                raise LoaderError(
                    f"{here}, key {key!r}: {os.path.basename(path)} holds {len(frames)} frames "
                    f"of the segment, the table {n} (a video shorter than its table)"
                )
            out[key] = (np.stack(frames), _ns(times))
        return out

    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        items = ((f"episode {r['episode_index']}", lambda r=r: episode(r, pool)) for r in episodes)
        store = EpisodeStore.from_episodes(
            skipping(items, skip_bad, where), fps=fps, progress=progress, total=len(episodes)
        )
    return store
