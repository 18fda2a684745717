"""WindowSampler: batches of windows cut from an EpisodeStore (or a
``Mixture`` of stores) on the device.

Each batch is one ``anchor_windows`` launch: every key's windows and the
anchor frames' metadata, with no worker processes, no per-sample Python and
no host synchronization. This face checks the arguments (plan.py) and
iterates; the stages that make a batch are wired in store_batches.py (one
store) and mixture_batches.py (a mixture).
"""

import torch

from ..mixture import Mixture
from . import plan
from .buffers import ring_slots, slot_sizes
from .mixture_batches import MixtureBatches
from .store_batches import StoreBatches

__all__ = ["WindowSampler"]

# LeRobot's tolerance for timestamps that should coincide.
_EDGE_TOLERANCE_S = 1e-4
_WHERE = "WindowSampler"


class WindowSampler:
    """Windows of every key around anchor frames, batched on the device.

    Args:
        store: an EpisodeStore (on the GPU, or in pinned host memory with
            ``device="cuda"``: then windows are cut on the host and each
            batch is copied to the device), or a ``Mixture`` of stores (see
            docs/data.md, "Mixtures": keys in the mixture's names, each
            window's store drawn by weight, ``len()`` its ``epoch_steps``).
        delta_timestamps: key -> a sequence of offsets in seconds from the
            anchor time (any real values). Each key is sampled on its own
            clock at ``anchor_time + delta``.
        modes: key -> ``"nearest"`` (default; a tie between two samples
            equally far goes to the later one), ``"previous"``, ``"linear"``
            or ``"mean"`` (the mean of the samples in (q - interval, q]).
            Where several samples share one time t, a query at or after t
            reads the last of them, and a query before t that ``nearest``
            rounds up to t reads the first of them.
        interval_s: key -> the interval of ``"mean"`` (default: the smallest
            gap between that key's deltas).
        tolerance_s: key -> seconds: a query whose samples used lie farther
            than this is padding (a drop-out is never held or interpolated
            across silently). Default: none.
        edge_tolerance_s: a query this close outside an episode's samples is
            not padding (LeRobot's 1e-4 s by default).
        anchor: the key whose frames are the anchors (default: the key with
            the most samples; ties go to the first key). In a mixture, a
            name in the mixture's: a store that lacks it anchors on its own
            default (with a warning naming those stores); a name no store
            drawn has is an error.
        batch_size, shuffle, seed, drop_last: an epoch visits each anchor
            once, in a permutation drawn on the device from (seed, epoch).
        drop_n_last_frames: anchors exclude each episode's last n frames.
        device: where batches go (default: the store's device).
        normalize: key -> ``"mean_std"`` or ``"min_max"`` (to [-1, 1]), with
            the store's statistics, on the device; or (that, mask): a bool
            per entry of the samples' last axis, False where it is left
            as it is (a gripper's dimension, as Octo's
            ``action_normalization_mask``; in a mixture, a narrower store
            takes the mask's first entries).
        images: how image keys come out, for every key (a str) or per key
            (a dict; keys it leaves out come as stored): ``"uint8"`` (as
            stored), ``"float"`` (uint8 frames as float32 in [0, 1]) or
            ``"float_chw"`` (as LeRobot returns them: that, and (H, W, C)
            frames as (C, H, W)). A key's frames are its samples of shape
            (H, W, C) or (C, H, W), the channel axis the end of size 1, 3 or
            4 (a shape both ends of which could be raises), or (H, W) uint8
            grey frames. Other keys are left as they are.
        key_age: also return ``<key>_age``: seconds from the sample read to
            the query (see sample_windows).
        rank, world_size: this process's place among data-parallel ranks
            (default: torch.distributed's when it is initialized, else the
            store's shard's, else 0 of 1). A whole store is replicated: the
            epoch's permutation (the same on every rank) is padded by
            wrapping around (or cut, with drop_last) to a multiple of
            world_size and dealt out. A shard (``EpisodeStore.load(...,
            shard=(rank, world_size))``) holds whole episodes: each rank
            permutes its own anchors, by (seed, epoch, rank), wrapping around
            to the largest rank's count (or cut to the smallest's). Every
            rank draws the same number of batches, with no collective call,
            and a shard with no anchors raises on every rank.
        cuda_graph: replay each batch from a CUDA graph, captured once per
            batch size: an iteration's batches read their anchors from the
            epoch's order on the device, so that a batch costs the host one
            graph launch (``batch_at`` adds one index copy). None (the
            default): on wherever every key is read on the GPU (placed
            ``"cuda"`` or ``"pinned"``, JPEG frames decoded by the GPU
            decoder with ``read_ahead`` >= 1, whose graphs gather the frames
            decoded ahead, or mapped keys read ahead, whose rows are copied
            into buffers the graphs cut them from) and the batches go
            there; off where windows are cut on the host, where mapped keys
            are read when their batch is asked for (``read_ahead=0``, or a
            key in mode ``"mean"``), and for ``batch_at`` with encoded
            frames or mapped keys (decoded or read when asked for). A
            graph writes its batches into the same buffers, but never while
            anything still refers to a batch
            (a variable, a view, an autograd graph that saved it): the ring
            of graphs then grows, up to 16 a batch size, past which a batch
            is cut without a graph.
        graph_buffers: the graphs a batch size starts with (default: 2 more
            than ``prefetch``).
        read_ahead: batches whose mapped keys an iteration reads ahead from
            the store's file, on native threads of its own (default 2; 0:
            each batch's rows are read when it is asked for). Only the rows
            the windows read are read, in runs, several at a time, with
            positional reads of the file held open since ``load`` (never
            through the mapping); for batches bound for a GPU they land in
            pinned memory and are copied and cut there. The rows of at most
            ``read_ahead`` + 1 batches wait in memory at once.
        prefetch: batches an iteration prepares ahead, on a CUDA stream of
            the sampler's own, while the caller's step runs (0: each batch
            on the caller's stream when asked for). None (the default): 1
            where a key's batch is made on the host when asked for (mapped
            keys cut without a graph, encoded frames decoded on the host or
            with ``read_ahead=0``), whose copy then runs beside the step; 0
            where every key is on the GPU or pinned, decoded ahead by the
            GPU decoder's queue, or mapped and cut in graphs (their rows
            copied on a CUDA stream of their own beside the step), cut by
            one kernel, which a second
            stream's events would slow more than the overlap gains. Events order them: a batch handed out is ready
            on the caller's current stream, and nothing waits on the host.
        decoding: how keys stored as JPEG or PNG frames are decoded
            (``robocache.data.frames.FrameDecoding``: the backend, the JPEG
            IDCT, the threads). Their windows are cut over row numbers, and
            each distinct frame of a batch is decoded once: on the GPU by
            default where the batches go to CUDA and the extra
            ``robocache[nvimgcodec]`` is installed (the windows cut on the
            GPU; a native queue decodes ``read_ahead`` batches ahead, on a
            thread of its own, from the bytes in host memory, into device
            tables the sampler keeps, and runs on into the epoch guessed to
            follow: the next after ``set_epoch`` moved on by one, the same
            where it did not); else on the host's thread pool, read ahead
            with the mapped keys, with no CUDA graph.
        augment: key -> ``robocache.data.Augment``: random crops, rotations
            and colour jitter of uint8 (H, W, C) frames, one draw per window
            (every frame of a window alike), from (seed, step, rank), applied
            on the batch's device in one call per key, which also makes the
            key's ``images`` form; no CUDA graph. ``batch_at(index, step)``
            takes the step.

    A batch is a dict: ``key`` (B, len(deltas), *shape), ``key_is_pad``
    (B, len(deltas)) bool, and ``index``, ``episode_index``, ``frame_index``,
    ``timestamp`` (float32 seconds since the episode's first anchor frame),
    ``task_index``, each (B,).

    A sampler draws its batches on the device in the calling process: iterate
    it directly, not inside a DataLoader's workers (each worker would draw
    every batch; it raises there), and not through a DataLoader's indexing
    (it is no map-style dataset; indexing it raises). A copy (``copy``,
    ``pickle``) is a sampler made again from the same arguments, at the same
    epoch.
    """

    def __init__(
        self,
        store,
        delta_timestamps,
        *,
        modes=None,
        interval_s=None,
        tolerance_s=None,
        edge_tolerance_s=_EDGE_TOLERANCE_S,
        anchor=None,
        batch_size=256,
        shuffle=True,
        seed=0,
        drop_last=False,
        drop_n_last_frames=0,
        device=None,
        normalize=None,
        images="uint8",
        key_age=False,
        rank=None,
        world_size=None,
        cuda_graph=None,
        graph_buffers=None,
        prefetch=None,
        read_ahead=2,
        decoding=None,
        augment=None,
    ):
        # What a copy or an unpickled sampler is made again from (__reduce__).
        self._arguments = {name: value for name, value in locals().items() if name != "self"}
        options = plan.check_options(
            modes=modes,
            interval_s=interval_s,
            tolerance_s=tolerance_s,
            edge_tolerance=plan.edge_tolerance_ns(edge_tolerance_s),
            anchor=anchor,
            batch_size=batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            drop_n_last_frames=drop_n_last_frames,
            device=device,
            normalize=normalize,
            images=images,
            key_age=key_age,
            rank=rank,
            world_size=world_size,
            cuda_graph=cuda_graph,
            graph_buffers=graph_buffers,
            prefetch=prefetch,
            read_ahead=read_ahead,
            decoding=decoding,
            augment=augment,
        )
        if isinstance(store, Mixture):
            self.mixture, self.store = store, None
            self._batches = MixtureBatches(store, delta_timestamps, options)
        else:
            self.mixture, self.store = None, store
            self._batches = StoreBatches(store, delta_timestamps, options)
        batches = self._batches
        self.batch_size, self.seed, self.device = batches.batch_size, batches.seed, batches.device
        self.rank, self.world_size = batches.rank, batches.world_size
        self.prefetch, self.epoch = batches.prefetch, 0

    # -- what it samples ------------------------------------------------------------

    @property
    def keys(self):
        """A store's sampler: key -> its KeyPlan; a mixture's: the keys asked."""
        return self._batches.keys

    @property
    def plans(self):
        """A store's sampler: each key's KeyPlan, in ``delta_timestamps``' order."""
        return getattr(self._batches, "plans", None)

    @property
    def epoch_steps(self):
        """A mixture's batches an epoch (``len()``)."""
        return getattr(self._batches, "epoch_steps", None)

    @property
    def anchor(self):
        """The anchor stream (a store's sampler)."""
        return getattr(self._batches, "anchor", None)

    @property
    def num_anchors(self):
        """Anchor frames of the store, or of every store of the mixture of
        weight > 0 (those of weight 0 are never drawn)."""
        if self.mixture is not None:
            return sum(s.num_anchors for s in self._batches.samplers)
        return self._batches.num_anchors

    @property
    def tasks(self):
        """Task strings, by the batches' ``task_index``."""
        if self.mixture is not None:
            return self._batches.tasks
        return self.store.tasks

    @property
    def decoders(self):
        """A store's sampler: each encoded key -> the backend that decodes
        it (``"host"`` or ``"nvimgcodec"``)."""
        reader = getattr(self._batches, "reader", None)
        if reader is None:
            return {}
        return {f.plan.key: f.decoder.backend for f in reader.encoded}

    @property
    def packed(self):
        """Whether a mixture's batches come from its stores packed as one."""
        return self.mixture is not None and self._batches.packed is not None

    @property
    def graphs(self):
        """name -> graphs in its ring (a batch size's, fed by an index or the
        cursor): the CUDA graphs the batches replay, or None without them."""
        batches = self._batches
        if self.mixture is not None:
            batches = batches.packed
        graphs = getattr(batches, "graphs", None)
        return None if graphs is None else graphs.ring_sizes()

    def __repr__(self):
        source = f"a Mixture of {len(self.mixture.stores)} stores" if self.mixture else "a store"
        text = (
            f"WindowSampler({source}, {len(self)} batches of {self.batch_size} an epoch, "
            f"device={self.device}"
        )
        reader = getattr(self._batches, "reader", None)
        if reader is not None and reader.mapped:
            depth = self._batches.options.read_ahead
            keys = [key.plan.key for key in reader.mapped]
            text += f"; mapped {keys} read from the file {depth} batches ahead, the rows of "
            if reader.mapped_graphable and depth:  # a ring of pinned buffers, each iteration's
                ring = ring_slots(depth)
                size = sum(slot_sizes(reader.finders, self._batches.batch_size))
                text += (
                    f"each batch in a ring of {ring} pinned buffers ({ring * size / 2**20:.1f} MiB)"
                )
            else:
                where = "pinned memory" if reader.mapped_on_gpu else "host memory"
                text += f"at most {depth + 1} batches in {where} at once"
        return text + ")"

    # -- copies ----------------------------------------------------------------------

    def __reduce__(self):
        """A copy, deep or shallow, or an unpickled sampler is made again
        from the arguments (its store or mixture copied, or shared by a
        shallow copy), at the same epoch: the device state (CUDA graphs,
        streams, threads, file reads) is never copied."""
        return _remade, (self._arguments, self.epoch)

    # -- epochs --------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The permutation of the next iteration is fixed by (seed, epoch),
        and by rank for a sharded store (a mixture: its steps)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ValueError(f"{_WHERE}.set_epoch: epoch must be an int; got {epoch!r}")
        self.epoch = epoch

    def __len__(self):
        """Batches an epoch, the same on every rank."""
        return len(self._batches)

    def __iter__(self):
        """The batches of the epoch ``set_epoch`` last set when the first is
        asked for."""
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                f"{_WHERE} is iterated inside a DataLoader worker, where every worker would "
                "draw every batch. Iterate the sampler itself in the training loop: it cuts "
                "each batch on the device (docs/data.md, 'WindowSampler')"
            )
        yield from self._batches.epoch(self.epoch)

    def __getitem__(self, index):
        """Not a map-style dataset: a DataLoader that indexes the sampler gets
        this error, which says what to do instead."""
        raise TypeError(
            f"{_WHERE} is not indexed by a DataLoader: it draws whole batches on the device. "
            "Iterate the sampler itself in the training loop (for batch in sampler: ...), with "
            "no DataLoader around it (docs/data.md, 'WindowSampler'); for one batch, use "
            "batch_at(index) (a store's) or batch_at_step(step) (a mixture's)"
        )

    # -- one batch -------------------------------------------------------------------

    def batch_at(self, index, step=None):
        """The batch whose anchors are ``index``: global frame indices (rows)
        of the anchor stream, a (B,) integer tensor, array or list.
        ``step`` fixes the augmentation's draws (default: a count of the
        calls that gave none). A store's sampler only."""
        if self.mixture is not None:
            raise TypeError(
                f"{_WHERE}.batch_at: a mixture's batches are drawn step by step; use "
                "batch_at_step(step)"
            )
        return self._batches.batch_at(index, step)

    def batch_at_step(self, step):
        """A mixture's batch of global step ``step`` (fixed by seed, step and rank)."""
        if self.mixture is None:
            raise TypeError(
                f"{_WHERE}.batch_at_step: a store's batches are drawn by anchors; use "
                "batch_at(index)"
            )
        return self._batches.batch_at_step(step)

    def draws(self, step):
        """A mixture's draws of ``step``: (store of each window (B,), anchor
        position of each window within its store's anchors (B,)), on the host."""
        if self.mixture is None:
            raise TypeError(f"{_WHERE}.draws: a store's sampler draws no stores")
        return self._batches.draws(step)


def _remade(arguments, epoch):
    """A sampler made from ``arguments`` (the constructor's), at ``epoch``."""
    sampler = WindowSampler(**arguments)
    sampler.set_epoch(epoch)
    return sampler
