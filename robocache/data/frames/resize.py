"""Frames resized once, at ingest: bilinear with antialiasing (as
``torch.nn.functional.interpolate(mode="bilinear", antialias=True)`` and
torchvision's ``resize(antialias=True)``), rounded back to the frames' dtype."""

import torch
import torch.nn.functional as F

from .encoding import frame_kind

# Frames resized a chunk at a time, so that the float32 temporaries stay small.
_CHUNK_BYTES = 256 << 20
# The dtypes of frames: 8-bit images and 16-bit depth.
_FRAME_DTYPES = (torch.uint8, torch.uint16)


def resize(frames, size):
    """(N, H, W[, C]) integer frames as (N, *size[, C]) of the same dtype."""
    height, width = size
    if tuple(frames.shape[1:3]) == (height, width):
        return frames
    flat = frames.dim() == 3
    x = frames.unsqueeze(-1) if flat else frames
    n, h, w, c = x.shape
    per_frame = max(1, h * w * c * 4)
    step = max(1, _CHUNK_BYTES // per_frame)
    out = torch.empty((n, height, width, c), dtype=frames.dtype, device=frames.device)
    top = float(torch.iinfo(frames.dtype).max)
    for start in range(0, n, step):
        chunk = x[start : start + step].permute(0, 3, 1, 2).float()
        small = F.interpolate(chunk, size=(height, width), mode="bilinear", antialias=True,
                              align_corners=False)  # fmt: skip
        out[start : start + step] = small.round_().clamp_(0, top).permute(0, 2, 3, 1)
    return out.squeeze(-1) if flat else out


def resizes(shape, dtype, what):
    """Whether ingest's ``resize`` applies to samples of ``shape`` and
    ``dtype``: yes for (H, W) grey frames and for the (H, W, C) frames an
    image codec holds (uint8 with C of 1, 3 or 4; uint16 with C of 1); no
    for samples that are not uint8 or uint16 of 2 or 3 axes. Other uint8 and
    uint16 samples of 3 axes ((C, H, W), or C of 2) are a ValueError naming
    ``what``: the sampler takes them for frames, which resize would leave
    at their size."""
    if dtype not in _FRAME_DTYPES or len(shape) not in (2, 3):
        return False
    if len(shape) == 2 or frame_kind(tuple(shape), dtype) is not None:
        return True
    raise ValueError(
        f"{what}: resize is asked, and the samples are {tuple(shape)} "
        f"{str(dtype).removeprefix('torch.')}, which are not frames it resizes: (H, W) grey, "
        "(H, W, C) uint8 with C of 1, 3 or 4, or (H, W, 1) uint16; give the frames as "
        "(H, W, C)"
    )


def check_size(size, where):
    """``size`` as (H, W) of positive ints, or a ValueError naming ``where``."""
    if size is None:
        return None
    if (
        not isinstance(size, (tuple, list))
        or len(size) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in size)
    ):
        raise ValueError(f"{where}: resize must be (height, width), two ints > 0; got {size!r}")
    return (int(size[0]), int(size[1]))
