"""The ``anchor_windows`` calls of a batch: one for the keys whose times live
on the GPU (their values there, or pinned and read by the kernel directly),
and one on the host for the keys whose values are mapped from the store's
file or in ordinary host memory. Each call has its own copy of the anchor
stream's times and offsets and of the anchor rows' tables."""

import torch

from ..._ops import OPS


class WindowCalls:
    """``calls(index)`` -> (outs, pads, ages, rows) in the plans' key order,
    with ``rows`` the anchor rows' tables (from the first call)."""

    def __init__(self, store, anchor, plans, row_tables, edge_tolerance, frame_keys=()):
        # Encoded keys are cut on the host, over their row numbers (decode.py).
        rows_of = {f.position: f.row_numbers for f in frame_keys}
        host = torch.device("cpu")
        groups = {}
        for k, plan in enumerate(plans):
            device = host if k in rows_of else store[plan.key].times.device
            groups.setdefault(device, []).append(k)
        self.calls = []
        anchor_stream = store[anchor]
        for device, ks in groups.items():
            streams = [store[plans[k].key] for k in ks]
            arguments = dict(
                values=[rows_of[k] if k in rows_of else s.values for k, s in zip(ks, streams)],
                times=[s.times.to(device) for s in streams],
                offsets=[s.offsets.to(device) for s in streams],
                deltas=[plans[k].deltas.to(device) for k in ks],
                anchor_offsets=anchor_stream.offsets.to(device),
                anchor_times=anchor_stream.times.to(device),
                anchor_rows=[t.to(device) for t in row_tables.values()],
                modes=",".join(plans[k].mode for k in ks),
                intervals=[plans[k].interval for k in ks],
                tolerances=[plans[k].tolerance for k in ks],
                edge_tolerance=edge_tolerance,
            )
            self.calls.append((device, ks, arguments))
        self.devices = list(groups)
        self.plans = plans

    @property
    def on_host(self):
        """Whether any key's windows are cut on the host."""
        return any(d.type == "cpu" for d in self.devices)

    def __call__(self, index, substitutes=None):
        """The windows of the batch anchored at ``index``; ``substitutes``:
        key position -> (values, times, offsets) cut in place of that key's
        stream (a mapped key's rows read ahead, as a stream of their own)."""
        K = len(self.plans)
        outs, pads, ages, rows = [None] * K, [None] * K, [None] * K, None
        for device, ks, arguments in self.calls:
            here = index if index.device == device else index.to(device, non_blocking=True)
            if substitutes and any(k in substitutes for k in ks):
                arguments = dict(arguments)
                for name, part in (("values", 0), ("times", 1), ("offsets", 2)):
                    arguments[name] = [
                        substitutes[k][part] if k in substitutes else t
                        for k, t in zip(ks, arguments[name])
                    ]
            o, p, a, _, r = OPS.anchor_windows(index=here, **arguments)
            rows = r if rows is None else rows
            for j, k in enumerate(ks):
                outs[k], pads[k], ages[k] = o[j], p[j], a[j]
        return outs, pads, ages, rows

    def arguments_of(self, k):
        """The call arguments of the group that holds key position k."""
        return next(arguments for _, ks, arguments in self.calls if k in ks)

    def check(self, index_device):
        """Every check of the operator, once, on an empty batch."""
        self(torch.empty(0, dtype=torch.int64, device=index_device))
