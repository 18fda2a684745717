"""The one image decode of the loaders: PNG, JPEG and the other formats
PIL reads, to (H, W, C) uint8 frames, with errors that name the frame; and
the codec of images that arrive encoded, from their first bytes."""

import io

import numpy as np

from ..errors import LoaderError

_MODES = {1: "L", 3: "RGB", 4: "RGBA"}
_MAGIC = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG"}


def encoded_codec(images):
    """``"jpeg"`` or ``"png"`` where every one of ``images`` (bytes-like)
    starts as that codec's files do; None where they mix codecs, are of
    another format, or there are none."""
    for codec, magic in _MAGIC.items():
        if images and all(bytes(image[: len(magic)]) == magic for image in images):
            return codec
    return None


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
