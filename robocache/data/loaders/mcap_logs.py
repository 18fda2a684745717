"""Plain MCAP logs (not ROS): channels of JSON or protobuf messages, read with
the mcap package (and mcap-protobuf-support for protobuf schemas). A topic
(with a field path) becomes a stream on its own clock: the log time, the
publish time, or a timestamp field of the message. ROS 2 bags in mcap storage
go through ``load_bag``.

Every CRC an MCAP file carries is verified with the mcap package: the
summary's (the footer's CRC of the summary section: channels, schemas, chunk
indexes), each chunk's that is read (its uncompressed bytes), and the data
section's (DataEnd). A CRC the writer left at 0 checks nothing; mcap's own
writer fills the chunks' and the summary's, and the data section's only with
``enable_data_crcs=True``. The file is mapped, not read, so a corrupt length
fails as a short record instead of asking for that much memory."""

import json

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
from ._mcap_crc import mapped, verified_messages, warn_unprotected

__all__ = ["load_mcap"]

_SECONDS = ("sec", "seconds", "secs")
_NANOS = ("nanosec", "nanos", "nsec", "nsecs")


def _get(node, part):
    if isinstance(node, dict):
        return node[part] if part in node else _MISSING
    # A protobuf message: getattr, or a name the schema lacks.
    return getattr(node, part) if hasattr(node, part) else _MISSING


_MISSING = object()


def _keys(node):
    if isinstance(node, dict):
        return sorted(node)
    descriptor = getattr(node, "DESCRIPTOR", None)
    return sorted(f.name for f in descriptor.fields) if descriptor is not None else []


def _at(message, path, where):
    node = message
    for part in path.split(".") if path else []:
        child = _get(node, part)
        if child is _MISSING:
            raise LoaderError(
                f"{where}: the message has no field {part!r} (path {path!r}); it has {_keys(node)}"
            )
        node = child
    return node


def _pick(message, path, where):
    """The value at a field path; ``"image"`` is the message itself when it
    has no such field (a CompressedImage: its ``data`` bytes)."""
    if path == "image" and _get(message, "image") is _MISSING:
        return message
    return _at(message, path, where)


def _compressed(value):
    """``value`` as a ``Compressed`` image where it is image bytes or a
    message with ``data`` bytes (and maybe a ``format``); else None."""
    if isinstance(value, (bytes, bytearray)):
        return Compressed(bytes(value))
    data = _get(value, "data")
    if not isinstance(data, bytes):
        return None
    form = _get(value, "format")
    return Compressed(data, form if isinstance(form, str) else None)


def _array(value, where):
    """Vectors (x, y, z[, w]) as arrays; lists and numbers as they are; an
    image (bytes, or a message with ``data`` bytes) decoded with PIL."""
    if isinstance(value, (bytes, bytearray)) or isinstance(_get(value, "data"), bytes):
        data = value if isinstance(value, (bytes, bytearray)) else _get(value, "data")
        return decode_image(data, where)
    if all(_get(value, axis) is not _MISSING for axis in "xyz") and not isinstance(
        value, (list, tuple)
    ):
        axes = "xyzw" if _get(value, "w") is not _MISSING else "xyz"
        return np.array([float(_get(value, a)) for a in axes], dtype=np.float64)
    try:
        array = np.asarray(list(value) if hasattr(value, "__len__") else value)
    except (TypeError, ValueError) as e:
        raise LoaderError(f"{where}: the value is not numeric: {e}") from e
    if array.dtype == object or array.dtype.kind in "US":
        raise LoaderError(f"{where}: the value is not numeric (got {array.dtype})")
    return array


def _nanoseconds(value, where):
    """int ns, or a time with seconds and nanoseconds fields (ROS's
    sec/nanosec, protobuf's seconds/nanos)."""
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return int(value)
    seconds = next((_get(value, n) for n in _SECONDS if _get(value, n) is not _MISSING), None)
    nanos = next((_get(value, n) for n in _NANOS if _get(value, n) is not _MISSING), None)
    if seconds is None or nanos is None:
        raise LoaderError(
            f"{where}: a time must be int nanoseconds or have seconds and nanoseconds fields "
            f"(sec/nanosec or seconds/nanos); got {value!r}"
        )
    return stamp_ns(seconds, nanos)


def load_mcap(
    paths,
    topics,
    *,
    time_source="log",
    split_gap_s=None,
    marker_topic=None,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of plain MCAP files with JSON or protobuf channels:
    each file an episode, or split where every topic pauses for longer than
    ``split_gap_s`` and at each message of ``marker_topic``.

    Args:
        paths: an ``.mcap`` file, or a list of them.
        topics: topic -> field path(s) picking the values: ``"position"``,
            ``"wrench.force"`` (a vector: its x, y, z), ``"image"`` (a
            message with ``data`` bytes, e.g. a CompressedImage, decoded to
            (H, W, 3) uint8), ``""`` or None for the whole message. Streams are
            named ``"<topic>.<field>"`` (the topic alone for None/"").
        time_source: ``"log"`` or ``"publish"`` (the record's times), or the
            field path of a timestamp in the message (``"timestamp"``,
            ``"header.stamp"``): int nanoseconds, or seconds and nanoseconds
            fields.
        split_gap_s: split a file into episodes at pauses of the merged
            timeline longer than this (seconds); None: one episode per file.
        marker_topic: a topic whose every message starts a new episode at
            its time (on the same time source), e.g. a "/episode_start" topic.
        frames: ``"raw"``, ``"jpeg"`` or ``"png"`` (or a dict stream ->
            one): how image streams are kept (``EpisodeStore.from_episodes``).
            Compressed images already in that codec are kept byte for byte.
        jpeg_quality: JPEG's quality (1 to 100) where frames are encoded here.
        resize: (H, W): every image stream resized once, at load.
        progress: show a progress bar.
        skip_bad: skip files that fail a check (reported) instead of raising
            (frames kept encoded are then decoded once more, as the file is
            read, so that a corrupt one skips its file).
        device: build the store there (default: the host).

    Every CRC a file carries is checked before its messages are used: the
    summary section's, the data section's, and each chunk's that is read. A
    mismatch, a file cut short, or a record that does not parse or
    decompress is a LoaderError naming the file. A file whose CRCs do not
    cover every message (its writer left them at 0) loads with a warning:
    corruption there cannot be detected. The checks are zlib's CRC-32 over
    the bytes read: on 9.4 MB of protobuf and JPEG logs, reading the messages
    took 1.45 s instead of 1.37 s (medians of 9 runs), less than the
    run-to-run noise of a whole load (2 to 5 s), so they cannot be turned off.
    """
    if not isinstance(time_source, str) or not time_source:
        raise ValueError(
            f"load_mcap: time_source must be 'log', 'publish' or a field path; got {time_source!r}"
        )
    paths = as_paths(paths)
    fields = field_names(topics)
    wanted = set(topics) | ({marker_topic} if marker_topic else set())
    gap = split_gap_ns(split_gap_s, "load_mcap")
    topic_of = {name: topic for (topic, _), name in fields.items()}
    keep = {name: may_keep_encoded(frames, resize, name) for name in fields.values()}

    def protobuf_factory():
        try:
            from mcap_protobuf.decoder import DecoderFactory
        except ImportError:  # protobuf channels then raise, naming the package
            return None
        return DecoderFactory()

    unprotected = []  # files whose messages no CRC covers

    def read(path):
        where = f"load_mcap({path})"
        values = {name: [] for name in fields.values()}
        times = {name: [] for name in fields.values()}
        marks = []
        with reading(where, "the file"), mapped(path, where) as data:
            channels, messages, covered = verified_messages(data, sorted(wanted), where)
            if not covered:
                unprotected.append(str(path))
            decode = _Decoders(protobuf_factory())
            present = {c.topic for c in (channels or {}).values()}
            missing = sorted(wanted - present)
            if missing and channels:
                raise LoaderError(
                    f"{where}: no topic {missing[0]!r}; the topics are {sorted(present)}"
                )
            for schema, channel, record in messages:
                here = f"{where}, topic {channel.topic!r}"
                message = decode(schema, channel, record.data, here)
                if time_source == "log":
                    t = int(record.log_time)
                elif time_source == "publish":
                    t = int(record.publish_time)
                else:
                    t = _nanoseconds(_at(message, time_source, here), here)
                if channel.topic == marker_topic:
                    marks.append(t)
                for (topic, pick), name in fields.items():
                    if topic == channel.topic:
                        value = _pick(message, pick, here)
                        image = _compressed(value) if keep[name] else None
                        values[name].append(_array(value, here) if image is None else image)
                        times[name].append(t)
            for name in values:
                if keep[name]:  # compressed images are decoded here or kept encoded
                    here = f"{where}, topic {topic_of[name]!r}"
                    values[name] = compressed_stream(
                        values[name], name, frames, resize, here, verify=skip_bad
                    )
        streams = stack_streams(where, values, times)
        for name, (_, t) in streams.items():
            if len(t) == 0:
                raise LoaderError(f"{where}, stream {name!r}: no messages")
        return streams, marks

    options = dict(frames=frames, jpeg_quality=jpeg_quality, resize=resize)
    store = log_store(
        paths, read, gap, skip_bad, "load_mcap", progress=progress, device=device, **options
    )
    warn_unprotected("load_mcap", unprotected)
    return store


class _Decoders:
    """Messages as dicts (JSON) or protobuf messages; one decoder a channel."""

    def __init__(self, protobuf):
        self.protobuf, self.by_channel = protobuf, {}

    def __call__(self, schema, channel, data, where):
        decoder = self.by_channel.get(channel.id)
        if decoder is None:
            decoder = self.by_channel[channel.id] = self._decoder(schema, channel, where)
        return decoder(data)

    def _decoder(self, schema, channel, where):
        encoding = channel.message_encoding
        if encoding == "json":

            def from_json(data):
                try:
                    return json.loads(data)
                except ValueError as e:
                    raise LoaderError(f"{where}: a message is not JSON: {e}") from e

            return from_json
        if encoding == "protobuf":
            if self.protobuf is None:
                raise LoaderError(
                    f"{where}: protobuf channels need mcap-protobuf-support "
                    "(pip install robocache[mcap])"
                )
            return self.protobuf.decoder_for(encoding, schema)
        raise LoaderError(
            f"{where}: message encoding {encoding!r} is not json or protobuf (ROS 2 logs: load_bag)"
        )
