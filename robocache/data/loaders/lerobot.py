"""LeRobot v3 datasets (pyarrow for the tables, PyAV for the videos).

Layout: ``meta/info.json``; ``meta/episodes/chunk-*/file-*.parquet`` (one row
per episode: where its rows and video segments are); ``meta/tasks.parquet``;
``data/chunk-*/file-*.parquet`` (many episodes per file, each feature a
column, ``timestamp`` in float32 seconds from the episode's start);
``videos/<key>/chunk-*/file-*.mp4`` (many episodes per file, each the
segment from ``from_timestamp`` to ``to_timestamp``).
"""

import functools
import glob
import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..store import EpisodeStore
from ..time import times_to_ns
from ._common import LoaderError, skipping
from ._images import decode_images

__all__ = ["load_lerobot"]

_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


def _ns(seconds, where):
    """LeRobot's float32 seconds (and PyAV's frame times) as int64 ns: each
    value as its float64 reading, rounded to ns."""
    seconds = torch.from_numpy(np.asarray(seconds, dtype=np.float64))
    try:
        return times_to_ns(seconds, where).numpy()
    except ValueError as e:
        raise LoaderError(str(e)) from e


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


def _decode_images(cells, shape, root, where):
    """The frames of an image feature: cells ``{"bytes", "path"}`` as the
    parquet holds them (PNG bytes, or a path under root), decoded to
    (n, H, W, C) uint8; ``shape`` is the feature's (H, W, C)."""
    if len(shape) != 3 or shape[-1] not in (1, 3, 4):
        raise LoaderError(f"{where}: an image feature's shape must be (H, W, 1|3|4); got {shape}")
    images = []
    for i, cell in enumerate(cells):
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        path = cell.get("path") if isinstance(cell, dict) else None
        if data is None and not path:
            raise LoaderError(f"{where}, frame {i}: the image has neither bytes nor a path")
        images.append(data if data is not None else os.path.join(root, path))
    return decode_images(images, shape, where)


def _image_shape(feature):
    """An image feature's (H, W, C), whichever order info.json names."""
    shape, names = list(feature["shape"]), feature.get("names") or []
    if len(shape) == 3 and names and str(names[0]).startswith("channel"):
        shape = shape[1:] + shape[:1]
    return tuple(shape)


def _read_ahead(rows, start, depth):
    """(name, finish) for each row; each row is started (its reads and
    decodes submitted) up to ``depth`` rows before it is finished."""
    pending = deque()
    for row in rows:
        try:
            finish = start(row)
        except LoaderError as e:
            finish = functools.partial(_reraise, e)
        pending.append((f"episode {row['episode_index']}", finish))
        if len(pending) > depth:
            yield pending.popleft()
    yield from pending


def _reraise(error):
    raise error


def load_lerobot(
    root,
    keys=None,
    *,
    video_backend="pyav",
    threads=4,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of a LeRobot v3 dataset directory (no hub, no network).

    Args:
        root: the dataset's root (holding ``meta/info.json``).
        keys: features to load (default: every feature but the bookkeeping
            columns ``timestamp``, ``frame_index``, ``episode_index``,
            ``index``, ``task_index``).
        video_backend: ``"pyav"``.
        threads: decoding threads; episodes are read up to ``threads``
            ahead of the one being packed.
        progress: show a progress bar.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read.

    Each episode's video segment is decoded once, start to end (AV1, H.264 or
    anything the installed FFmpeg reads), as (n, H, W, 3) uint8 frames with
    their own timestamps. Image features (``use_videos=False``: PNG in the
    parquet) decode with PIL to (n, H, W, C) uint8. Table features keep
    LeRobot's names and shapes, on the ``timestamp`` clock. Episodes load in
    ``episode_index`` order; tasks are the episode's first task.

    Host memory: one data file, the ``threads + 1`` episodes in flight, and
    (without ``device``) the store being built.
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

    def start(row, pool):
        """Reads the episode's table rows here, submits its decodes to the
        pool; returns the function that waits for them."""
        e = row["episode_index"]
        here = f"{where}, episode {e}"
        n = row["length"]
        out = {"episode_index": e, "length": n, "task": (row.get("tasks") or [""])[0]}
        jobs = {}
        table_keys = [k for k in keys if k not in videos]
        if table_keys:
            table = data_table(row["data/chunk_index"], row["data/file_index"])
            first = table.column("index")[0].as_py()
            rows = table.slice(row["dataset_from_index"] - first, n)
            if rows.num_rows != n:
                raise LoaderError(f"{here}: the data file holds {rows.num_rows} of its {n} rows")
            times = _ns(rows.column("timestamp").to_numpy(), f"{here}, column 'timestamp'")
            for key in table_keys:
                feature = features[key]
                if feature["dtype"] == "image":
                    cells = rows.column(key).to_pylist()
                    job = pool.submit(
                        _decode_images, cells, _image_shape(feature), root, f"{here}, key {key!r}"
                    )
                    jobs[key] = (None, job, times)
                else:
                    out[key] = (_column(rows, key, n, tuple(feature["shape"]), here), times)
        for key in videos:
            path = os.path.join(
                root,
                info["video_path"].format(
                    video_key=key,
                    chunk_index=row[f"videos/{key}/chunk_index"],
                    file_index=row[f"videos/{key}/file_index"],
                ),
            )
            begin, end = row[f"videos/{key}/from_timestamp"], row[f"videos/{key}/to_timestamp"]
            job = pool.submit(_decode_segment, path, begin, end, f"{here}, key {key!r}")
            jobs[key] = (path, job, None)

        def finish():
            for key, (path, job, times) in jobs.items():
                if path is None:  # an image feature, on the table's clock
                    out[key] = (job.result(), times)
                    continue
                frames, frame_times = job.result()
                if len(frames) < n:
                    raise LoaderError(
                        f"{here}, key {key!r}: {os.path.basename(path)} holds {len(frames)} "
                        f"frames of the segment, the table {n} (a video shorter than its table)"
                    )
                out[key] = (np.stack(frames), _ns(frame_times, f"{here}, key {key!r}"))
            return out

        return finish

    pool = ThreadPoolExecutor(max_workers=max(1, threads))
    try:
        items = _read_ahead(episodes, lambda r: start(r, pool), depth=max(1, threads))
        return EpisodeStore.from_episodes(
            skipping(items, skip_bad, where),
            fps=fps,
            progress=progress,
            total=len(episodes),
            device=device,
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
