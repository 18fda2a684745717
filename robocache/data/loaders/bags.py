"""ROS bags and MCAP logs, read with rosbags (ROS 2 bags in sqlite3 or mcap
storage, ROS 1 ``.bag`` files): the real multi-rate case. A topic (with a
field path) becomes a stream on its own clock: the messages' ``header.stamp``
(acquisition time) or the log time.

What is checked: rosbags checks no CRC of mcap storage (from 0.11 it checks
each chunk's as it reads it, but not the summary's or the data section's),
so a bag's .mcap files are first checked with the mcap package, every CRC
they carry. sqlite3 storage and ROS 1 bags carry no checksum."""

import warnings
from pathlib import Path

import numpy as np

from ..time import stamp_ns
from ._common import (
    LoaderError,
    as_paths,
    field_names,
    log_store,
    reading,
    split_gap_ns,
    stack_streams,
)
from ._images import Compressed, compressed_stream, decode_image, may_keep_encoded
from ._mcap_crc import mapped, verify_mcap, warn_unprotected

__all__ = ["load_bag"]

_IMAGE_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def _is_compressed(msg):
    return hasattr(msg, "format") and not hasattr(msg, "encoding")  # a CompressedImage


def _image(msg, where):
    """sensor_msgs/Image (8-bit encodings) or CompressedImage as (H, W, C) uint8."""
    if _is_compressed(msg):
        return decode_image(bytes(msg.data), where)
    channels = _IMAGE_CHANNELS.get(msg.encoding)
    if channels is None:
        raise LoaderError(
            f"{where}: image encoding {msg.encoding!r} is not one of {sorted(_IMAGE_CHANNELS)}"
        )
    rows = np.asarray(msg.data, dtype=np.uint8).reshape(msg.height, msg.step)
    return rows[:, : msg.width * channels].reshape(msg.height, msg.width, channels)


def _value(msg, field, where):
    """The value at a dotted field path, as an array: vectors (x, y, z[, w])
    as arrays, ``image`` as (H, W, C) uint8."""
    if field == "image":
        return _image(msg, where)
    value = msg
    for part in field.split(".") if field else []:
        if not hasattr(value, part):
            raise LoaderError(f"{where}: the message has no field {part!r} (path {field!r})")
        value = getattr(value, part)
    if all(hasattr(value, axis) for axis in "xyz"):
        axes = "xyzw" if hasattr(value, "w") else "xyz"
        return np.array([getattr(value, a) for a in axes], dtype=np.float64)
    return np.asarray(value)


def _stamp(msg):
    return stamp_ns(msg.header.stamp.sec, msg.header.stamp.nanosec)


def load_bag(
    paths,
    topics,
    *,
    time_source="header",
    split_gap_s=None,
    marker_topic=None,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of ROS bags: each file an episode, or split where every
    topic pauses for longer than ``split_gap_s`` and at each message of
    ``marker_topic``.

    Args:
        paths: a bag (ROS 2 directory with sqlite3 or mcap storage, or a ROS 1
            ``.bag`` file), or a list of them.
        topics: topic -> field path(s) picking the values: ``"position"``
            (JointState), ``"wrench.force"`` and ``"wrench.torque"``
            (WrenchStamped; vectors come as x, y, z), ``"image"`` (Image or
            CompressedImage, as (H, W, C) uint8), ``""`` or None for the
            whole message's numeric value. Streams are named
            ``"<topic>.<field>"`` (the topic alone for None/"").
        time_source: ``"header"`` (``header.stamp``, the acquisition time) or
            ``"log"`` (when the message was logged), int64 ns.
        split_gap_s: split a file into episodes at pauses of the merged
            timeline longer than this (seconds); None: one episode per file.
        marker_topic: a topic whose every message starts a new episode at
            its time (on the same time source), e.g. a "/episode_start" topic.
        frames: ``"raw"``, ``"jpeg"`` or ``"png"`` (or a dict stream ->
            one): how image streams are kept (``EpisodeStore.from_episodes``).
            CompressedImages already in that codec are kept byte for byte.
        jpeg_quality: JPEG's quality (1 to 100) where frames are encoded here.
        resize: (H, W): every image stream resized once, at load.
        progress: show a progress bar.
        skip_bad: skip files that fail a check (reported) instead of raising
            (frames kept encoded are then decoded once more, as the bag is
            read, so that a corrupt one skips its bag). Where every file is
            skipped, a LoaderError lists them and why.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Before rosbags reads a ROS 2 bag in mcap storage, every CRC of its .mcap
    files is checked with the mcap package (the summary's, the data
    section's and every chunk's): a mismatch, a file cut short, or a record
    that does not parse or decompress is a LoaderError naming the file. Files
    whose CRCs do not cover every message (rosbags' writer leaves them all at
    0; rosbag2's fills the chunks' and the summary's) load with a warning, as
    do mcap bags where the mcap package is not installed and bags compressed
    file by file (``.mcap.zstd``), whose CRCs are not checked. sqlite3 storage
    and ROS 1 bags carry no checksum: a flipped bit in a value loads as
    another value. The checks cost one more decompression and zlib CRC-32 of
    each chunk: 44 ms for an 83 MB bag of 640x480 images that loads in 5.6 s.
    """
    from rosbags.highlevel import AnyReader

    if time_source not in ("header", "log"):
        raise ValueError(f"load_bag: time_source must be 'header' or 'log'; got {time_source!r}")
    paths = as_paths(paths)
    fields = field_names(topics)
    wanted = set(topics) | ({marker_topic} if marker_topic else set())
    gap = split_gap_ns(split_gap_s, "load_bag")
    topic_of = {name: topic for (topic, _), name in fields.items()}
    keep = {name: may_keep_encoded(frames, resize, name) for name in fields.values()}

    unprotected, unchecked = [], []  # mcap files no CRC covers; bags not checked, and why

    def verify(path):
        """Checks the CRCs of a ROS 2 bag's .mcap files (a directory's)."""
        bag = Path(path)
        files = sorted(bag.glob("*.mcap")) if bag.is_dir() else []
        if bag.is_dir() and any(bag.glob("*.mcap.zstd")):
            unchecked.append(f"{path}: its .mcap files are compressed whole (.mcap.zstd)")
        if files and not _has_mcap():
            unchecked.append(
                f"{path}: the mcap package is not installed (pip install robocache[mcap])"
            )
            return
        for file in files:
            with mapped(file, f"load_bag({file})") as data:
                if not verify_mcap(data, f"load_bag({file})"):
                    unprotected.append(str(file))

    def read(path):
        where = f"load_bag({path})"
        values = {name: [] for name in fields.values()}
        times = {name: [] for name in fields.values()}
        marks = []
        with reading(where, "the bag"):
            verify(path)
            with AnyReader([Path(path)]) as reader:
                connections = [c for c in reader.connections if c.topic in wanted]
                missing = sorted(wanted - {c.topic for c in connections})
                if missing:
                    raise LoaderError(
                        f"{where}: no topic {missing[0]!r}; the topics are {sorted(c.topic for c in reader.connections)}"
                    )
                for connection, log_time, raw in reader.messages(connections=connections):
                    msg = reader.deserialize(raw, connection.msgtype)
                    here = f"{where}, topic {connection.topic!r}"
                    t = _stamp(msg) if time_source == "header" else int(log_time)
                    if connection.topic == marker_topic:
                        marks.append(t)
                    for (topic, pick), name in fields.items():
                        if topic == connection.topic:
                            if keep[name] and pick == "image" and _is_compressed(msg):
                                values[name].append(Compressed(bytes(msg.data), msg.format))
                            else:
                                values[name].append(_value(msg, pick, here))
                            times[name].append(t)
            for name in values:
                if keep[name]:  # compressed images are decoded here or kept encoded
                    here = f"{where}, topic {topic_of[name]!r}"
                    values[name] = compressed_stream(
                        values[name], name, frames, resize, here, verify=skip_bad
                    )
        return stack_streams(where, values, times), marks

    options = dict(frames=frames, jpeg_quality=jpeg_quality, resize=resize)
    store = log_store(
        paths, read, gap, skip_bad, "load_bag", progress=progress, device=device, **options
    )
    if unchecked:
        warnings.warn(
            f"load_bag: the CRCs of {len(unchecked)} mcap-storage bag(s) were not checked:\n  "
            + "\n  ".join(unchecked),
            stacklevel=2,
        )
    warn_unprotected("load_bag", unprotected)
    return store


def _has_mcap():
    try:
        import mcap  # noqa: F401
    except ImportError:
        return False
    return True
