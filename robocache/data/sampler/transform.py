"""The transform: what happens to a batch after the cut. Each key's
augmentation (``robocache.data.augment``), its frames as float and
channels-first, its normalisation, and the move to the batch's device; then
the batch dict."""

import torch

from ..time import ns_to_seconds


def move(t, device):
    """``t`` on ``device``: non-blocking host-to-device only (a device-to-host
    copy must be complete before the host reads it)."""
    return t.to(device, non_blocking=t.device.type == "cpu" and device.type != "cpu")


def key_values(plan, values, device):
    """One key's windows as the batch holds them, when not augmented."""
    values = move(values, device)
    if plan.to_float:
        values = values.float().div_(255)
    if plan.scale is not None:
        values = torch.addcmul(plan.shift, values, plan.scale)
    if plan.to_chw:  # (B, W, H, W', C) -> (B, W, C, H, W')
        values = values.movedim(-1, -3)
    return values


class Transform:
    """``transform(cut, index, step, parts)`` -> the batch dict: every key's
    windows and ``_is_pad`` (and ``_age`` in seconds with ``key_age``), then
    ``index`` and the anchor rows' tables (``row_names``).

    ``augmentation``: a ``KeyAugmentation``, whose keys come out of the
    augmentation in their form; each batch's draws are fixed by (seed,
    step, rank), and ``parts`` splits them as ``KeyAugmentation.params``
    says."""

    def __init__(self, plans, row_names, device, key_age, augmentation, seed, rank):
        self.plans, self.row_names, self.device = plans, list(row_names), device
        self.key_age, self.augmentation = key_age, augmentation
        self.seed, self.rank = seed, rank

    def __call__(self, cut, index, step=None, parts=None):
        device = self.device
        params = {}
        if self.augmentation is not None:
            params = self.augmentation.params(
                index.numel(), self.seed, step, self.rank, device, parts
            )
        batch = {}
        for plan, values, is_pad, age in zip(self.plans, cut.outs, cut.pads, cut.ages):
            if plan.key in params:
                values = self.augmentation.apply(plan.key, move(values, device), params[plan.key])
            else:
                values = key_values(plan, values, device)
            batch[plan.key] = values
            batch[f"{plan.key}_is_pad"] = move(is_pad, device)
            if self.key_age:
                batch[f"{plan.key}_age"] = move(ns_to_seconds(age), device)
        batch["index"] = move(index, device)
        for name, t in zip(self.row_names, cut.rows):
            batch[name] = move(t, device)
        return batch
