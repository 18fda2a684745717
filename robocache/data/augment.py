"""Augmentation on the data side: ``Augment`` (the user's arguments and the
draws of one key) and ``KeyAugmentation`` (a sampler's augmented keys: each
batch's draws from (seed, step, rank), and ``robocache.ops.augment``, which
applies them on the batch's device).

Random crops, rotations and colour jitter per window: every frame of a
window shares its window's draw, so the motion between frames is untouched;
cameras share it too unless ``share_cameras=False``. The draws follow
torchvision's ``RandomResizedCrop`` / ``RandomCrop``, ``RandomRotation`` and
``ColorJitter`` (ranges, fallbacks, a random jitter order), made for the
whole batch at once on the host's generator."""

import math
import numbers

import torch

from ..ops.augment import augment as augment_op
from .seeds import hashed

_WHERE = "Augment"
_SAMPLER = "WindowSampler"
# The jitter's ops in the order of the parameter columns.
_JITTERS = ("brightness", "contrast", "saturation", "hue")


def _pair(value, name, lo, hi, *, centre=None):
    """A (min, max) range from a number or a pair, within [lo, hi]. A number
    v gives (centre - v, centre + v) (clipped at lo) when ``centre`` is set,
    else (-v, v)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        v = float(value)
        if not v >= 0 or math.isinf(v):
            raise ValueError(
                f"{_WHERE}: {name} must be a number >= 0 or a (min, max) pair; got {value!r}"
            )
        pair = (max(lo, centre - v), centre + v) if centre is not None else (-v, v)
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        if not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in value):
            raise ValueError(f"{_WHERE}: {name} must hold two numbers; got {value!r}")
        pair = (float(value[0]), float(value[1]))
        if not all(math.isfinite(v) for v in pair):
            raise ValueError(
                f"{_WHERE}: {name} must be a (min, max) range of finite numbers; got {value!r}"
            )
    else:
        raise ValueError(f"{_WHERE}: {name} must be a number or a (min, max) pair; got {value!r}")
    if not (lo <= pair[0] <= pair[1] <= hi):
        raise ValueError(
            f"{_WHERE}: {name} must be a range (min, max) with {lo} <= min <= max <= {hi}; got "
            f"{value!r}"
        )
    return pair


def _size(value, name):
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value, value)
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in value)
        or min(value) < 1
    ):
        raise ValueError(
            f"{_WHERE}: {name} must be a positive int or (height, width); got {value!r}"
        )
    return (int(value[0]), int(value[1]))


class Augment:
    """Per-window augmentation of one image key (``WindowSampler(augment=
    {key: Augment(...)})``), with torchvision's arguments.

    Args:
        crop_size: (height, width) or an int: the output frames' size.
            Without ``crop_scale`` a random crop of this size (torchvision's
            ``RandomCrop``); None: the frames' own size.
        crop_scale: (min, max) fractions of the frame's area, in (0, 1]: a
            random resized crop (``RandomResizedCrop``: ``crop_ratio`` the
            range of aspect ratios, 10 tries then a centre crop), resized to
            ``crop_size`` (bilinear, antialiased).
        crop_ratio: (min, max) aspect ratios (width / height) of the crop.
        degrees: a random rotation in (-degrees, degrees), or a (min, max)
            range within [-180, 180]: bilinear, about the centre, zero fill.
        brightness, contrast, saturation: factors drawn from
            (max(0, 1 - v), 1 + v), or a (min, max) range of factors >= 0.
        hue: a shift drawn from (-v, v), v <= 0.5, or a (min, max) range in
            [-0.5, 0.5]. A jitter of 0 is not applied; the others are
            applied in an order drawn per window, as ``ColorJitter`` does.
        share_cameras: keys with ``share_cameras=True`` draw from one stream
            of numbers, so cameras of one size get the same crop, angle and
            jitter per window; False: this key draws on its own.
    """

    def __init__(
        self,
        crop_size=None,
        crop_scale=None,
        crop_ratio=(3 / 4, 4 / 3),
        degrees=0,
        brightness=0,
        contrast=0,
        saturation=0,
        hue=0,
        share_cameras=True,
    ):
        self.crop_size = _size(crop_size, "crop_size")
        self.crop_scale = None
        if crop_scale is not None:
            self.crop_scale = _pair(crop_scale, "crop_scale", 0.0, 1.0)
            if self.crop_scale[0] <= 0:
                raise ValueError(f"{_WHERE}: crop_scale must be above 0; got {crop_scale!r}")
        self.crop_ratio = _pair(crop_ratio, "crop_ratio", 0.0, math.inf)
        if self.crop_ratio[0] <= 0:
            raise ValueError(f"{_WHERE}: crop_ratio must be above 0; got {crop_ratio!r}")
        self.degrees = _pair(degrees, "degrees", -180.0, 180.0)
        self.jitter = {}
        for name, value in (
            ("brightness", brightness),
            ("contrast", contrast),
            ("saturation", saturation),
        ):
            if value != 0:
                self.jitter[name] = _pair(value, name, 0.0, math.inf, centre=1.0)
        if hue != 0:
            self.jitter["hue"] = _pair(hue, "hue", -0.5, 0.5)
        if not isinstance(share_cameras, bool):
            raise ValueError(
                f"{_WHERE}: share_cameras must be True or False; got {share_cameras!r}"
            )
        self.share_cameras = share_cameras

    def __repr__(self):
        parts = [f"crop_size={self.crop_size}"]
        if self.crop_scale:
            parts += [f"crop_scale={self.crop_scale}", f"crop_ratio={self.crop_ratio}"]
        if self.degrees != (0.0, 0.0):
            parts.append(f"degrees={self.degrees}")
        parts += [f"{k}={v}" for k, v in self.jitter.items()]
        return f"Augment({', '.join(parts)}, share_cameras={self.share_cameras})"

    def output_size(self, height, width):
        """The augmented frames' (height, width) for frames of height x width."""
        if self.crop_size is None:
            return (height, width)
        if self.crop_scale is None and (self.crop_size[0] > height or self.crop_size[1] > width):
            raise ValueError(
                f"{_WHERE}: crop_size {self.crop_size} is larger than the frames "
                f"({height} x {width}); give crop_scale for a resized crop"
            )
        return self.crop_size

    def draw(self, windows, height, width, generator):
        """(windows, 10) float32 parameters for ``robocache.ops.augment``,
        on the host, from ``generator``: a row per window."""
        g, B = generator, windows
        out_h, out_w = self.output_size(height, width)
        rows = torch.full((B, 10), math.nan, dtype=torch.float32)
        if self.crop_scale is not None:
            top, left, h, w = self._resized_crops(B, height, width, g)
        else:
            h = torch.full((B,), out_h if self.crop_size else height, dtype=torch.float64)
            w = torch.full((B,), out_w if self.crop_size else width, dtype=torch.float64)
            top = torch.floor(torch.rand(B, generator=g, dtype=torch.float64) * (height - h + 1))
            left = torch.floor(torch.rand(B, generator=g, dtype=torch.float64) * (width - w + 1))
        rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3] = top, left, h, w
        lo, hi = self.degrees
        angle = torch.rand(B, generator=g, dtype=torch.float64) * (hi - lo) + lo
        rows[:, 4] = angle if (lo, hi) != (0.0, 0.0) else 0.0
        for column, name in enumerate(_JITTERS, start=5):
            u = torch.rand(B, generator=g, dtype=torch.float64)
            if name in self.jitter:
                lo, hi = self.jitter[name]
                rows[:, column] = u * (hi - lo) + lo
        orders = torch.rand(B, 4, generator=g).argsort(dim=1)  # a permutation per window
        rows[:, 9] = (orders << torch.tensor([6, 4, 2, 0])).sum(1).float()
        return rows

    def _resized_crops(self, B, height, width, g):
        """RandomResizedCrop's boxes, all windows at once: the first of 10
        tries that fits, else the centre crop of its fallback."""
        tries = 10
        area = height * width
        scale = torch.rand(B, tries, generator=g, dtype=torch.float64)
        lo, hi = self.crop_scale
        target = area * (scale * (hi - lo) + lo)
        log_lo, log_hi = math.log(self.crop_ratio[0]), math.log(self.crop_ratio[1])
        ratio = torch.exp(
            torch.rand(B, tries, generator=g, dtype=torch.float64) * (log_hi - log_lo) + log_lo
        )
        w = torch.round(torch.sqrt(target * ratio))
        h = torch.round(torch.sqrt(target / ratio))
        fits = (w > 0) & (w <= width) & (h > 0) & (h <= height)
        first = torch.where(fits.any(1), fits.float().argmax(1), torch.full((B,), -1))
        u_top = torch.rand(B, generator=g, dtype=torch.float64)
        u_left = torch.rand(B, generator=g, dtype=torch.float64)
        pick = first.clamp(min=0)[:, None]
        h, w = h.gather(1, pick)[:, 0], w.gather(1, pick)[:, 0]
        # The fallback: the whole frame, cut to the ratio range.
        in_ratio = width / height
        if in_ratio < self.crop_ratio[0]:
            fh, fw = round(width / self.crop_ratio[0]), width
        elif in_ratio > self.crop_ratio[1]:
            fh, fw = height, round(height * self.crop_ratio[1])
        else:
            fh, fw = height, width
        missed = first < 0
        h = torch.where(missed, float(fh), h)
        w = torch.where(missed, float(fw), w)
        top = torch.floor(u_top * (height - h + 1))
        left = torch.floor(u_left * (width - w + 1))
        top = torch.where(missed, float((height - fh) // 2), top)
        left = torch.where(missed, float((width - fw) // 2), left)
        return top, left, h, w


def augment_generator(seed, step, rank, stream):
    """The host generator of one batch's draws: fixed by (seed, step, rank)
    and the stream of numbers (shared cameras, or one key)."""
    return torch.Generator().manual_seed(hashed(f"augment,{seed},{step},{rank},{stream}", 63))


class KeyAugmentation:
    """A sampler's ``augment=``: key -> (Augment, frame size, output size,
    output form), checked against each key's frames once.

    ``salt`` names this sampler's stream of numbers (a mixture's stores each
    have their own: ``"store i"``; a sampler of one store has "")."""

    def __init__(self, augment, plans, store, salt=""):
        if not isinstance(augment, dict):
            raise TypeError(f"{_SAMPLER}: augment must be a dict key -> Augment; got {augment!r}")
        by_key = {p.key: p for p in plans}
        self.keys, self.salt = {}, salt
        for key, aug in augment.items():
            if key not in by_key:
                raise ValueError(
                    f"{_SAMPLER}: augment names {key!r}, which is not in delta_timestamps"
                )
            if not isinstance(aug, Augment):
                raise TypeError(
                    f"{_SAMPLER}: augment[{key!r}] must be a robocache.data.Augment; got "
                    f"{type(aug).__name__}"
                )
            stream, plan = store[key], by_key[key]
            shape = tuple(stream.sample_shape)
            if stream.sample_dtype != torch.uint8 or len(shape) != 3 or shape[-1] not in (1, 3):
                raise ValueError(
                    f"{_SAMPLER}: augment[{key!r}]: augmentation takes uint8 (H, W, C) frames "
                    f"with 1 or 3 channels; {key!r} holds {stream.sample_dtype} samples of shape "
                    f"{shape}"
                )
            if plan.scale is not None:
                raise ValueError(
                    f"{_SAMPLER}: augment[{key!r}] and normalize[{key!r}] together: normalise "
                    "augmented frames in the policy (the store's statistics are per pixel of "
                    "the frames as stored)"
                )
            try:
                out = aug.output_size(shape[0], shape[1])
            except ValueError as e:
                raise ValueError(f"{_SAMPLER}: augment[{key!r}]: {e}") from None
            form = "float_chw" if plan.to_chw else "float" if plan.to_float else "uint8"
            self.keys[key] = (aug, shape[:2], out, form)

    def params(self, windows, seed, step, rank, device, parts=None):
        """key -> (windows, 10) float32 parameters on ``device``. ``parts``:
        [(salt, window positions)], each part drawn from its own salt's
        stream, as a sampler with that salt draws its windows (a packed
        mixture's stores); default: one part, this sampler's salt."""
        out = {}
        if parts is None:
            parts = [(self.salt, None)]
        for key, (aug, (height, width), _, _) in self.keys.items():
            rows = torch.empty((windows, 10)) if parts[0][1] is not None else None
            for salt, where in parts:
                # Shared cameras start the same stream of numbers, so they draw alike.
                stream = f"{salt}/shared" if aug.share_cameras else f"{salt}/{key}"
                g = augment_generator(seed, step, rank, stream)
                if where is None:
                    rows = aug.draw(windows, height, width, g)
                elif where.numel():
                    rows[where] = aug.draw(where.numel(), height, width, g)
            if device.type == "cuda":
                rows = rows.pin_memory().to(device, non_blocking=True)
            out[key] = rows
        return out

    def apply(self, key, values, params):
        """``values`` (B, W, H, W', C) uint8 on the batch's device, augmented
        into the key's form."""
        _, _, size, form = self.keys[key]
        return augment_op(values, params, size, form)
