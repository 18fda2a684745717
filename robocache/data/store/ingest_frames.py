"""Frames at ingest: what ``from_episodes(frames=, jpeg_quality=, resize=,
verify=)`` does with each image stream of an episode before it is packed.

- Raw frames (a tensor) are resized if asked, then kept raw or encoded.
- Frames that arrive encoded (``EncodedFrames``) are kept byte for byte when
  their codec is the one asked for and no resize is asked (each frame's
  header is read, and with ``verify`` each is decoded once); otherwise they
  are decoded, resized and encoded again (or kept raw)."""

from dataclasses import dataclass

import torch

from ..frames import FRAME_FORMS, EncodedFrames, FrameEncoding, check_size, codec_for, resize
from ..frames import codec as host_codec
from ..frames.decoders import host as host_decoder
from ..frames.encoding import pack_images
from ..frames.resize import resizes

_WHERE = "EpisodeStore.from_episodes"


@dataclass(frozen=True)
class FrameOptions:
    """``frames``: ``"raw"``, ``"jpeg"`` or ``"png"``, or a dict key -> one
    of them (keys it leaves out stay raw); ``quality``: JPEG's, 1 to 100;
    ``size``: (H, W) every frame stream is resized to, or None; ``verify``:
    decode every frame that arrives encoded once."""

    frames: object = "raw"
    quality: int = 90
    size: tuple = None
    verify: bool = True

    @classmethod
    def check(cls, frames, quality, size, verify):
        forms = frames.values() if isinstance(frames, dict) else [frames]
        if not all(isinstance(f, str) and f in FRAME_FORMS for f in forms):
            raise ValueError(
                f"{_WHERE}: frames must be one of {FRAME_FORMS}, or a dict key -> one of them; "
                f"got {frames!r}"
            )
        if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
            raise ValueError(f"{_WHERE}: jpeg_quality must be an int in [1, 100]; got {quality!r}")
        if not isinstance(verify, bool):
            raise ValueError(f"{_WHERE}: verify must be True or False; got {verify!r}")
        return cls(frames, quality, check_size(size, _WHERE), verify)

    def check_keys(self, keys):
        """A ValueError where ``frames`` (a dict) names a key no episode had."""
        if not isinstance(self.frames, dict):
            return
        unknown = [k for k in self.frames if k not in keys]
        if unknown:
            raise ValueError(
                f"{_WHERE}: frames names {unknown}, which no episode has; the streams are "
                f"{list(keys)}"
            )

    def form(self, key):
        if isinstance(self.frames, dict):
            return self.frames.get(key, "raw")
        return self.frames


@dataclass
class Frames:
    """One episode's frames of a stream, encoded: their bytes, the encoding,
    and the decoded frames where ingest saw them (for the statistics)."""

    images: list
    encoding: FrameEncoding
    decoded: torch.Tensor = None


def prepare(key, values, where, options):
    """An episode's values of stream ``key`` as ingest keeps them: a tensor
    (raw) or ``Frames`` (encoded)."""
    if isinstance(values, EncodedFrames):
        return _from_encoded(key, values, where, options)
    form = options.form(key)
    codec = codec_for(form, tuple(values.shape[1:]), values.dtype)
    if codec is None and isinstance(options.frames, dict) and form != "raw":
        raise ValueError(
            f"{_WHERE}: {where}: frames={form!r}, but its samples are "
            f"{tuple(values.shape[1:])} {values.dtype}, not frames an image codec holds "
            "((H, W, C) uint8 with C of 1, 3 or 4, or (H, W, 1) uint16 depth)"
        )
    if options.size is not None and resizes(values.shape[1:], values.dtype, f"{_WHERE}: {where}"):
        values = resize(values, options.size)
    if codec is None:
        return values
    shape, dtype = tuple(values.shape[1:]), values.dtype
    images = host_codec.encode(values, codec, options.quality)
    encoding = FrameEncoding(codec, shape, dtype)
    # The statistics are of what the sampler returns: JPEG's decoded pixels
    # (PNG keeps the frames exactly).
    decoded = _decode(images, encoding, where) if codec == "jpeg" else values
    return Frames(images, encoding, decoded)


def _from_encoded(key, source, where, options):
    form = options.form(key)
    if not len(source):
        shape = source.shape
        if shape is None:
            raise ValueError(f"{_WHERE}: {where}: no frames, and no shape given for them")
        empty = torch.empty((0, *shape), dtype=torch.uint8)
        if form == source.codec and options.size is None:
            return Frames([], FrameEncoding(source.codec, shape, torch.uint8), empty)
        return prepare(key, empty, where, options)
    shape, dtype = source.shape, torch.uint8
    probed, dtype = host_codec.probe(source.images[0], source.codec, f"{where}, frame 0")
    if shape is None:
        shape = probed
    if form == source.codec and options.size is None:
        encoding = FrameEncoding(source.codec, shape, dtype)
        for i, image in enumerate(source.images):  # headers only: each frame's size
            found, found_dtype = host_codec.probe(image, source.codec, f"{where}, frame {i}")
            if found[:2] != shape[:2] or found_dtype != dtype:
                raise ValueError(
                    f"{_WHERE}: {where}, frame {i}: the image is {found[:2]} {found_dtype}; "
                    f"the stream's frames are {shape[:2]} {dtype}"
                )
        decoded = None
        if options.verify:
            decoded = _decode(source.images, encoding, where)
        return Frames(source.images, encoding, decoded)
    decoded = _decode(source.images, FrameEncoding(source.codec, shape, dtype), where)
    return prepare(key, decoded, where, options)


def _decode(images, encoding, where):
    try:
        return host_decoder.decode(images, encoding, name=lambda i: f"{where}, frame {i}")
    except ValueError as e:
        raise ValueError(f"{_WHERE}: {e}") from None


def pack_frames(chunks):
    """(values (bytes,) uint8, byte_offsets (N + 1,) int64) of the frames of
    every episode, in order."""
    return pack_images([image for frames in chunks for image in frames.images])
