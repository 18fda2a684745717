"""JPEG and PNG on the host: encode at ingest (Pillow: libjpeg-turbo and
zlib), decode where no GPU decoder serves (JPEG with simplejpeg where it is
installed, 2 to 3.5 times Pillow's rate on small frames and the same
pixels; else Pillow), read a frame's header. Each call takes many frames
and spreads them over a thread pool (both let go of the GIL while they
code). Both decode JPEG with libjpeg-turbo's accurate integer IDCT, or
with ``idct="fast"`` its fast one (simplejpeg only), as TensorFlow's
``decode_jpeg`` does by default."""

import io
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from .encoding import FrameEncoding

_PIL_FORMAT = {"jpeg": "JPEG", "png": "PNG"}
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_pools = {}


def _pil():
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
    Image = _pil()
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
    Image = _pil()
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


def _simplejpeg():
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


IDCTS = ("accurate", "fast")


def decode_one(image, encoding, idct="accurate"):
    """One frame as an array of ``encoding``'s shape and dtype; a ValueError
    saying what is wrong where the bytes are not such a frame."""
    simplejpeg = _simplejpeg() if encoding.codec == "jpeg" else None
    if simplejpeg is not None:
        gray = len(encoding.shape) == 3 and encoding.shape[2] == 1
        array = simplejpeg.decode_jpeg(
            image, colorspace="GRAY" if gray else "RGB", fastdct=idct == "fast"
        )
        if array.shape[:2] != tuple(encoding.shape[:2]):
            raise ValueError(f"decoded to {array.shape}, not {tuple(encoding.shape)}")
        return array.reshape(encoding.shape)
    if idct != "accurate":
        raise ImportError(
            "robocache.data: idct='fast' decodes JPEG with simplejpeg: "
            "pip install robocache[frames]"
        )
    Image = _pil()
    with Image.open(io.BytesIO(image)) as im:
        im.draft(None, None)  # the whole image, never a reduced JPEG decode
        if encoding.dtype == torch.uint16:
            array = np.asarray(im, dtype=np.uint16) if im.mode.startswith("I") else None
            if array is None:
                raise ValueError(f"a {im.mode} image, not 16-bit depth")
        else:
            channels = encoding.shape[2] if len(encoding.shape) == 3 else 1
            array = np.asarray(im.convert(_MODES[channels]))
    if array.size != int(np.prod(encoding.shape)) or array.shape[:2] != tuple(encoding.shape[:2]):
        raise ValueError(f"decoded to {array.shape}, not {tuple(encoding.shape)}")
    return array.reshape(encoding.shape)


def decode(images, encoding, threads=None, name=None, idct="accurate", out=None):
    """Each of ``images`` (bytes-like) decoded, as one (n, *shape) tensor
    (written into ``out`` where given). ``name(i)`` says where image i is
    from; a frame that does not decode raises a ValueError naming it.
    ``idct``: JPEG's ``"accurate"`` or ``"fast"`` inverse DCT."""
    if out is None:
        out = torch.empty((len(images), *encoding.shape), dtype=encoding.dtype)
    target = out.view(torch.int16) if encoding.dtype == torch.uint16 else out
    array = target.numpy()

    def one(i):
        try:
            array[i] = decode_one(images[i], encoding, idct).view(array.dtype)
        except ImportError:
            raise
        except Exception as e:
            where = name(i) if name else f"frame {i}"
            raise ValueError(f"{where}: the {encoding.codec} frame does not decode: {e}") from e

    for future in [thread_pool(threads).submit(one, i) for i in range(len(images))]:
        future.result()
    return out


__all__ = ["IDCTS", "FrameEncoding", "decode", "decode_one", "encode", "probe", "thread_pool"]
