"""What the frame tests share: each frame of a key as the sampler gives it,
Pillow's decode of encoded bytes, JPEG's loss against raw frames (by
peak signal-to-noise ratio: the tests' small, noisy frames at quality 90
keep 31 dB and more), and the GPU decoder's pixels against Pillow's (each
of its shares' tolerance)."""

import io

import numpy as np
import pytest
import torch

from robocache.data import WindowSampler
from robocache.data.frames.decoders import nvimgcodec

MIN_PSNR_DB = 28.0
WHY_NOT = nvimgcodec.unavailable()
requires_gpu_decoder = pytest.mark.skipif(
    WHY_NOT is not None, reason=f"the GPU frame decoder: {WHY_NOT}"
)


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


MEAN_TOLERANCE = 0.1


def gpu_tolerance(hardware_share, host_share, kernels=True):
    """The host's share and robocache's kernels give libjpeg-turbo's pixels,
    as Pillow's; the hardware engines' are those but for a grey level in
    upsampled chroma; nvJPEG's CUDA decoder's (the rest, where the kernels
    are not asked for) up to 3 grey levels off in colour, in few pixels."""
    if not kernels and hardware_share + host_share < 1.0:
        return 3
    return 1 if hardware_share > 0 else 0


def assert_gpu_pixels_close(got, expected, hardware_share, host_share=0.0, kernels=True):
    """The GPU decoder's pixels within its shares' tolerance of ``expected``."""
    diff = (got.int() - expected.int()).abs()
    assert diff.max() <= gpu_tolerance(hardware_share, host_share, kernels), int(diff.max())
    assert diff.double().mean() <= MEAN_TOLERANCE, float(diff.double().mean())
