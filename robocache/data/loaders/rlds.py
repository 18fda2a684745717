"""Open X-Embodiment / RT-X datasets in RLDS (TFDS) layout, without
TensorFlow: ``features.json`` for the feature shapes, and the shards
``<name>-<split>.tfrecord-NNNNN-of-MMMMM`` of serialized ``tf.train.Example``
episodes (parsed with the ``tfrecord`` package's protobuf), each holding
``steps/...`` sequences. JPEG and PNG images are decoded with PIL, or JPEG on
the GPU where asked (robocache's frame decoders).

What is checked: each TFRecord carries a masked CRC-32C of its length and one
of its data, which the ``tfrecord`` package's reader skips; the records are
read here, both CRCs checked (with ``TFRecordWriter.masked_crc``, the
``tfrecord`` package's own, on the ``crc32c`` package it depends on). The
shards found are checked against their names (``-NNNNN-of-MMMMM``: none
missing) and against ``dataset_info.json``'s episode count per shard
(``splits[].shardLengths``, which TFDS writes). ``features.json`` and
``dataset_info.json`` carry no checksum."""

import functools
import glob
import json
import os
import re
import warnings

import numpy as np

from ._common import LoaderError, frame_times, keeps_encoded, packed_store, reading, skipping
from ._rlds_features import metadata_features, step_features
from ._rlds_images import image_steps
from ._rlds_meta import (
    StringTables,
    episode_metadata,
    episode_task,
    feature_values,
    string_steps,
)
from ._tfrecord import tfrecords

__all__ = ["load_rlds"]

_SHARD = re.compile(r"-(\d+)-of-(\d+)$")
_VERSION = re.compile(r"\d+(\.\d+)*")


def _version_folder(directory):
    """``directory`` where it holds features.json or no folder named as a
    version; else its newest version folder, versions compared as numbers
    (1.10.0 after 1.9.0)."""
    if os.path.exists(os.path.join(directory, "features.json")) or not os.path.isdir(directory):
        return directory
    versions = [
        name
        for name in os.listdir(directory)
        if _VERSION.fullmatch(name) and os.path.isdir(os.path.join(directory, name))
    ]
    if not versions:
        return directory
    newest = max(versions, key=lambda name: tuple(int(part) for part in name.split(".")))
    return os.path.join(directory, newest)


def _shard_lengths(directory, split, where):
    """Episodes per shard of ``split`` from dataset_info.json
    (``splits[].shardLengths``, as TFDS writes them: strings), or None where
    there is no dataset_info.json or it gives no lengths."""
    path = os.path.join(directory, "dataset_info.json")
    if not os.path.exists(path):
        return None
    with reading(where, "dataset_info.json"):
        with open(path, encoding="utf-8") as f:
            info = json.load(f)
        splits = {s["name"]: s for s in info.get("splits", [])}
        if split not in splits:
            raise LoaderError(
                f"{where}: dataset_info.json has no split {split!r}; it has {sorted(splits)}"
            )
        lengths = splits[split].get("shardLengths")
        return None if lengths is None else [int(n) for n in lengths]


def _shard_plan(shards, lengths, where):
    """(name, path or None where missing, episodes or None where unknown) of
    each shard of the split: the shards named ``-NNNNN-of-MMMMM`` must be
    all of 0..MMMMM-1; dataset_info.json's lengths, where given, must be as
    many as the shards."""
    names = [os.path.basename(s) for s in shards]
    numbered = [_SHARD.search(n) for n in names]
    if not all(numbered):
        if lengths is not None and len(lengths) != len(shards):
            raise LoaderError(
                f"{where}: {len(shards)} shards, dataset_info.json lists {len(lengths)}"
            )
        return [
            (n, s, lengths[i] if lengths else None) for i, (n, s) in enumerate(zip(names, shards))
        ]
    totals = sorted({int(m.group(2)) for m in numbered})
    if len(totals) > 1:
        raise LoaderError(f"{where}: the shards' names count different totals: {totals}")
    total = totals[0]
    if lengths is not None and len(lengths) != total:
        raise LoaderError(
            f"{where}: the shards' names say there are {total}; dataset_info.json lists "
            f"{len(lengths)}"
        )
    found = {int(m.group(1)): s for m, s in zip(numbered, shards)}
    extra = sorted(i for i in found if i >= total)
    if extra:
        raise LoaderError(f"{where}: shard {os.path.basename(found[extra[0]])} is past {total}")
    first = numbered[0]
    width = len(first.group(1))

    def name(i):
        stem = names[0][: first.start()]
        return f"{stem}-{i:0{width}d}-of-{first.group(2)}"

    return [
        (name(i), found.get(i), lengths[i] if lengths is not None else None) for i in range(total)
    ]


def load_rlds(
    directory,
    fps,
    keys=None,
    *,
    split="train",
    decode_on=None,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of an RLDS dataset directory, one episode per record.

    Args:
        directory: a TFDS version folder, holding ``features.json`` and the
            TFRecord shards (and ``dataset_info.json``, where TFDS wrote
            one); or the dataset folder above its version folders
            (``bridge/`` holding ``0.1.0/`` and ``1.0.0/``), of which the
            newest is taken, without a warning: versions are compared as
            numbers (``1.10.0`` is newer than ``1.9.0``), and folders not
            named as a version (digits and dots) are ignored. Errors name
            the version folder taken.
        fps: the control rate (RLDS stores no timestamps): step k at k / fps.
        keys: step features to load, as paths under ``steps/``
            (``"observation/image"``, ``"action"``); default: every numeric
            and image feature. A string feature is loaded where named here
            (``"language_instruction"``: see below).
        split: the shards ``*-<split>.tfrecord-*``.
        decode_on: None (PIL on the CPU) or the device the images decoded
            here go to: JPEG on a CUDA device decodes there where the extra
            robocache[nvimgcodec] is installed (robocache.data.frames.decoders).
        frames: how image features are kept: ``"raw"``, ``"jpeg"`` or
            ``"png"``, or a dict key -> one of them (see
            ``EpisodeStore.from_episodes``). Images already in the codec asked
            for, with no ``resize``, are kept byte for byte, not decoded here.
        jpeg_quality: JPEG's quality for frames encoded at load, 1 to 100.
        resize: (H, W) every image feature is resized to, once, at load.
        progress: show a progress bar.
        skip_bad: skip bad episodes and shards (reported in one warning each)
            instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    The episodes keep TFDS's stored order: shard by shard (by the numbers
    in the shards' names), and in each shard the records in the order they
    were written. Streams are named by their path under ``steps/``. The task
    is the first step's ``language_instruction`` where there is one: a
    record holding numbers there, or a string that is not UTF-8, is a
    LoaderError naming the shard, episode and key, as for the stream below.

    A per-step string feature named in ``keys`` (``language_instruction``,
    which may change within an episode) is an int64 stream of that name,
    (n,) (or (n, *shape) for a string tensor with a shape): each step's index
    into ``store.info["strings"][key]``, the key's distinct strings (decoded
    as UTF-8) in the order they first appear in the store. A record whose
    feature holds numbers, or a string that is not UTF-8, is a LoaderError
    naming the shard, episode and key.

    Each episode's ``episode_metadata`` (every feature features.json declares
    under it, such as ``file_path``; images left out) is
    ``store.info["episode_metadata"]``: name -> a list with one JSON value per
    episode, in store order: bytes decoded as UTF-8 strings, numbers and
    bools as such, a feature with a shape as nested lists. ``save`` and
    ``load`` keep it. ``take_shard`` (and ``load(shard=...)``) does not slice
    ``store.info``: a shard's episode e is the whole store's
    ``shard.ranges[shard.rank][0] + e``. A value that does not fill the
    shape declared, is of another kind (numbers for strings), or is not
    UTF-8, is a LoaderError naming the shard, episode and key.

    Each record's two CRCs are checked (its length's and its data's), and
    each shard's episodes are counted against dataset_info.json. A shard that
    is missing (the shards' names say how many there are), empty, cut short,
    or holds another number of episodes than dataset_info.json says, and an
    episode whose CRC does not match or whose protobuf does not parse, are
    LoaderErrors naming the shard and the episode; with ``skip_bad`` they are
    warnings that name them and the episodes lost, and
    ``store.info["episodes_loaded"]`` and ``["episodes_expected"]`` (None
    without dataset_info.json) say how many there are. The CRCs are CRC-32C
    over every byte, by the ``crc32c`` package in hardware (about 9 GB/s):
    reading 2.2 MB of shards took 1.8 ms instead of the 1.2 ms of the
    tfrecord package's reader, which checks nothing; a pure-Python CRC-32C
    runs at about 7 MB/s. So the checks cannot be turned off.

    Images kept encoded are decoded once by ``from_episodes`` (for their
    statistics): one that does not decode is a LoaderError naming the shard,
    the episode in it, the key and the frame. With ``skip_bad`` they are
    decoded once more, as the episode is read, so that such a frame skips
    its episode. Where ``skip_bad`` leaves no episode to load, that is a
    LoaderError listing what was skipped and lost, not an empty store.
    """
    from tfrecord import example_pb2
    from tfrecord.writer import TFRecordWriter

    directory = _version_folder(directory)
    where = f"load_rlds({directory})"
    with reading(where, "features.json"):
        with open(os.path.join(directory, "features.json"), encoding="utf-8") as f:
            features = json.load(f)
        leaves = step_features(features, where)
        metadata_leaves = metadata_features(features, where)
    if keys is None:
        keys = [p for p, (_, dtype, _) in leaves.items() if dtype is not object]
    for key in keys:
        if key not in leaves:
            raise LoaderError(
                f"{where}: no step feature {key!r}; the features are {sorted(leaves)}"
            )
    shards = sorted(glob.glob(os.path.join(directory, f"*-{split}.tfrecord-*")))
    if not shards:
        raise LoaderError(f"{where}: no *-{split}.tfrecord-* shards")
    lengths = _shard_lengths(directory, split, where)
    plan = _shard_plan(shards, lengths, where)
    lost = []  # with skip_bad: the bad shards, and what of them was lost

    def shard_records(name, path, expected):
        """(episode name, data, problem) of one shard, its count checked."""
        here = f"{where}, {name}"
        count = 0
        if path is None:
            raise LoaderError(f"{here}: the shard is missing")
        with reading(here, "the shard"):
            for data, problem in tfrecords(path, here, TFRecordWriter.masked_crc):
                if expected is not None and count == expected:
                    raise LoaderError(
                        f"{here}: the shard holds more than the {expected} episodes "
                        "dataset_info.json says"
                    )
                yield f"{name}, episode {count}", data, problem
                count += 1
        if expected is not None and count != expected:
            raise LoaderError(
                f"{here}: the shard holds {count} episodes; dataset_info.json says {expected}"
            )
        if expected is None and count == 0:
            raise LoaderError(f"{here}: the shard holds no episode ({os.path.getsize(path)} bytes)")

    def records():
        for name, path, expected in plan:
            count = 0
            try:
                for record in shard_records(name, path, expected):
                    yield record
                    count += 1
            except LoaderError as e:
                if not skip_bad:
                    raise
                if expected is None:
                    gone = f"lost: the episodes from {count} on, how many is not known"
                elif count < expected:
                    which = f" {count}" if count == expected - 1 else f"s {count} to {expected - 1}"
                    gone = f"lost: episode{which}, {expected - count} of its {expected}"
                else:
                    gone = f"its first {expected} episodes loaded, those past them not"
                lost.append(f"{e} ({gone})")

    def episode(name, raw, problem, index):
        here = f"{where}, {name}"
        if problem is not None:
            raise LoaderError(f"{here}, {problem}")
        with reading(here, "the episode"):
            example = example_pb2.Example()
            example.ParseFromString(raw)
            feature = example.features.feature
            out = {"episode_index": index}
            strings = {}  # string key -> its distinct strings in this episode
            n = None
            for key in keys:
                shape, dtype, encoding = leaves[key]
                f = feature.get(f"steps/{key}")
                if f is None:
                    raise LoaderError(f"{here}: no steps/{key}")
                at = f"{here}, key {key!r}"
                if encoding is not None:
                    values = image_steps(
                        feature_values(f, object, at),
                        shape,
                        lambda codec, key=key: keeps_encoded(frames, resize, key, codec),
                        decode_on,
                        at,
                        verify=skip_bad,
                    )
                elif dtype is object:
                    strings[key], values = string_steps(feature_values(f, object, at), shape, at)
                else:
                    flat = feature_values(f, dtype, at)
                    size = int(np.prod(shape)) if shape else 1
                    if len(flat) % size:
                        raise LoaderError(
                            f"{at}: {len(flat)} values are not whole steps of {shape}"
                        )
                    values = flat.reshape(-1, *shape)
                if n is None:
                    n = len(values)
                elif len(values) != n:
                    raise LoaderError(
                        f"{here}, key {key!r}: {len(values)} steps, other features have {n}"
                    )
                out[key] = (values, frame_times(len(values), fps, where))
            task = episode_task(feature, leaves, here)
            if task is not None:
                out["task"] = task
            out["length"] = n or 0
            return out, episode_metadata(feature, metadata_leaves, here), strings

    names = []  # by episode_index: the shard and the place in it

    def items():
        for i, (name, raw, problem) in enumerate(records()):
            names.append(name)
            yield name, functools.partial(episode, name, raw, problem, i)

    kept_metadata = {name: [] for name in metadata_leaves}  # in store order
    string_keys = [key for key in keys if leaves[key][1] is object and leaves[key][2] is None]
    string_tables = StringTables(string_keys)

    def episodes():
        for e, metadata, strings in skipping(items(), skip_bad, where, lost=lost):
            for name, value in metadata.items():
                kept_metadata[name].append(value)
            for key, distinct in strings.items():
                local, times = e[key]
                e[key] = (string_tables.indices(key, distinct, local), times)
            yield e

    store = packed_store(
        where,
        episodes(),
        place=lambda e: f"{where}, {names[e['episode_index']]}",
        fps=fps,
        progress=progress,
        device=device,
        frames=frames,
        jpeg_quality=jpeg_quality,
        resize=resize,
    )
    store.info["episodes_loaded"] = store.num_episodes
    store.info["episodes_expected"] = None if lengths is None else sum(lengths)
    if metadata_leaves:
        store.info["episode_metadata"] = kept_metadata
    if string_keys:
        store.info["strings"] = string_tables.info()
    if lost:
        warnings.warn(
            f"{where}: skipped {len(lost)} bad shard(s):\n  " + "\n  ".join(lost), stacklevel=2
        )
    return store
