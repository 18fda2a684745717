"""The image features of RLDS episodes: each step's JPEG or PNG bytes, kept
encoded for ``from_episodes`` where the frames asked for are of their codec,
else decoded (on the host, or JPEG on the GPU: the frame decoders)."""

import io

import torch

from ..frames import EncodedFrames, FrameEncoding
from ..frames.decoders import FrameDecoding, decoder_for
from ._common import LoaderError
from ._images import decode_images, encoded_codec, verify_frames


def image_steps(blobs, shape, keeps, decode_on, here, verify=False):
    """An image feature's steps: ``EncodedFrames`` of ``blobs`` where they
    are all of one codec and ``keeps(codec)`` (with ``verify``, each decoded
    once here: see ``verify_frames``), else (n, *shape) uint8 frames decoded
    on ``decode_on`` (None: the host)."""
    if blobs:
        _check_channels(blobs[0], shape, here)
    codec = encoded_codec(blobs)
    if codec is not None and keeps(codec):
        kept = EncodedFrames(blobs, codec, shape)
        if verify:
            verify_frames(kept, f"{here}, ")
        return kept
    return _decode_images(blobs, shape, decode_on, here)


def _decode_images(blobs, shape, device, here):
    """(n, *shape) uint8 frames, through the frame decoders: JPEG on the GPU
    where ``device`` is a CUDA device and the extra robocache[nvimgcodec] is
    installed (libjpeg-turbo's pixels), else with PIL on the host; the
    frames then on ``device`` (None: a host array)."""
    if device is not None and encoded_codec(blobs) == "jpeg" and shape[-1] in (1, 3):
        decoder = decoder_for(FrameDecoding(), "jpeg", device)
        if decoder.backend == "nvimgcodec":
            encoding = FrameEncoding("jpeg", tuple(shape), torch.uint8)
            try:
                return decoder.decode(blobs, encoding, name=lambda i: f"frame {i}")
            except ValueError as e:
                raise LoaderError(f"{here}: an image does not decode: {e}") from e
    frames = decode_images(blobs, shape, here)
    return frames if device is None else torch.from_numpy(frames).to(device)


def _check_channels(blob, shape, here):
    """An image that holds other channels than features.json declares is an
    error, not a conversion (PIL would turn RGB to gray for a declared 1):
    TFDS encodes each image with the channels it declares."""
    from PIL import Image

    with Image.open(io.BytesIO(bytes(blob))) as image:
        bands = image.getbands()
    if bands != ("P",) and len(bands) != shape[-1]:
        raise LoaderError(
            f"{here}: the images hold {len(bands)} channels ({image.mode}); "
            f"features.json declares {shape[-1]}"
        )
