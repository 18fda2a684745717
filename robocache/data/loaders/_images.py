"""The one image decode of the loaders: PNG, JPEG and the other formats
PIL reads, to (H, W, C) uint8 frames, with errors that name the frame; and
the codec of images that arrive encoded, from their first bytes; and the
compressed images of logs (ROS and MCAP ``CompressedImage``) kept encoded
where ``frames=`` asks for their codec."""

import io
from typing import NamedTuple

import numpy as np
import torch

from ..errors import LoaderError
from ..frames import CODECS, EncodedFrames, FrameEncoding
from ..frames import codec as host_codec
from ..frames.decoders import host as host_decoder
from ._common import keeps_encoded

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_MAGIC = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG"}


def magic_codec(image):
    """``"jpeg"`` or ``"png"`` where ``image`` (bytes-like) starts as that
    codec's files do, else None."""
    head = bytes(image[:4])
    return next((c for c, magic in _MAGIC.items() if head.startswith(magic)), None)


def encoded_codec(images):
    """``"jpeg"`` or ``"png"`` where every one of ``images`` (bytes-like)
    starts as that codec's files do; None where they mix codecs, are of
    another format, or there are none."""
    codecs = {magic_codec(image) for image in images}
    return codecs.pop() if len(codecs) == 1 else None


def decode_image(data, where, channels=3):
    """One encoded image (bytes, or a file path) as an (H, W, channels) uint8 array."""
    from PIL import Image, UnidentifiedImageError

    mode = _MODES.get(channels)
    if mode is None:
        raise LoaderError(f"{where}: an image has 1, 3 or 4 channels; {channels} were asked for")
    try:
        source = (
            io.BytesIO(bytes(data)) if isinstance(data, (bytes, bytearray, memoryview)) else data
        )
        with Image.open(source) as image:
            array = np.asarray(image.convert(mode))
    except (OSError, UnidentifiedImageError, ValueError) as e:
        raise LoaderError(f"{where}: cannot decode the image: {e}") from e
    return array.reshape(array.shape[0], array.shape[1], channels)


def decode_images(images, shape, where):
    """Encoded images as one (n, *shape) uint8 array; ``shape`` is (H, W, C),
    and an image of another size is an error naming it."""
    frames = []
    for i, data in enumerate(images):
        frame = decode_image(data, f"{where}, frame {i}", shape[-1])
        if frame.shape != tuple(shape):
            raise LoaderError(
                f"{where}, frame {i}: the image is {frame.shape}; the dataset says {tuple(shape)}"
            )
        frames.append(frame)
    return np.stack(frames) if frames else np.empty((0, *shape), dtype=np.uint8)


def verify_frames(kept, where, item="frame"):
    """Decodes each frame of ``kept`` (``EncodedFrames``) once on the host,
    as ``from_episodes`` will: one that does not decode (or holds another
    size or kind of pixels than the stream's) is a LoaderError, its message
    ``where`` (a prefix, ending in ", " or ": ") and ``"<item> <i>: ..."``.
    A loader does this with ``skip_bad``, so that such a frame skips its
    episode: found inside ``from_episodes``, it could only stop the load."""
    if not len(kept):
        return
    try:
        probed, dtype = host_codec.probe(kept.images[0], kept.codec, f"{item} 0")
        encoding = FrameEncoding(kept.codec, kept.shape or probed, dtype)
        host_decoder.decode(kept.images, encoding, name=lambda i: f"{item} {i}")
    except ValueError as e:
        raise LoaderError(f"{where}{e}") from e


class Compressed(NamedTuple):
    """One compressed image as a message carries it: its bytes, and its
    ``format`` field (None where the message has none)."""

    data: bytes
    format: str = None


_FORMAT_NAMES = {"jpeg": ("jpeg", "jpg"), "png": ("png",)}


def codec_of(image):
    """The codec of a ``Compressed`` image: ``"jpeg"`` or ``"png"`` as its
    bytes' magic says, where its format field names that codec or neither;
    None where the magic is neither, or the field names another codec."""
    codec = magic_codec(image.data)
    if codec is None or not image.format:
        return codec
    named = {
        c for c, names in _FORMAT_NAMES.items() if any(n in image.format.lower() for n in names)
    }
    return codec if named <= {codec} else None


def may_keep_encoded(frames, resize, key):
    """Whether compressed images of stream ``key`` may be kept encoded (for
    some codec): the loader then holds their bytes until the file is read."""
    return any(keeps_encoded(frames, resize, key, codec) for codec in CODECS)


def compressed_stream(values, key, frames, resize, where, verify=False):
    """A stream's per-message values, some ``Compressed``, as ``from_episodes``
    takes them: ``EncodedFrames`` of the bytes as they are, where every value
    is a compressed image of one codec that ``keeps_encoded`` keeps for
    ``key`` (they decode to (H, W, 3) uint8, as ``decode_image`` gives); else
    a list with each compressed image decoded by ``decode_image``. ``verify``:
    decode the kept frames once here, so that a corrupt one is a LoaderError
    naming ``where`` and the message."""
    codecs = {codec_of(v) if isinstance(v, Compressed) else None for v in values}
    codec = codecs.pop() if len(codecs) == 1 else None
    if values and codec is not None and keeps_encoded(frames, resize, key, codec):
        images = [v.data for v in values]
        try:
            shape, dtype = host_codec.probe(images[0], codec, where)
        except ValueError:  # decoded below, with decode_image's error
            shape, dtype = None, None
        if dtype == torch.uint8:
            kept = EncodedFrames(images, codec, (*shape[:2], 3))
            if verify:
                verify_frames(kept, f"{where}: cannot decode the image: ", "message")
            return kept
    return [decode_image(v.data, where) if isinstance(v, Compressed) else v for v in values]
