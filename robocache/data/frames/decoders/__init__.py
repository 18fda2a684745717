"""The decoder seam: every JPEG and PNG decode of the project goes through
one of these backends, which share one interface,
``decode(images, encoding, out=None, name=None, cuda_stream=None)``: decode
these encoded frames into this (N, H, W, C) tensor, on this CUDA stream.

- ``host.py``: simplejpeg or Pillow on the host's thread pool (JPEG and PNG);
- ``nvimgcodec.py``: nvImageCodec on the GPU (JPEG), the extra
  ``robocache[nvimgcodec]``.

``FrameDecoding`` says which a sampler uses; ``decoder_for`` makes it."""

from dataclasses import dataclass

import torch

from . import nvimgcodec
from .host import IDCTS, HostDecoder

BACKENDS = ("auto", "host", "nvimgcodec")


@dataclass(frozen=True)
class FrameDecoding:
    """How a sampler decodes encoded frames, each batch.

    Attributes:
        backend: ``"auto"`` (the default: ``"nvimgcodec"`` for JPEG frames
            whose batches go to a CUDA device, where the extra
            ``robocache[nvimgcodec]`` is installed, else ``"host"``, with one
            warning naming the extra), ``"host"`` or ``"nvimgcodec"``. PNG
            frames and ``idct="fast"`` always decode on the host.
        idct: JPEG's inverse DCT: ``"accurate"`` (libjpeg-turbo's default, as
            Pillow and torchvision decode) or ``"fast"`` (libjpeg's fast
            integer IDCT, TensorFlow's ``decode_jpeg`` default, with which
            TFDS pipelines decode: the same pixels; on the host path, and
            needs simplejpeg).
        threads: the decoder's host threads (default: the CPUs this process
            may use, at most 16 on the host path; for the GPU decoder's host
            share, those CPUs but two, left to the training loop's own host
            threads: the caller's and autograd's).
        hardware_share: the share of each batch the GPU decoder gives to the
            GPU's hardware JPEG engines, 0 to 1 (default
            ``nvimgcodec.HARDWARE_SHARE``, 0): libjpeg-turbo's pixels but for
            a grey level in upsampled chroma.
        host_share: the share the GPU decoder decodes on the host's cores
            with libjpeg-turbo into pinned memory, copied to the GPU a call
            for each run of frames whose places there lie end to end, one a
            key (default ``nvimgcodec.HOST_SHARE``, 0). The rest goes to
            robocache's CUDA kernels, which decode as libjpeg-turbo does
            (Pillow's pixels), with little host work a frame: this kept a
            training step fastest. ``hardware_share + host_share`` is at
            most 1.
    """

    backend: str = "auto"
    idct: str = "accurate"
    threads: int = None
    hardware_share: float = None
    host_share: float = None

    def __post_init__(self):
        if self.backend not in BACKENDS:
            raise ValueError(
                f"FrameDecoding: backend must be one of {BACKENDS}; got {self.backend!r}"
            )
        if self.idct not in IDCTS:
            raise ValueError(f"FrameDecoding: idct must be 'accurate' or 'fast'; got {self.idct!r}")
        if self.backend == "nvimgcodec" and self.idct == "fast":
            raise ValueError("FrameDecoding: idct='fast' decodes on the host; use backend='host'")
        threads = self.threads
        if threads is not None and (
            isinstance(threads, bool) or not isinstance(threads, int) or threads < 1
        ):
            raise ValueError(f"FrameDecoding: threads must be an int >= 1; got {threads!r}")
        nvimgcodec.check_shares(self.hardware_share, self.host_share, "FrameDecoding")

    def backend_for(self, codec, device):
        """The backend that decodes frames of ``codec`` whose batches go to
        ``device``: ``"host"`` or ``"nvimgcodec"``. ``"nvimgcodec"`` where
        it cannot run is a RuntimeError saying why."""
        on_gpu = device is not None and torch.device(device).type == "cuda"
        if self.backend == "host" or codec != "jpeg" or self.idct == "fast":
            return "host"
        why = nvimgcodec.unavailable()
        if self.backend == "nvimgcodec":
            if why is not None:
                raise RuntimeError(f"FrameDecoding: backend='nvimgcodec' cannot run: {why}")
            if not on_gpu:
                raise ValueError("FrameDecoding: backend='nvimgcodec' decodes onto a CUDA device; "
                                 f"the batches go to {device}")  # fmt: skip
            return "nvimgcodec"
        if not on_gpu:
            return "host"
        if why is not None:
            nvimgcodec.warn_once(f"robocache: JPEG frames decode on the host, as {why}; the "
                                 f"GPU decoder is {nvimgcodec.EXTRA}")  # fmt: skip
            return "host"
        return "nvimgcodec"


def decoder_for(decoding, codec, device):
    """The decoder ``decoding`` gives frames of ``codec`` whose batches go to
    ``device``. With ``"auto"``, a GPU decoder that cannot start (a driver
    too old for the extra, a GPU without what it asks for) is a warning, and
    the host decodes."""
    if decoding.backend_for(codec, device) == "nvimgcodec":
        try:
            return nvimgcodec.GpuDecoder(
                device, decoding.hardware_share, decoding.threads,
                host_share=decoding.host_share,
            )  # fmt: skip
        except RuntimeError as e:
            if decoding.backend != "auto":
                raise
            nvimgcodec.warn_once(
                f"robocache: JPEG frames decode on the host: the GPU decoder did not start ({e})"
            )
    return HostDecoder(decoding.idct, decoding.threads)


__all__ = ["BACKENDS", "FrameDecoding", "HostDecoder", "IDCTS", "decoder_for"]
