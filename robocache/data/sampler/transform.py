"""What happens to a batch after the kernel: each key's augmentation, its
frames as float and channels-first, its normalisation, and the move to the
batch's device."""

import torch

from ..time import ns_to_seconds


def move(t, device):
    """``t`` on ``device``: non-blocking host-to-device only (a device-to-host
    copy must be complete before the host reads it)."""
    return t.to(device, non_blocking=t.device.type == "cpu" and device.type != "cpu")


def key_values(plan, values, device, augmentation=None, params=None):
    """One key's windows as the batch holds them. An augmented key
    (``params`` given) comes out of the augmentation in its form."""
    values = move(values, device)
    if params is not None:
        return augmentation.apply(plan.key, values, params)
    if plan.to_float:
        values = values.float().div_(255)
    if plan.scale is not None:
        values = torch.addcmul(plan.shift, values, plan.scale)
    if plan.to_chw:  # (B, W, H, W', C) -> (B, W, C, H, W')
        values = values.movedim(-1, -3)
    return values


def assemble(
    plans,
    outs,
    pads,
    ages,
    index,
    row_tables,
    rows,
    device,
    key_age,
    augmentation=None,
    params=None,
):
    """The batch dict: every key's windows and ``_is_pad`` (and ``_age`` in
    seconds with ``key_age``), then ``index`` and the anchor rows' tables.
    ``params``: key -> the augmentation's parameters of this batch."""
    batch = {}
    params = params or {}
    for plan, values, is_pad, age in zip(plans, outs, pads, ages):
        batch[plan.key] = key_values(plan, values, device, augmentation, params.get(plan.key))
        batch[f"{plan.key}_is_pad"] = move(is_pad, device)
        if key_age:
            batch[f"{plan.key}_age"] = move(ns_to_seconds(age), device)
    batch["index"] = move(index, device)
    for name, t in zip(row_tables, rows):
        batch[name] = move(t, device)
    return batch
