"""LeRobot v3 datasets (pyarrow for the tables, PyAV for the videos).

Layout: ``meta/info.json``; ``meta/episodes/chunk-*/file-*.parquet`` (one row
per episode: where its rows and video segments are); ``meta/tasks.parquet``;
``data/chunk-*/file-*.parquet`` (many episodes per file, each feature a
column, ``timestamp`` in float32 seconds from the episode's start);
``videos/<key>/chunk-*/file-*.mp4`` (many episodes per file, each the
segment from ``from_timestamp`` to ``to_timestamp``).
"""

import contextlib
import functools
import glob
import json
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..frames import EncodedFrames
from ._common import LoaderError, keeps_encoded, packed_store, reading, skipping
from ._images import decode_images, encoded_codec, verify_frames
from ._lerobot_tables import (
    BOOKKEEPING,
    column,
    columns_as,
    dataset_file,
    episode_rows,
    episode_rows_of_meta,
    read_parquet,
    seconds_as_ns,
)

__all__ = ["load_lerobot"]

_VIDEO_COLUMNS = ("chunk_index", "file_index", "from_timestamp", "to_timestamp")


@contextlib.contextmanager
def _ffmpeg_errors(where, name):
    import av

    try:
        yield
    except av.error.FFmpegError as e:
        raise LoaderError(f"{where}: cannot read {name}: {type(e).__name__}: {e}") from e


def _decode_segment(path, start, end, where):
    """The frames of one video file between start and end (seconds), each
    (H, W, 3) uint8, and their times from the file's start."""
    import av

    tolerance = 1e-4  # LeRobot's tolerance for timestamps
    frames, times = [], []
    name = os.path.basename(path)
    # FFmpeg's ENOMEM for a size a damaged file claims is av.MemoryError, a
    # MemoryError too, which reading() lets through: caught here.
    with reading(where, name), _ffmpeg_errors(where, name):
        with av.open(path) as container:
            if not container.streams.video:  # a truncated mp4 can lose its stream table
                raise LoaderError(f"{where}: {name} holds no video stream (truncated?)")
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
    if any(b < a for a, b in zip(times, times[1:])):
        i = next(k for k, (a, b) in enumerate(zip(times, times[1:])) if b < a)
        raise LoaderError(f"{where}: {name}: frame times go backwards at frame {i + 1}")
    return frames, times


def _image_frames(cells, shape, root, keeps, where, verify=False):
    """The frames of an image feature from cells ``{"bytes", "path"}`` as the
    parquet holds them (PNG bytes, or a path under root): ``EncodedFrames``
    of the bytes where every cell holds bytes of one codec and
    ``keeps(codec)`` (with ``verify``, each decoded once here: see
    ``verify_frames``), else decoded to (n, H, W, C) uint8; ``shape`` is the
    feature's (H, W, C)."""
    if len(shape) != 3 or shape[-1] not in (1, 3, 4):
        raise LoaderError(f"{where}: an image feature's shape must be (H, W, 1|3|4); got {shape}")
    images = []
    for i, cell in enumerate(cells):
        data = cell.get("bytes") if isinstance(cell, dict) else cell
        path = cell.get("path") if isinstance(cell, dict) else None
        if data is None and not path:
            raise LoaderError(f"{where}, frame {i}: the image has neither bytes nor a path")
        images.append(data if data is not None else os.path.join(root, path))
    in_bytes = all(isinstance(image, bytes) for image in images)
    codec = encoded_codec(images) if in_bytes else None
    if codec is not None and keeps(codec):
        kept = EncodedFrames(images, codec, shape)
        if verify:
            verify_frames(kept, f"{where}, ")
        return kept
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
    frames="raw",
    jpeg_quality=90,
    resize=None,
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
        frames: how image and video features are kept: ``"raw"``, ``"jpeg"``
            or ``"png"``, or a dict key -> one of them (see
            ``EpisodeStore.from_episodes``). Image features already in the
            codec asked for, with no ``resize``, are kept byte for byte.
        jpeg_quality: JPEG's quality for frames encoded at load, 1 to 100.
        resize: (H, W) every image and video feature is resized to, once,
            at load.
        progress: show a progress bar.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read.

    Each episode's video segment is decoded once, start to end (AV1, H.264 or
    anything the installed FFmpeg reads), as (n, H, W, 3) uint8 frames with
    their own timestamps. Image features (``use_videos=False``: PNG in the
    parquet) decode with PIL to (n, H, W, C) uint8, unless ``frames`` keeps
    their PNG bytes as they are (those are decoded once by ``from_episodes``,
    for their statistics: one that does not decode is a LoaderError naming
    the data file, episode, key and frame; with ``skip_bad`` they are
    decoded once more, as the episode is read, so that such a frame skips
    its episode). Table features keep LeRobot's names and shapes, on the
    ``timestamp`` clock.
    Episodes load in ``episode_index`` order; tasks are the episode's first
    task.

    Host memory: one data file, the ``threads + 1`` episodes in flight, and
    (without ``device``) the store being built.

    Checked, each failure a LoaderError naming the file (and the episode,
    column or key): every pyarrow and PyAV error (a truncated parquet or
    mp4, a lost video stream); the CRC of every parquet page that carries
    one (LeRobot's writer adds none: pyarrow's ``write_page_checksum=True``
    does); the columns read are present, of their kind and without nulls;
    meta/episodes holds info.json's ``total_episodes``, each once, with
    ``length`` matching its rows; each episode's data rows carry its
    ``index``, ``episode_index`` and ``frame_index``, and their ``timestamp``
    never goes back; a video segment holds at least the table's frames, in
    time order. Not checkable: a changed byte inside a page without a CRC, a
    video's frame data (lossy codecs carry no checksum: a flip shows as
    artefacts) and info.json's ``fps``. The checks cost nothing measurable.
    """
    where = f"load_lerobot({root})"
    if video_backend != "pyav":
        raise ValueError(f"{where}: video_backend must be 'pyav'; got {video_backend!r}")
    info_path = os.path.join(root, "meta", "info.json")
    try:
        with open(info_path) as f:
            info = json.load(f)
    except (OSError, ValueError) as e:  # ValueError: not JSON, or not UTF-8
        raise LoaderError(f"{where}: cannot read meta/info.json: {e}") from e
    if not isinstance(info, dict) or not str(info.get("codebase_version", "")).startswith("v3"):
        version = info.get("codebase_version") if isinstance(info, dict) else None
        raise LoaderError(f"{where}: codebase_version {version!r} is not v3")
    with reading(where, "meta/info.json's fps, features and paths"):
        fps, features = info["fps"], info["features"]
        keys = list(keys) if keys is not None else [k for k in features if k not in BOOKKEEPING]
        for key in keys:
            if key not in features:
                raise LoaderError(
                    f"{where}: no feature {key!r}; the features are {sorted(features)}"
                )
        videos = [k for k in keys if features[k]["dtype"] == "video"]
        for key in keys:
            if key not in videos:
                tuple(features[key]["shape"])  # a KeyError or TypeError here, not mid-load
    for name, used in (("video_path", videos), ("data_path", len(videos) < len(keys))):
        if used and not isinstance(info.get(name), str):
            raise LoaderError(f"{where}: meta/info.json has no {name}")
    episode_files = sorted(
        glob.glob(os.path.join(root, "meta", "episodes", "chunk-*", "file-*.parquet"))
    )
    if not episode_files:
        raise LoaderError(f"{where}: no meta/episodes/chunk-*/file-*.parquet")
    episodes = episode_rows_of_meta(root, episode_files, keys, videos, info, where)
    data_cache = {}
    data_files = {}  # episode_index -> its data file, for the errors of from_episodes

    def data_table(chunk, file):
        path = dataset_file(root, info, "data_path", where, chunk_index=chunk, file_index=file)
        if path not in data_cache:
            data_cache.clear()  # one data file in memory at a time
            data_cache[path] = read_parquet(path, where, os.path.relpath(path, root))
        return path, data_cache[path]

    def start(row, pool):
        """Reads the episode's table rows here, submits its decodes to the
        pool; returns the function that waits for them."""
        e = row["episode_index"]
        here = f"{where}, episode {e}"
        n = row["length"]
        out = {"episode_index": e, "length": n, "task": (row["tasks"] or [""])[0]}
        jobs = {}
        table_keys = [k for k in keys if k not in videos]
        if table_keys:
            path, table = data_table(row["data/chunk_index"], row["data/file_index"])
            name = os.path.relpath(path, root)
            types = {"index": "int", "episode_index": "int", "frame_index": "int"}
            types.update({"timestamp": "number", **dict.fromkeys(table_keys, "any")})
            columns_as(table, types, name, here)
            data_files[e] = name
            rows, times = episode_rows(table, row, f"{here}, {name}")
            for key in table_keys:
                feature = features[key]
                if feature["dtype"] == "image":
                    with reading(here, f"column {key!r}"):
                        cells = rows.column(key).to_pylist()
                    job = pool.submit(
                        _image_frames,
                        cells,
                        _image_shape(feature),
                        root,
                        lambda codec, key=key: keeps_encoded(frames, resize, key, codec),
                        f"{where}, {name}, episode {e}, key {key!r}",
                        skip_bad,
                    )
                    jobs[key] = (None, job, times)
                else:
                    with reading(here, f"column {key!r}"):
                        values = column(rows, key, n, tuple(feature["shape"]), here)
                    out[key] = (values, times)
        for key in videos:
            path = dataset_file(
                root,
                info,
                "video_path",
                here,
                video_key=key,
                chunk_index=row[f"videos/{key}/chunk_index"],
                file_index=row[f"videos/{key}/file_index"],
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
                out[key] = (np.stack(frames), seconds_as_ns(frame_times, f"{here}, key {key!r}"))
            return out

        return finish

    pool = ThreadPoolExecutor(max_workers=max(1, threads))

    def place(episode):
        """How an error names an episode being packed: its data file too."""
        e = episode["episode_index"]
        return f"{where}, " + (f"{data_files[e]}, " if e in data_files else "") + f"episode {e}"

    try:
        items = _read_ahead(episodes, lambda r: start(r, pool), depth=max(1, threads))
        return packed_store(
            where,
            skipping(items, skip_bad, where),
            place=place,
            fps=fps,
            progress=progress,
            total=len(episodes),
            device=device,
            frames=frames,
            jpeg_quality=jpeg_quality,
            resize=resize,
        )
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
