"""The cut: ``robocache.ops.anchor_windows`` once per device a batch's keys
are cut on, through the operator's wrapper.

Keys whose windows are cut on the GPU (values there, or pinned and read by
the kernel directly) share one launch; keys cut on the host (values mapped
from the store's file, in ordinary host memory, or encoded frames cut over
their row numbers) share another. Each launch has its own copy of the
anchor stream's times and offsets and of the anchor rows' tables."""

from dataclasses import dataclass

import torch

from ...ops import anchor_windows


@dataclass
class Cut:
    """A batch's windows, in the plans' key order: per key its windows
    (B, W, *shape), ``is_pad`` (B, W) and ages (B, W) ns; and the anchor
    rows' tables at the batch's anchors."""

    outs: list
    pads: list
    ages: list
    rows: list


def _on(tensor, device):
    """``tensor`` on ``device``: a host tensor (pinned, read ahead) copied
    there on the current CUDA stream, whose event keeps its memory until
    the copy is done."""
    return tensor if tensor.device == device else tensor.to(device, non_blocking=True)


def _tolerance(ns):
    return None if ns < 0 else ns


class WindowCut:
    """``cut(index, substitutes)`` -> a Cut. ``row_numbers``: key position ->
    the (N, 1) rows cut in place of that key's values (encoded frames);
    ``stand_ins``: key position -> (values, times, offsets) held in place
    of that key's stream, which every batch substitutes."""

    def __init__(
        self, store, anchor, plans, row_tables, edge_tolerance, row_numbers, stand_ins=None
    ):
        groups = {}
        for k, plan in enumerate(plans):
            groups.setdefault(plan.cut_on, []).append(k)
        anchor_stream = store[anchor]
        self.calls = []
        for device, ks in groups.items():
            streams = [
                stand_ins[k] if stand_ins and k in stand_ins
                else (row_numbers.get(k, s.values), s.times, s.offsets)
                for k, s in ((k, store[plans[k].key]) for k in ks)
            ]  # fmt: skip
            arguments = dict(
                values=[values for values, _, _ in streams],
                times=[times.to(device) for _, times, _ in streams],
                offsets=[offsets.to(device) for _, _, offsets in streams],
                deltas=[plans[k].deltas.to(device) for k in ks],
                anchor_offsets=anchor_stream.offsets.to(device),
                anchor_times=anchor_stream.times.to(device),
                modes=[plans[k].mode for k in ks],
                intervals=[plans[k].interval for k in ks],
                tolerances=[_tolerance(plans[k].tolerance) for k in ks],
                edge_tolerance=edge_tolerance,
                anchor_rows=[t.to(device) for t in row_tables.values()],
            )
            self.calls.append((device, ks, arguments))
        self.count = len(plans)

    def __call__(self, index, substitutes=None):
        """The windows of the batch anchored at ``index``; ``substitutes``:
        key position -> (values, times, offsets) cut in place of that key's
        stream (a mapped key's rows read ahead, as a stream of their own;
        copied to the device it is cut on)."""
        K = self.count
        cut = Cut([None] * K, [None] * K, [None] * K, None)
        for device, ks, arguments in self.calls:
            here = index if index.device == device else index.to(device, non_blocking=True)
            if substitutes and any(k in substitutes for k in ks):
                arguments = dict(arguments)
                for name, part in (("values", 0), ("times", 1), ("offsets", 2)):
                    arguments[name] = [
                        _on(substitutes[k][part], device) if k in substitutes else t
                        for k, t in zip(ks, arguments[name])
                    ]
            outs, pads, ages, _, rows = anchor_windows(index=here, **arguments)
            cut.rows = rows if cut.rows is None else cut.rows
            for j, k in enumerate(ks):
                cut.outs[k], cut.pads[k], cut.ages[k] = outs[j], pads[j], ages[j]
        return cut

    def timeline(self, k):
        """Key position k as its launch holds it: (values, times, offsets,
        deltas, (anchor_offsets, anchor_times)), on the device it is cut on."""
        for _, ks, arguments in self.calls:
            if k in ks:
                j = ks.index(k)
                anchor = (arguments["anchor_offsets"], arguments["anchor_times"])
                return tuple(arguments[n][j] for n in ("values", "times", "offsets", "deltas")) + (
                    anchor,
                )
        raise KeyError(k)

    def check(self, index_device):
        """Every check of the operator, once, on an empty batch."""
        self(torch.empty(0, dtype=torch.int64, device=index_device))


def rows_around(plan, row_numbers, times, offsets, anchor, index, edge_tolerance, **rule):
    """The host's cut of one key over its row numbers: (B, W, 1) rows and
    (B,) episodes, on the device of its arguments. ``rule`` overrides the
    plan's (mode, deltas, interval, tolerance)."""
    mode = rule.get("mode", plan.mode)
    deltas = rule["deltas"] if "deltas" in rule else plan.deltas.cpu()
    interval = rule.get("interval", plan.interval)
    tolerance = rule.get("tolerance", plan.tolerance)
    outs, _, _, episode, _ = anchor_windows(
        [row_numbers], [times], [offsets], [deltas], anchor[0], anchor[1], index, mode,
        intervals=interval, tolerances=_tolerance(tolerance), edge_tolerance=edge_tolerance,
    )  # fmt: skip
    return outs[0], episode
