"""The sampler's ``augment=`` option: per image key an ``Augment``, checked
against the key's frames once; per batch the parameters drawn on the host
from (seed, step, rank), and the op that applies them on the batch's device,
where it also makes the float or channels-first form the key asks for."""

import torch

from ...ops.augment import augment as augment_op
from ..augment import Augment
from .draws import hashed

_WHERE = "WindowSampler"


def augment_generator(seed, step, rank, stream):
    """The host generator of one batch's draws: fixed by (seed, step, rank)
    and the stream of numbers (shared cameras, or one key)."""
    return torch.Generator().manual_seed(hashed(f"augment,{seed},{step},{rank},{stream}", 63))


class Augmentation:
    """Every augmented key of a sampler: key -> (Augment, frame size,
    output size, output form)."""

    def __init__(self, augment, plans, store):
        if not isinstance(augment, dict):
            raise TypeError(f"{_WHERE}: augment must be a dict key -> Augment; got {augment!r}")
        by_key = {p.key: p for p in plans}
        self.keys = {}
        # Set by a mixture's sampler, so that its stores' parts draw apart.
        self.salt = ""
        for key, aug in augment.items():
            if key not in by_key:
                raise ValueError(
                    f"{_WHERE}: augment names {key!r}, which is not in delta_timestamps"
                )
            if not isinstance(aug, Augment):
                raise TypeError(
                    f"{_WHERE}: augment[{key!r}] must be a robocache.data.Augment; got "
                    f"{type(aug).__name__}"
                )
            stream, plan = store[key], by_key[key]
            shape = tuple(stream.sample_shape)
            if stream.sample_dtype != torch.uint8 or len(shape) != 3 or shape[-1] not in (1, 3):
                raise ValueError(
                    f"{_WHERE}: augment[{key!r}]: augmentation takes uint8 (H, W, C) frames with "
                    f"1 or 3 channels; {key!r} holds {stream.sample_dtype} samples of shape {shape}"
                )
            if plan.scale is not None:
                raise ValueError(
                    f"{_WHERE}: augment[{key!r}] and normalize[{key!r}] together: normalise "
                    "augmented frames in the policy (the store's statistics are per pixel of "
                    "the frames as stored)"
                )
            try:
                out = aug.output_size(shape[0], shape[1])
            except ValueError as e:
                raise ValueError(f"{_WHERE}: augment[{key!r}]: {e}") from None
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
