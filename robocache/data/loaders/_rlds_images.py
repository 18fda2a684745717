"""The image features of RLDS episodes: each step's JPEG or PNG bytes, kept
encoded for ``from_episodes`` where the frames asked for are of their codec,
else decoded (PIL on the host, or torchvision on a device)."""

import io

from ..frames import EncodedFrames
from ._common import LoaderError
from ._images import decode_images, encoded_codec


def image_steps(blobs, shape, keeps, decode_on, here):
    """An image feature's steps: ``EncodedFrames`` of ``blobs`` where they
    are all of one codec and ``keeps(codec)``, else (n, *shape) uint8 frames
    decoded on ``decode_on`` (None: the host)."""
    if blobs:
        _check_channels(blobs[0], shape, here)
    codec = encoded_codec(blobs)
    if codec is not None and keeps(codec):
        return EncodedFrames(blobs, codec, shape)
    return _decode_images(blobs, shape, decode_on, here)


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
            if encoded_codec(blobs) == "jpeg":
                frames = decode_jpeg(data, mode=mode, device=device)
            else:
                frames = [decode_image(d, mode=mode).to(device) for d in data]
        except RuntimeError as e:
            raise LoaderError(f"{here}: an image does not decode: {e}") from e
        return torch.stack(frames).permute(0, 2, 3, 1).reshape(len(frames), *shape)
    return decode_images(blobs, shape, here)


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
