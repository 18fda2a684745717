"""ROS bags and MCAP logs, read with rosbags (ROS 2 bags in sqlite3 or mcap
storage, ROS 1 ``.bag`` files): the real multi-rate case. A topic (with a
field path) becomes a stream on its own clock: the messages' ``header.stamp``
(acquisition time) or the log time."""

import io
from pathlib import Path

import numpy as np

from ..store import EpisodeStore
from ._common import LoaderError, skipping

__all__ = ["load_bag"]

_IMAGE_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}


def _image(msg, where):
    """sensor_msgs/Image (8-bit encodings) or CompressedImage as (H, W, C) uint8."""
    if hasattr(msg, "format") and not hasattr(msg, "encoding"):  # CompressedImage
        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(bytes(msg.data))).convert("RGB"))
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
    stamp = msg.header.stamp
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def _split(times, gap):
    """Segment boundaries where the merged timeline pauses longer than gap ns."""
    merged = (
        np.sort(np.concatenate([t for t in times if len(t)])) if times else np.zeros(0, np.int64)
    )
    if gap is None or len(merged) < 2:
        return []
    cut = np.nonzero(np.diff(merged) > gap)[0]
    return [int(merged[i + 1]) for i in cut]


def load_bag(
    paths,
    topics,
    *,
    time_source="header",
    split_gap_s=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of ROS bags: each file an episode, or split where every
    topic pauses for longer than ``split_gap_s``.

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
        skip_bad: skip files that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.
    """
    from rosbags.highlevel import AnyReader

    if time_source not in ("header", "log"):
        raise ValueError(f"load_bag: time_source must be 'header' or 'log'; got {time_source!r}")
    paths = (
        [paths] if isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__") else list(paths)
    )
    fields = {}
    for topic, picks in topics.items():
        picks = [picks] if picks is None or isinstance(picks, str) else list(picks)
        for pick in picks:
            fields[(topic, pick or "")] = f"{topic}.{pick}" if pick else topic
    gap = None if split_gap_s is None else int(round(split_gap_s * 1e9))

    def read(path):
        where = f"load_bag({path})"
        values = {name: [] for name in fields.values()}
        times = {name: [] for name in fields.values()}
        try:
            with AnyReader([Path(path)]) as reader:
                connections = [c for c in reader.connections if c.topic in topics]
                missing = sorted(set(topics) - {c.topic for c in connections})
                if missing:
                    raise LoaderError(
                        f"{where}: no topic {missing[0]!r}; the topics are {sorted(c.topic for c in reader.connections)}"
                    )
                for connection, log_time, raw in reader.messages(connections=connections):
                    msg = reader.deserialize(raw, connection.msgtype)
                    here = f"{where}, topic {connection.topic!r}"
                    t = _stamp(msg) if time_source == "header" else int(log_time)
                    for (topic, pick), name in fields.items():
                        if topic == connection.topic:
                            values[name].append(_value(msg, pick, here))
                            times[name].append(t)
        except LoaderError:
            raise
        except Exception as e:  # rosbags raises its own types for unreadable or truncated files
            raise LoaderError(f"{where}: cannot read the bag: {e}") from e
        out = {}
        for name in fields.values():
            t = np.asarray(times[name], dtype=np.int64)
            shapes = {v.shape for v in values[name]}
            if len(shapes) > 1:
                raise LoaderError(
                    f"{where}, stream {name!r}: the shape changes within the file: {sorted(shapes)}"
                )
            v = np.stack(values[name]) if values[name] else np.zeros((0,))
            out[name] = (v, t)
        return where, out

    def episodes_of(path):
        where, streams = read(path)
        for name, (_, t) in streams.items():
            if np.any(np.diff(t) < 0):
                i = int(np.nonzero(np.diff(t) < 0)[0][0])
                raise LoaderError(
                    f"{where}, stream {name!r}: times go backwards at message {i + 1}"
                )
        bounds = _split([t for _, t in streams.values()], gap)
        edges = [-(2**63)] + bounds + [2**63 - 1]
        for k in range(len(edges) - 1):
            episode = {}
            for name, (v, t) in streams.items():
                if len(t):
                    keep = (t >= edges[k]) & (t < edges[k + 1])
                    episode[name] = (v[keep], t[keep])
            yield episode

    def all_episodes():
        index = 0
        for path in paths:
            for episode in skipping(
                [(str(path), lambda p=path: list(episodes_of(p)))], skip_bad, "load_bag"
            ):
                for ep in episode:
                    ep["episode_index"] = index
                    index += 1
                    yield ep

    return EpisodeStore.from_episodes(all_episodes(), progress=progress, device=device)
