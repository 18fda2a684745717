"""Open X-Embodiment / RT-X datasets in RLDS (TFDS) layout, without
TensorFlow: ``features.json`` for the feature shapes, and the shards
``<name>-<split>.tfrecord-NNNNN-of-MMMMM`` of serialized ``tf.train.Example``
episodes (read with the ``tfrecord`` package and its protobuf), each holding
``steps/...`` sequences. JPEG and PNG images are decoded with PIL, or on the
GPU with torchvision where asked."""

import glob
import json
import os

import numpy as np

from ..store import EpisodeStore
from ._common import LoaderError, frame_times, skipping
from ._images import decode_images

__all__ = ["load_rlds"]

_DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "bool": np.bool_,
    "string": object,
}


def _step_features(spec, prefix=""):
    """(path, shape, dtype, image encoding or None) of every leaf under a
    TFDS FeaturesDict JSON."""
    out = []
    for name, feature in spec["featuresDict"]["features"].items():
        path = prefix + name
        if "featuresDict" in feature:
            out += _step_features(feature, path + "/")
        elif "image" in feature:
            image = feature["image"]
            shape = tuple(int(d) for d in image["shape"]["dimensions"])
            out.append((path, shape, np.uint8, image.get("encodingFormat", "png")))
        elif "tensor" in feature:
            tensor = feature["tensor"]
            shape = tuple(int(d) for d in tensor["shape"].get("dimensions", []))
            out.append((path, shape, _DTYPES.get(tensor["dtype"], object), None))
        elif "text" in feature:
            out.append((path, (), object, None))
    return out


def _steps_spec(features, where):
    try:
        steps = features["featuresDict"]["features"]["steps"]
        return steps["sequence"]["feature"]
    except KeyError as e:
        raise LoaderError(f"{where}: features.json has no steps sequence ({e})") from e


def _decode_images(blobs, shape, device, here):
    """(n, *shape) uint8: PIL on the host, or torchvision on ``device`` (JPEG
    with nvJPEG in one batched call; other formats decoded on the host and
    moved), the frames staying there."""
    if device is not None:
        import torch
        from torchvision.io import ImageReadMode, decode_image, decode_jpeg

        mode = ImageReadMode.RGB if shape[-1] == 3 else ImageReadMode.GRAY
        data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
        try:
            if all(bytes(b[:3]) == b"\xff\xd8\xff" for b in blobs):  # JPEG
                frames = decode_jpeg(data, mode=mode, device=device)
            else:
                frames = [decode_image(d, mode=mode).to(device) for d in data]
        except RuntimeError as e:
            raise LoaderError(f"{here}: an image does not decode: {e}") from e
        return torch.stack(frames).permute(0, 2, 3, 1).reshape(len(frames), *shape)
    return decode_images(blobs, shape, here)


def load_rlds(
    directory,
    fps,
    keys=None,
    *,
    split="train",
    decode_on=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of an RLDS dataset directory, one episode per record.

    Args:
        directory: holding ``features.json`` and the TFRecord shards.
        fps: the control rate (RLDS stores no timestamps): step k at k / fps.
        keys: step features to load, as paths under ``steps/``
            (``"observation/image"``, ``"action"``); default: every numeric
            and image feature.
        split: the shards ``*-<split>.tfrecord-*``.
        decode_on: None (PIL on the CPU) or a device for torchvision's decoder
            (``"cuda"``).
        progress: show a progress bar.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Streams are named by their path under ``steps/``. The task is the first
    step's ``language_instruction`` where there is one.
    """
    from tfrecord import example_pb2
    from tfrecord.reader import tfrecord_iterator

    where = f"load_rlds({directory})"
    try:
        with open(os.path.join(directory, "features.json")) as f:
            features = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise LoaderError(f"{where}: cannot read features.json: {e}") from e
    leaves = {
        path: (shape, dtype, enc)
        for path, shape, dtype, enc in _step_features(_steps_spec(features, where))
    }
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
    language = "language_instruction" if "language_instruction" in leaves else None

    def records():
        for shard in shards:
            try:
                for e, raw in enumerate(tfrecord_iterator(shard)):
                    yield f"{os.path.basename(shard)}, episode {e}", raw
            except Exception as err:  # a truncated shard fails inside the iterator
                raise LoaderError(
                    f"{where}: {os.path.basename(shard)} is truncated or corrupt: {err}"
                ) from err

    def episode(name, raw, index):
        here = f"{where}, {name}"
        example = example_pb2.Example()
        example.ParseFromString(bytes(raw))
        feature = example.features.feature
        out = {"episode_index": index}
        n = None
        for key in keys:
            shape, dtype, encoding = leaves[key]
            f = feature.get(f"steps/{key}")
            if f is None:
                raise LoaderError(f"{here}: no steps/{key}")
            if encoding is not None:
                values = _decode_images(
                    list(f.bytes_list.value), shape, decode_on, f"{here}, key {key!r}"
                )
            else:
                flat = f.float_list.value if f.HasField("float_list") else f.int64_list.value
                size = int(np.prod(shape)) if shape else 1
                if len(flat) % size:
                    raise LoaderError(
                        f"{here}, key {key!r}: {len(flat)} values are not whole steps of {shape}"
                    )
                values = np.asarray(flat).astype(dtype).reshape(-1, *shape)
            if n is None:
                n = len(values)
            elif len(values) != n:
                raise LoaderError(
                    f"{here}, key {key!r}: {len(values)} steps, other features have {n}"
                )
            out[key] = (values, frame_times(len(values), fps, where))
        if language and f"steps/{language}" in feature:
            texts = feature[f"steps/{language}"].bytes_list.value
            out["task"] = texts[0].decode("utf-8", "replace") if texts else ""
        out["length"] = n or 0
        return out

    items = (
        (name, lambda name=name, raw=raw, i=i: episode(name, raw, i))
        for i, (name, raw) in enumerate(records())
    )
    return EpisodeStore.from_episodes(
        skipping(items, skip_bad, where), fps=fps, progress=progress, device=device
    )
