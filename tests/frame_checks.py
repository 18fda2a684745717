"""What the frame tests share: each frame of a key as the sampler gives it,
Pillow's decode of encoded bytes, and JPEG's loss against raw frames (by
peak signal-to-noise ratio: the tests' small, noisy frames at quality 90
keep 31 dB and more)."""

import io

import numpy as np
import torch

from robocache.data import WindowSampler

MIN_PSNR_DB = 28.0


def every_frame(store, key):
    """Each frame of ``key`` as the sampler gives it (a window of one, at its own time)."""
    n = store[key].num_samples
    sampler = WindowSampler(store, {key: [0.0]}, anchor=key, batch_size=n, shuffle=False)
    return sampler.batch_at(range(n))[key][:, 0]


def pil_frames(blobs):
    """Each encoded image (bytes-like) as Pillow decodes it, (n, H, W, 3) uint8."""
    from PIL import Image

    def one(data):
        with Image.open(io.BytesIO(bytes(data))) as image:
            return np.asarray(image.convert("RGB"))

    return torch.from_numpy(np.stack([one(b) for b in blobs]))


def stored_frames(stream):
    """Every frame of an encoded stream, as Pillow decodes its own bytes."""
    bounds = stream.byte_offsets.tolist()
    data = stream.values.numpy()
    return pil_frames([data[a:b] for a, b in zip(bounds[:-1], bounds[1:])])


def psnr_db(a, b):
    mse = (a.double() - b.double()).square().mean()
    return float(10 * torch.log10(255**2 / mse))


def assert_near(decoded, raw):
    """Within JPEG's loss of the raw frames."""
    psnr = psnr_db(decoded, raw)
    assert psnr >= MIN_PSNR_DB, f"PSNR {psnr:.1f} dB"
