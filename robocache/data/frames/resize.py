"""Frames resized once, at ingest: bilinear with antialiasing (as
``torch.nn.functional.interpolate(mode="bilinear", antialias=True)`` and
torchvision's ``resize(antialias=True)``), rounded back to the frames' dtype."""

import torch
import torch.nn.functional as F

# Frames resized a chunk at a time, so that the float32 temporaries stay small.
_CHUNK_BYTES = 256 << 20


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
