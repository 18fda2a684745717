"""JPEG and PNG on the host at ingest: encode (Pillow: libjpeg-turbo and
zlib) and read a frame's header. Each call takes many frames and spreads
them over a thread pool (Pillow lets go of the GIL while it codes).
Decoding goes through the decoders (decoders/)."""

import io
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

_PIL_FORMAT = {"jpeg": "JPEG", "png": "PNG"}
_pools = {}


def pil_image():
    """PIL.Image, or an ImportError naming the extra that brings it."""
    try:
        from PIL import Image
    except ImportError:
        raise ImportError(
            "robocache.data: encoding and decoding frames on the host needs Pillow: "
            "pip install robocache[frames]"
        ) from None
    return Image


def thread_pool(threads=None):
    """A pool of ``threads`` (default: the CPUs this process may use, at most 16), kept."""
    if threads is None:
        threads = min(16, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 4)
    if threads not in _pools:
        _pools[threads] = ThreadPoolExecutor(threads, thread_name_prefix="robocache-frames")
    return _pools[threads]


def _encode_one(frame, codec, quality):
    Image = pil_image()
    array = frame.numpy()
    if array.dtype == np.uint16:
        image = Image.fromarray(array.reshape(array.shape[:2]).astype("<u2"))  # mode I;16
    else:
        image = Image.fromarray(array.reshape(array.shape[:2]) if array.ndim == 2 or
                                array.shape[2] == 1 else array)  # fmt: skip
    out = io.BytesIO()
    if codec == "jpeg":
        image.save(out, "JPEG", quality=quality)
    else:
        image.save(out, "PNG", compress_level=1)  # fast; PNG is for exactness, not size
    return out.getvalue()


def encode(frames, codec, quality=90, threads=None):
    """Encoded bytes of each frame of ``frames`` ((N, H, W[, C]) uint8, or
    uint16 for PNG), in order."""
    frames = frames.cpu().contiguous()
    pool = thread_pool(threads)
    return list(pool.map(lambda f: _encode_one(f, codec, quality), frames))


def probe(image, codec, where):
    """(H, W, C) and dtype of one encoded frame, from its header."""
    Image = pil_image()
    try:
        with Image.open(io.BytesIO(image)) as im:
            if im.format != _PIL_FORMAT[codec]:
                raise ValueError(f"it is {im.format}, not {codec}")
            mode, (width, height) = im.mode, im.size
    except Exception as e:
        raise ValueError(f"{where}: not a readable {codec} image: {e}") from e
    if mode in ("I;16", "I;16B", "I"):
        return (height, width, 1), torch.uint16
    channels = {"L": 1, "RGB": 3, "RGBA": 4, "YCbCr": 3, "CMYK": 3, "P": 3, "LA": 4}.get(mode)
    if channels is None:
        raise ValueError(f"{where}: a {codec} image of PIL mode {mode!r} is not a frame")
    return (height, width, channels), torch.uint8


__all__ = ["encode", "pil_image", "probe", "thread_pool"]
