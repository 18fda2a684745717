"""What an encoded frame stream is: each sample one encoded image (JPEG or
PNG), the samples' bytes back to back. ``FrameEncoding`` says how to decode
them; ``EncodedFrames`` is how a loader hands frames that arrive encoded to
``EpisodeStore.from_episodes``, to be kept byte for byte."""

from dataclasses import dataclass

import numpy as np
import torch

CODECS = ("jpeg", "png")
FRAME_FORMS = ("raw", "jpeg", "png")
_CHANNELS = (1, 3, 4)


@dataclass(frozen=True)
class FrameEncoding:
    """How a stream's samples are encoded.

    Attributes:
        codec: ``"jpeg"`` or ``"png"``.
        shape: a decoded sample's shape, (H, W, C) or (H, W).
        dtype: a decoded sample's dtype (uint8; uint16 for PNG depth).
    """

    codec: str
    shape: tuple
    dtype: torch.dtype

    def to_json(self):
        return {"codec": self.codec, "shape": list(self.shape), "dtype": str(self.dtype)[6:]}

    @classmethod
    def from_json(cls, d):
        """The encoding a store's metadata describes, or a ValueError saying what is wrong."""
        if not isinstance(d, dict) or set(d) != {"codec", "shape", "dtype"}:
            raise ValueError(f"a frame encoding is {{codec, shape, dtype}}; got {d!r}")
        dtype = {"uint8": torch.uint8, "uint16": torch.uint16}.get(d["dtype"])
        shape = d["shape"]
        if (
            d["codec"] not in CODECS
            or dtype is None
            or not isinstance(shape, list)
            or not all(isinstance(n, int) and n > 0 for n in shape)
            or frame_kind(tuple(shape), dtype) is None
        ):
            raise ValueError(f"not a frame encoding robocache writes: {d!r}")
        return cls(d["codec"], tuple(shape), dtype)

    @property
    def sample_nbytes(self):
        return int(np.prod(self.shape)) * (2 if self.dtype == torch.uint16 else 1)


def frame_kind(shape, dtype):
    """Whether samples of ``shape`` and ``dtype`` are frames an image codec
    holds: ``"color"`` ((H, W, C) uint8 with C of 1, 3 or 4), ``"depth"``
    ((H, W, 1) uint16), or None."""
    if len(shape) != 3 or shape[0] < 1 or shape[1] < 1:
        return None
    if dtype == torch.uint8 and shape[-1] in _CHANNELS:
        return "color"
    if dtype == torch.uint16 and shape[-1] == 1:
        return "depth"
    return None


def pack_images(images):
    """(values (bytes,) uint8, byte_offsets (N + 1,) int64): ``images``
    (bytes-like) back to back, as an encoded stream holds them."""
    sizes = torch.tensor([0] + [len(i) for i in images], dtype=torch.int64)
    byte_offsets = sizes.cumsum(0)
    values = torch.empty(int(byte_offsets[-1]), dtype=torch.uint8)
    array, bounds = values.numpy(), byte_offsets.tolist()
    for i, image in enumerate(images):
        array[bounds[i] : bounds[i + 1]] = memoryview(image).cast("B")
    return values, byte_offsets


def codec_for(form, shape, dtype):
    """The codec ``frames=form`` gives frames of ``shape`` and ``dtype``:
    ``"jpeg"`` keeps 1- and 3-channel uint8 frames as JPEG and the rest
    (RGBA, uint16 depth) as PNG, which holds them exactly; ``"png"`` keeps
    all as PNG; ``"raw"``, or samples that are not frames: None."""
    kind = frame_kind(shape, dtype)
    if form == "raw" or kind is None:
        return None
    if form == "jpeg" and kind == "color" and shape[-1] in (1, 3):
        return "jpeg"
    return "png"


class EncodedFrames:
    """Frames that arrive encoded (RLDS's JPEG, a ROS ``CompressedImage``),
    as a loader gives them to ``from_episodes`` in place of decoded values:
    a sequence of bytes-like images of one codec. ``shape`` is the decoded
    (H, W, C) where the source states it (checked against each frame's
    header), else found from the first frame's."""

    def __init__(self, images, codec, shape=None):
        if codec not in CODECS:
            raise ValueError(f"EncodedFrames: codec must be one of {CODECS}; got {codec!r}")
        self.images = [memoryview(i).cast("B") for i in images]
        self.codec = codec
        self.shape = None if shape is None else tuple(int(n) for n in shape)

    def __len__(self):
        return len(self.images)
