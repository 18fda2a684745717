"""``robocache.augment``: random crops, rotations and colour jitter of uint8
frames, with one row of parameters per window.

The wrapper over ``torch.ops.robocache.augment``. The parameters are drawn
elsewhere (``robocache.data.Augment`` draws them per window from the
sampler's seed and step); this op applies them. uint8 frames carry no
gradient, so the op has no autograd.
"""

import numbers

import torch

from .._ops import OPS, check_tensor, require_kernels

_OP = "robocache.augment"
OUTPUTS = ("uint8", "float", "float_chw")


def jitter_order(ops):
    """The ``order`` column for the jitter ops in the order given (a
    permutation of 0 brightness, 1 contrast, 2 saturation, 3 hue)."""
    ops = [int(o) for o in ops]
    if sorted(ops) != [0, 1, 2, 3]:
        raise ValueError(f"{_OP}: a jitter order is a permutation of 0, 1, 2, 3; got {ops}")
    return float(sum(o << (2 * (3 - k)) for k, o in enumerate(ops)))


def augment(images, params, size, output="uint8"):
    """Crops, resizes, rotates and jitters the frames of each window alike.

    Args:
        images: (B, F, H, W, C) uint8, C 1 or 3: the F frames of B windows,
            on the CPU or a CUDA device.
        params: (B, 10) float32 on the images' device, a row per window:
            ``top, left, crop_height, crop_width`` (the crop, whole pixels,
            inside the frame), ``angle`` (degrees, counter-clockwise about
            the centre; 0: none), the ``brightness``, ``contrast`` and
            ``saturation`` factors (>= 0) and the ``hue`` shift (in
            [-0.5, 0.5]), each NaN where not applied, and ``order`` (the
            jitter's order, see :func:`jitter_order`).
        size: (height, width) of the output, or one int for both.
        output: ``"uint8"`` (B, F, height, width, C); ``"float"`` the same
            as float32 in [0, 1]; ``"float_chw"`` (B, F, C, height, width)
            float32.

    What it computes equals torchvision's v2 transforms applied to each
    frame as uint8 (C, H, W): ``resized_crop(top, left, crop_height,
    crop_width, size, BILINEAR, antialias=True)``, then ``rotate(angle,
    BILINEAR, fill=0)``, then ``adjust_brightness``, ``adjust_contrast``,
    ``adjust_saturation`` and ``adjust_hue`` in the row's order, within one
    grey level (float rounding). The rotation reads the resized crop at its
    four bilinear taps in the same pass, so no intermediate image is made.

    The CPU checks the parameters' values; a CUDA call reads none on the
    host (a crop outside the frame is clamped into it).
    """
    check_tensor(images, "images", _OP)
    check_tensor(params, "params", _OP)
    require_kernels(_OP, images, params)
    height, width = _size(size)
    if output not in OUTPUTS:
        raise ValueError(f"{_OP}: output must be one of {OUTPUTS}; got {output!r}")
    return OPS.augment(images, params, height, width, output)


def _size(size):
    if isinstance(size, torch.SymInt):
        return size, size
    if isinstance(size, numbers.Integral) and not isinstance(size, bool):
        size = (size, size)
    if not isinstance(size, (tuple, list, torch.Size)) or len(size) != 2:
        raise ValueError(f"{_OP}: size must be an int or (height, width); got {size!r}")
    out = []
    for s in size:
        if isinstance(s, torch.SymInt):
            out.append(s)
            continue
        if isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 1:
            raise ValueError(f"{_OP}: size must be positive ints; got {size!r}")
        out.append(int(s))
    return tuple(out)
