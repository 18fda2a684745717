"""Batches of a ``Mixture``: each window's store is drawn by weight, then
its anchor uniformly among that store's anchors; each store with windows in
the batch is cut with one call of its own sampler (its own keys, rates,
statistics and placement), and the parts are scattered into one batch in
the mixture's names.

Where every store keeps the asked keys raw on the sampler's CUDA device,
they are packed into one store (packed_mixture.py): a batch is one window
launch, drawn on the device and replayed from a CUDA graph. Elsewhere each
store with windows in the batch is cut by its own sampler, the draws made on
the host (splitting a batch between stores needs each store's count there).
Both make the same draws from (seed, step, rank) (draws.py)."""

import math
import warnings
from dataclasses import replace

import torch

from .draws import Draws, step_base
from .packed_mixture import PackedMixture, packable, packed_nbytes
from .pipeline import batch_stream
from .plan import masked_to
from .store_batches import StoreBatches

_WHERE = "WindowSampler"
# The batch's fields that every store's sampler gives, besides the keys.
_ROW_FIELDS = ("index", "episode_index", "frame_index", "timestamp", "task_index")


def _translate(per_key, mixture, i):
    """A per-key dict in the mixture's names as store i's (keys it lacks
    dropped; a normalisation mask cut to the store's width)."""
    if not isinstance(per_key, dict):
        return per_key
    out = {}
    for key, value in per_key.items():
        own = mixture.store_key(i, key)
        if own is not None:
            out[own] = masked_to(value, mixture.stores[i][own])
    return out


def _anchors(mixture, anchor, numbers, keys):
    """Each store's anchor stream (None: its default) for the anchor asked,
    a name in the mixture's: an error where no store has it, a warning
    naming the stores that lack it, which anchor on their default."""
    if anchor is None:
        return [None] * len(mixture.stores)
    if not isinstance(anchor, str):
        raise TypeError(f"{_WHERE}: anchor must be a key name (a str); got {anchor!r}")
    own = [mixture.store_key(i, anchor) for i in range(len(mixture.stores))]
    lacking = [numbers[i] for i, name in enumerate(own) if name is None]
    if len(lacking) == len(own):
        raise ValueError(
            f"{_WHERE}: anchor {anchor!r} is no key of the mixture's stores of weight > 0 "
            f"(the mixture's keys: {keys})"
        )
    if lacking:
        warnings.warn(
            f"{_WHERE}: anchor {anchor!r}: the mixture's stores {lacking} lack it, and anchor "
            "on their own default stream (the key with the most samples); map a key of theirs "
            "onto that name (Mixture's key_map) to anchor them on it",
            stacklevel=4,
        )
    return own


class MixtureBatches:
    """Batches of a ``Mixture`` (see WindowSampler; the mixture's own options
    are on ``Mixture``). ``len()`` is ``epoch_steps``."""

    def __init__(self, mixture, delta_timestamps, options):
        if not isinstance(delta_timestamps, dict) or not delta_timestamps:
            raise ValueError(f"{_WHERE}: delta_timestamps must be a non-empty dict key -> deltas")
        unknown = sorted(set(delta_timestamps) - set(mixture.keys()))
        if unknown:
            raise ValueError(
                f"{_WHERE}: delta_timestamps names {unknown}, which no store of the mixture has "
                f"(the mixture's keys: {mixture.keys()})"
            )
        if options.shuffle is not True or options.drop_last:
            raise ValueError(
                f"{_WHERE}: a mixture's batches are drawn at random, step by step: shuffle=False "
                "and drop_last=True do not apply"
            )
        # Stores of weight 0 are never drawn: the samplers are of the others,
        # numbered here as in the mixture (``dataset_index``, ``draws``).
        whole, (mixture, drawn) = mixture, mixture.drawn()
        self.store_numbers = torch.tensor(drawn) if len(drawn) < len(whole) else None
        only_undrawn = sorted(set(delta_timestamps) - set(mixture.keys()))
        if only_undrawn:
            raise ValueError(
                f"{_WHERE}: delta_timestamps names {only_undrawn}, which only stores of weight 0 "
                "have, and those are never drawn"
            )
        anchors = _anchors(mixture, options.anchor, drawn, whole.keys())
        self.mixture, self.keys = mixture, list(delta_timestamps)
        self.batch_size, self.seed = options.batch_size, options.seed
        self.fill = mixture.fill
        self.samplers, self.task_offsets = [], []
        task_offsets, tasks = [], []  # in the whole mixture, as batches number tasks
        for store in whole.stores:
            task_offsets.append(len(tasks))
            tasks.extend(store.tasks)
        for i, store in enumerate(mixture.stores):
            own = {mixture.store_key(i, k): d for k, d in delta_timestamps.items()}
            own.pop(None, None)
            if not own:
                raise ValueError(
                    f"{_WHERE}: the mixture's store {drawn[i]} has none of the keys asked for "
                    "(give it weight 0, and it is never drawn)"
                )
            translated = {
                name: _translate(value, mixture, i)
                for name, value in options.__dict__.items()
                if isinstance(value, dict)
            }
            per_store = replace(
                options,
                **translated,
                anchor=anchors[i],
                prefetch=0,
                # a part's size changes every batch
                cuda_graph=False if options.cuda_graph is None else options.cuda_graph,
            )
            try:
                sampler = StoreBatches(store, own, per_store, salt=f"store {drawn[i]}")
            except (ValueError, TypeError) as e:
                raise type(e)(f"{e} (the mixture's store {drawn[i]})") from None
            self.samplers.append(sampler)
            self.task_offsets.append(task_offsets[drawn[i]])
        self.tasks = tasks
        self.rank, self.world_size = self.samplers[0].rank, self.samplers[0].world_size
        self.device = self.samplers[0].device
        self.layout = self._check_layout()
        self._windows = {key: len(delta_timestamps[key]) for key in self.keys}
        anchors = sum(s.num_anchors for s in self.samplers)
        self.epoch_steps = mixture.epoch_steps or max(
            1, math.ceil(anchors / (self.batch_size * self.world_size))
        )
        counts = [s.num_anchors for s in self.samplers]
        self._host_draws = Draws(mixture.weights, counts, torch.device("cpu"))
        self.packed = None
        packs = self._packs()
        self.prefetch = self._prefetch(options.prefetch, packs)
        self.stream = batch_stream(self.device, self.prefetch)
        if packs:
            self.packed = PackedMixture(self, delta_timestamps, options)
        self._cursor_user = None

    def _prefetch(self, prefetch, packs):
        """Batches made ahead on a side stream, on the GPU: by default not
        for a packed mixture (one graph replay a batch), and for one cut
        store by store, whose host-to-device copies of the draws would
        otherwise wait on the caller's step."""
        if self.device.type != "cuda":
            return 0
        if prefetch is None:
            return 0 if packs else 1
        return prefetch

    def _packs(self):
        """Whether to pack: ``Mixture(pack=...)``; None packs on a CUDA device
        where it can and the copy takes at most half its free memory."""
        pack = self.mixture.pack
        if pack is False:
            return False
        why_not = packable(self)
        if pack is True and why_not:
            raise ValueError(
                f"{_WHERE}: Mixture(pack=True) needs every store's asked keys and anchor "
                f"stream raw (not encoded, not mapped) on the sampler's device "
                f"({self.device}), with samples of one shape; {why_not}. Use pack=None or False"
            )
        can = why_not is None
        if pack is None and can:
            if self.device.type != "cuda":
                return False
            free, _ = torch.cuda.mem_get_info(self.device)
            can = packed_nbytes(self) <= free // 2
        return can

    def _check_layout(self):
        """key -> (dtype, widest shape, whether widths differ, whether some
        store lacks the key): a probe batch of one window from each store;
        keys whose 1-D samples differ in width are padded to the widest, other
        differences are errors."""
        layout = {}
        probes = [s.batch_at(s.anchors[:1]) for s in self.samplers]
        for key in self.keys:
            found = {}
            for i, probe in enumerate(probes):
                own = self.mixture.store_key(i, key)
                if own is not None:
                    found[i] = probe[own]
            dtypes = {str(t.dtype) for t in found.values()}
            if len(dtypes) > 1:
                raise ValueError(f"{_WHERE}: {key!r} is {sorted(dtypes)} in different stores")
            distinct = {tuple(t.shape[2:]) for t in found.values()}
            if len(distinct) > 1 and not all(len(s) == 1 for s in distinct):
                a, b = sorted(distinct)[:2]
                raise ValueError(
                    f"{_WHERE}: {key!r} is {a} in one store and {b} in another: resize the "
                    "frames at ingest (resize=) so that every store's are alike"
                )
            dtype = next(iter(found.values())).dtype
            layout[key] = (dtype, max(distinct), len(distinct) > 1, len(found) < len(probes))
        return layout

    def __len__(self):
        return self.epoch_steps

    def epoch(self, epoch):
        """The batches of ``epoch``: its ``epoch_steps`` steps."""
        steps = range(epoch * self.epoch_steps, (epoch + 1) * self.epoch_steps)
        from_cursor = self.packed.steps(steps) if self.packed is not None else None
        if from_cursor is not None:
            # As a store's sampler: an iteration started later takes the cursor over.
            user = self._cursor_user = object()

            def make(i):
                if self._cursor_user is not user:  # without a graph, whose inputs it shares
                    return self.packed.batch_at_step(steps[i], graph=False)
                return from_cursor(i)
        else:

            def make(i):
                return self.batch_at_step(steps[i])

        yield from self.stream.run(make, range(len(steps)))

    def draws(self, step):
        """(store of each window (B,), anchor position of each window within
        its store's anchors (B,)), fixed by (seed, step, rank), on the host."""
        store, within = self.sampler_draws(step)
        return self.in_mixture(store), within

    def sampler_draws(self, step):
        """``draws``, each window's store given by its place in ``samplers``."""
        draws = self._host_draws
        store, position = draws(step_base(self.seed, step, self.rank), self.batch_size)
        return store, position - draws.starts[store]

    def in_mixture(self, stores):
        """Places in ``samplers`` as the stores' numbers in the mixture."""
        if self.store_numbers is None:
            return stores
        return self.store_numbers.to(stores.device)[stores]

    def batch_at_step(self, step):
        """The batch of global step ``step``."""
        if self.packed is not None:
            return self.packed.batch_at_step(step)
        stores, within = self.sampler_draws(step)
        batch = self._empty(stores)
        for i, sampler in enumerate(self.samplers):
            where = (stores == i).nonzero().view(-1)
            if where.numel() == 0:
                continue
            rows = sampler.anchors[within[where].to(sampler.anchors.device)]
            part = sampler.batch_at(rows, step=step)
            self._scatter(batch, part, i, where.to(self.device, non_blocking=True))
        return batch

    def _empty(self, stores):
        """Every key's windows filled, all padding, before any store's part."""
        B, device = stores.numel(), self.device
        batch = {}
        for key in self.keys:
            dtype, widest, ragged, lacking = self.layout[key]
            shape = (B, self._windows[key], *widest)
            if ragged or lacking:  # some rows or widths no store's part covers
                fill = self.fill if dtype.is_floating_point else 0
                batch[key] = torch.full(shape, fill, dtype=dtype, device=device)
            else:  # every row is written by its store's part
                batch[key] = torch.empty(shape, dtype=dtype, device=device)
            batch[f"{key}_is_pad"] = torch.ones(shape[:2], dtype=torch.bool, device=device)
            if ragged:
                batch[f"{key}_mask"] = torch.zeros((B, widest[0]), dtype=torch.bool, device=device)
        batch["dataset_index"] = self.in_mixture(stores).to(device, non_blocking=True)
        return batch

    def _scatter(self, batch, part, i, where):
        B = self.batch_size
        for key in self.keys:
            own = self.mixture.store_key(i, key)
            ragged = self.layout[key][2]  # (dtype, widest, ragged, lacking)
            if own is None:
                continue
            values, pad = part[own], part[f"{own}_is_pad"]
            target = batch[key]
            if ragged:
                target = target.narrow(-1, 0, values.shape[-1])
                batch[f"{key}_mask"][:, : values.shape[-1]].index_fill_(0, where, True)
            target.index_copy_(0, where, values)
            batch[f"{key}_is_pad"].index_copy_(0, where, pad)
            age = part.get(f"{own}_age")
            if age is not None:
                if f"{key}_age" not in batch:
                    batch[f"{key}_age"] = torch.zeros_like(batch[f"{key}_is_pad"], dtype=age.dtype)
                batch[f"{key}_age"].index_copy_(0, where, age)
        for name in _ROW_FIELDS:
            t = part[name]
            if name not in batch:
                batch[name] = torch.zeros((B,), dtype=t.dtype, device=self.device)
            if name == "task_index":
                t = t + self.task_offsets[i]
            batch[name].index_copy_(0, where, t)
