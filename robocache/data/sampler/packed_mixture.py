"""A mixture's batches from one packed store: the asked keys of every store,
back to back in one store on their CUDA device (a copy of those keys), with
an anchor stream of each store's anchor times. A batch is then one draw
kernel fed one number a step, one gather of the drawn anchors' rows, one
window launch for every key, and each store's normalisation, fill and width
mask gathered per window; all of it replayed from a CUDA graph (without
augmentation, which draws on the host). An iteration's step numbers are put
on the device a run at a time, behind a cursor the graph advances."""

from dataclasses import replace

import torch

from ..store import EpisodeStore, PackedStream
from .draws import Draws, step_base
from .graphs import COUNTS_REFERENCES, BatchGraphs
from .order import StepCursor
from .plan import masked_to, normalizer
from .store_batches import StoreBatches

# The packed store's anchor stream: each store's anchor times, no values.
ANCHOR = "mixture anchors"


def _same_device(a, b):
    """Whether two devices are one ("cuda" is the current CUDA device)."""
    if a.type != b.type:
        return False
    if a.type != "cuda":
        return True
    current = torch.cuda.current_device()
    return (a.index if a.index is not None else current) == (
        b.index if b.index is not None else current
    )


def packable(sampler):
    """None where every store keeps the asked keys and its anchor stream raw
    (not encoded, not mapped) on the sampler's device, with samples of one
    shape (1-D widths apart); else why not."""
    for key in sampler.keys:
        if sampler.layout[key][2]:  # 1-D widths, padded to the widest
            continue
        shapes = {
            tuple(sub.store[own].sample_shape)
            for i, sub in enumerate(sampler.samplers)
            if (own := sampler.mixture.store_key(i, key)) is not None
        }
        if len(shapes) > 1:
            return f"{key!r} has samples of shapes {sorted(shapes)} in different stores"
    for i, sub in enumerate(sampler.samplers):
        store = sub.store
        for own in [sampler.mixture.store_key(i, k) for k in sampler.keys] + [sub.anchor]:
            if own is None:
                continue
            stream = store[own]
            if stream.encoding is not None:
                return f"store {i}'s {own!r} holds encoded frames"
            if own in store.mapped:
                return f"store {i}'s {own!r} is mapped from its file"
            if not _same_device(stream.values.device, sampler.device) or not _same_device(
                stream.times.device, sampler.device
            ):
                return f"store {i}'s {own!r} is on {stream.values.device}"
    return None


def packed_nbytes(sampler):
    """Bytes the packed copy of the asked keys takes."""
    total = 0
    for i, sub in enumerate(sampler.samplers):
        for key in sampler.keys:
            own = sampler.mixture.store_key(i, key)
            if own is not None:
                s = sub.store[own]
                total += s.values.numel() * s.values.element_size() + s.times.numel() * 8
    return total


# Step keys put on the device at a time, while iterating.
STEPS_A_LOAD = 256


class PackedMixture:
    """One StoreBatches over the packed store, and the per-store tables."""

    def __init__(self, outer, delta_timestamps, options):
        mixture, device = outer.mixture, outer.device
        stores = [s.store for s in outer.samplers]
        streams, self.tables = {}, {}
        for key in outer.keys:
            streams[key] = self._pack_key(outer, key, stores, options.normalize)
        anchors = [store[s.anchor] for store, s in zip(stores, outer.samplers)]
        times = torch.cat([a.times for a in anchors])
        streams[ANCHOR] = PackedStream(
            torch.empty((times.numel(), 0), dtype=torch.uint8, device=device),
            times,
            _joined_offsets([a.offsets for a in anchors]),
        )
        sizes = torch.tensor([a.times.numel() for a in anchors], device=device)
        row_bases = sizes.cumsum(0) - sizes  # each store's first anchor-stream row
        episodes = {
            "episode_index": torch.cat([s.episodes["episode_index"] for s in stores]),
            "task_index": torch.cat(
                [s.episodes["task_index"] + off for s, off in zip(stores, outer.task_offsets)]
            ),
        }
        # The stores' times were checked where each was made.
        store = EpisodeStore(streams, episodes, outer.tasks, check=False)
        inner = replace(
            options, normalize=None, anchor=ANCHOR, prefetch=0, cuda_graph=False, shuffle=True
        )
        self.sampler = StoreBatches(store, delta_timestamps, inner)
        for key, t in self.tables.items():  # statistics of 0..255 values, frames made float
            if t["scale"] is not None and self.sampler.keys[key].to_float:
                t["scale"] = t["scale"] * 255
        # Each store's anchors: a contiguous run of the packed sampler's.
        rows = self.sampler.anchors
        bounds = torch.cat([row_bases, torch.tensor([times.numel()], device=device)])
        counts = torch.searchsorted(rows, bounds).diff().tolist()
        self.draws = Draws(mixture.weights, counts, device)
        # Per anchor position: its row in the packed anchor stream, and in its own store's.
        store_of = torch.repeat_interleave(
            torch.arange(len(counts), device=device), torch.tensor(counts, device=device)
        )
        self._rows = torch.stack([rows, rows - row_bases[store_of]])
        # Each packed store's number in the mixture (those of weight 0 left out).
        numbers = outer.store_numbers
        self._store_numbers = None if numbers is None else numbers.to(device)
        self.outer = outer
        self._base = torch.zeros(1, dtype=torch.int64, device=device)
        graphs = device.type == "cuda" and self.sampler.augmentation is None and COUNTS_REFERENCES
        self.graphs = BatchGraphs(2 + outer.prefetch, device) if graphs else None
        if self.graphs is not None:
            self.cursor = StepCursor(STEPS_A_LOAD, 1, device)
            self._from_cursor = lambda: self._batch(self.cursor.take(1))
            self._from_base = lambda: self._batch(self._base)

    def _pack_key(self, outer, key, stores, normalize):
        """The key's streams back to back (narrower widths padded, lacking
        stores empty), and its per-store tables: normalisation, fill, width."""
        batch_dtype, widest, ragged, lacking = outer.layout[key]
        # The samples as stored (the layout's are as the batch holds them).
        i = next(i for i in range(len(stores)) if outer.mixture.store_key(i, key))
        first = stores[i][outer.mixture.store_key(i, key)]
        dtype, widest = first.sample_dtype, widest if ragged else first.sample_shape
        device, fill = outer.device, outer.fill if batch_dtype.is_floating_point else 0
        values, times, offsets, widths, scales, shifts = [], [], [], [], [], []
        how = (normalize or {}).get(key)
        for i, store in enumerate(stores):
            own = outer.mixture.store_key(i, key)
            if own is None:
                values.append(torch.empty((0, *widest), dtype=dtype, device=device))
                times.append(torch.empty(0, dtype=torch.int64, device=device))
                offsets.append(
                    torch.zeros(store.num_episodes + 1, dtype=torch.int64, device=device)
                )
                widths.append(0)
                scales.append(torch.ones(widest, device=device))
                shifts.append(torch.zeros(widest, device=device))
                continue
            s = store[own]
            v = s.values
            if ragged and v.shape[-1] < widest[0]:
                v = torch.nn.functional.pad(v, (0, widest[0] - v.shape[-1]), value=fill)
            values.append(v)
            times.append(s.times)
            offsets.append(s.offsets)
            widths.append(s.values.shape[-1] if ragged else None)
            if how:
                scale, shift = normalizer(own, s, masked_to(how, s))
            else:
                scale, shift = torch.ones(()), torch.zeros(())
            scales.append(_padded(scale.to(device), widest, 1.0))
            shifts.append(_padded(shift.to(device), widest, 0.0))
        # Per store: where its windows hold the fill. 1-D keys: the widths a
        # narrower store lacks; others: every value of a store lacking the key
        # (a vector, as augmentation may have changed the frames' size).
        if ragged:
            filled = torch.zeros((len(stores), widest[0]), dtype=torch.bool, device=device)
            for i, w in enumerate(widths):
                filled[i, w:] = True
        else:
            filled = torch.tensor([w == 0 for w in widths], device=device)
        self.tables[key] = {
            "scale": torch.stack(scales) if how else None,
            "shift": torch.stack(shifts) if how else None,
            "filled": filled if (ragged or lacking) else None,
            "mask": ~filled if ragged else None,
            "fill": fill,
        }
        return PackedStream(torch.cat(values), torch.cat(times), _joined_offsets(offsets))

    def batch_at_step(self, step, graph=True):
        """The batch of ``step`` (``graph=False``: made now, with an input of
        its own, as an iteration that another took the cursor from makes
        its batches, perhaps on another stream than the graph's input is
        written on)."""
        outer = self.outer
        base = step_base(outer.seed, step, outer.rank)
        if self.graphs is None or not graph:
            return self._batch(torch.full((1,), base, device=self._base.device), step)
        self._base.fill_(base)
        return self.graphs.replay("base", self._from_base)

    def steps(self, steps):
        """A function making the batch of the i-th of ``steps`` (a range),
        called in order: from the cursor, its step keys loaded a run at a
        time (None where batches are not replayed from graphs)."""
        if self.graphs is None:
            return None
        outer, cursor = self.outer, self.cursor
        ring = self.graphs.ring("cursor", self._from_cursor, (cursor.step,))
        pin = self._base.is_cuda

        def make(i):
            if i % STEPS_A_LOAD == 0:
                run = steps[i : i + STEPS_A_LOAD]
                keys = torch.tensor([step_base(outer.seed, s, outer.rank) for s in run])
                cursor.load(keys.pin_memory() if pin else keys)
            return ring()

        return make

    def _batch(self, base, step=None):
        store, position = self.draws(base, self.outer.batch_size)
        rows, index = self._rows.index_select(1, position)  # one gather for both
        parts = None
        if self.sampler.augmentation is not None:  # each store's windows as its own draws them
            host = self.outer.sampler_draws(step)[0]
            numbers = self.outer.in_mixture(torch.arange(len(self.outer.samplers))).tolist()
            parts = [
                (f"store {number}", (host == i).nonzero().view(-1))
                for i, number in enumerate(numbers)
            ]
        batch = self.sampler.batch(rows, step=step, parts=parts)
        for key, t in self.tables.items():
            x = batch[key]
            chw = self.sampler.keys[key].to_chw
            if t["scale"] is not None:
                scale, shift = t["scale"][store], t["shift"][store]
                if chw:
                    scale, shift = scale.movedim(-1, -3), shift.movedim(-1, -3)
                x = torch.addcmul(shift.unsqueeze(1), x, scale.unsqueeze(1))
            if t["filled"] is not None and t["fill"] != 0:
                filled = t["filled"][store]  # (B, width): over the window; (B,): everywhere
                B, width = filled.shape[0], filled.shape[1:]
                filled = filled.view(B, *[1] * (x.dim() - 1 - len(width)), *width)
                x = torch.where(filled, t["fill"], x)
            batch[key] = x
            if t["mask"] is not None:
                batch[f"{key}_mask"] = t["mask"][store]
        batch["index"] = index
        numbers = self._store_numbers
        batch["dataset_index"] = store if numbers is None else numbers[store]
        return batch


def _padded(t, shape, value):
    """``t`` broadcast to ``shape``, a narrower last axis padded with ``value``."""
    if t.dim() and tuple(t.shape) != tuple(shape):
        t = torch.nn.functional.pad(t, (0, shape[-1] - t.shape[-1]), value=value)
    return t.float().expand(shape).contiguous()


def _joined_offsets(offsets):
    """Offsets of streams placed back to back, episodes in order."""
    parts, base = [], 0
    for off in offsets:
        parts.append(off[:-1] + base)
        base += int(off[-1])
    parts.append(torch.tensor([base], dtype=torch.int64, device=offsets[0].device))
    return torch.cat(parts)
