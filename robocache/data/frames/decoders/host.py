"""The host decoder: JPEG with simplejpeg where it is installed (2 to 3.5
times Pillow's rate on small frames, the same pixels), else Pillow; PNG
(RGBA, uint16 depth) with Pillow. Each call spreads its frames over a thread
pool; both libraries let go of the GIL while they decode. JPEG is decoded
with libjpeg-turbo's accurate integer IDCT, or with ``idct="fast"`` its
fast one (simplejpeg only), as TensorFlow's ``decode_jpeg`` does by
default."""

import io

import numpy as np
import torch

from ..codec import pil_image, thread_pool

IDCTS = ("accurate", "fast")
_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def _simplejpeg():
    try:
        import simplejpeg
    except ImportError:
        return None
    return simplejpeg


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
    Image = pil_image()
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


class HostDecoder:
    """Frames decoded on the host's thread pool (see the module)."""

    backend = "host"

    def __init__(self, idct="accurate", threads=None):
        self.idct, self.threads = idct, threads

    def decode(self, images, encoding, out=None, name=None, cuda_stream=None):
        """Each of ``images`` (bytes-like) decoded, as one (n, *shape) tensor
        in host memory, written into ``out`` where given (on a GPU: decoded
        on the host, then copied on ``cuda_stream``, default the current
        one). ``name(i)`` says where image i is from; a frame that does not
        decode raises a ValueError naming it."""
        host = out if out is not None and out.device.type == "cpu" else None
        if host is None:
            host = torch.empty((len(images), *encoding.shape), dtype=encoding.dtype,
                               pin_memory=out is not None)  # fmt: skip
        target = host.view(torch.int16) if encoding.dtype == torch.uint16 else host
        array = target.numpy()
        idct = self.idct

        def one(i):
            try:
                array[i] = decode_one(images[i], encoding, idct).view(array.dtype)
            except ImportError:
                raise
            except Exception as e:
                where = name(i) if name else f"frame {i}"
                raise ValueError(f"{where}: the {encoding.codec} frame does not decode: {e}") from e

        pool = thread_pool(self.threads)
        for future in [pool.submit(one, i) for i in range(len(images))]:
            future.result()
        if out is None or out is host:
            return host
        with torch.cuda.stream(
            cuda_stream if cuda_stream is not None else torch.cuda.current_stream(out.device)
        ):
            out.copy_(host, non_blocking=True)
        return out


def decode(images, encoding, threads=None, name=None, idct="accurate", out=None):
    """``HostDecoder(idct, threads).decode(images, encoding, out, name)``."""
    return HostDecoder(idct, threads).decode(images, encoding, out, name)
