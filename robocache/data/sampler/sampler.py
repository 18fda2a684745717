"""WindowSampler: batches of windows cut from an EpisodeStore on the device.

Each batch is one ``anchor_windows`` launch: every key's windows and the
anchor frames' metadata, with no worker processes, no per-sample Python and
no host synchronization. The face here ties together the per-key plans
(plan.py), the anchor order (order.py), the transforms after the kernel
(transform.py) and the CUDA graphs (graphs.py).
"""

import torch

from .._device import resolve_device
from ..frames import FrameDecoding
from ..mixture import Mixture
from ..time import ns_to_seconds
from . import order, plan, transform
from .augmentation import Augmentation
from .calls import WindowCalls
from .decode import FrameKey
from .graphs import make_graphs
from .mixed import MixtureSampler
from .prefetch import prefetched
from .readahead import MappedKey, ReadAhead

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
            the most samples; ties go to the first key).
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
            batch size: the host's cost of a batch is one index copy and one
            replay. None (the default): on wherever every key is read on the
            GPU (placed ``"cuda"`` or ``"pinned"``) and the batches go
            there; off where windows are cut on the host. A graph writes its
            batches into the same buffers, but never while anything still
            refers to a batch (a variable, a view, an autograd graph that
            saved it): the ring of graphs then grows, up to 16 a batch
            size, past which a batch is cut without a graph.
        graph_buffers: the graphs a batch size starts with (default: 2 more
            than ``prefetch``).
        read_ahead: batches whose mapped keys an iteration reads ahead from
            the store's file, on threads of its own (default 2; 0: each
            batch's rows are read from the mapping when it is cut). Only
            the rows the windows read are read, in runs, several at a time.
        prefetch: batches an iteration prepares ahead, on a CUDA stream of
            the sampler's own, while the caller's step runs (default 1; 0:
            each batch on the caller's stream when asked for). Events order
            them: a batch handed out is ready on the caller's current stream,
            and nothing waits on the host.
        decoding: how keys stored as JPEG or PNG frames are decoded
            (``robocache.data.frames.FrameDecoding``: the JPEG IDCT, the
            threads). Their windows are cut on the host over row numbers;
            each distinct frame of a batch is decoded once, on the host's
            thread pool, read ahead with the mapped keys; no CUDA graph.
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
    every batch; it raises there).
    """

    def __new__(cls, store, *args, **kwargs):
        # A Mixture is sampled by a sampler of its own (mixed.py), which cuts
        # each store's part of a batch with a WindowSampler of that store.
        if isinstance(store, Mixture):
            return MixtureSampler(cls, store, *args, **kwargs)
        return super().__new__(cls)

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
        prefetch=1,
        read_ahead=2,
        decoding=None,
        augment=None,
    ):
        self.store = store
        self.rank, self.world_size = order.resolve_ranks(rank, world_size, store)
        device = resolve_device(device, _WHERE)
        self.device = device if device is not None else store.device
        per_key = plan.check_per_key(
            delta_timestamps,
            modes=modes,
            interval_s=interval_s,
            tolerance_s=tolerance_s,
            normalize=normalize,
        )
        if not isinstance(images, (str, dict)):
            raise ValueError(f"{_WHERE}: images must be a str or a dict key -> str; got {images!r}")
        if isinstance(images, dict):
            plan.check_per_key(delta_timestamps, images=images)
        else:
            plan.image_form_of(images, None)
        edge = plan.edge_tolerance_ns(edge_tolerance_s)
        self.plans = [
            plan.plan_key(
                store,
                key,
                deltas,
                per_key["modes"].get(key, "nearest"),
                per_key["interval_s"].get(key),
                per_key["tolerance_s"].get(key),
                per_key["normalize"].get(key),
                plan.image_form_of(images, key),
                self.device,
            )
            for key, deltas in delta_timestamps.items()
        ]
        self.keys = {p.key: p for p in self.plans}
        self._augmentation = Augmentation(augment, self.plans, store) if augment else None
        self._augment_step = 0  # batch_at's step when none is given
        self.anchor = anchor if anchor is not None else order.default_anchor(store)
        for name, value in (("drop_last", drop_last), ("shuffle", shuffle), ("key_age", key_age)):
            if not isinstance(value, bool):
                raise ValueError(f"{_WHERE}: {name} must be True or False; got {value!r}")
        if isinstance(drop_n_last_frames, bool) or not isinstance(drop_n_last_frames, int):
            drop_n_last_frames = -1
        if drop_n_last_frames < 0:
            raise ValueError(
                f"{_WHERE}: drop_n_last_frames must be an int >= 0; got {drop_n_last_frames!r}"
            )
        self.batch_size = plan.positive_int(batch_size, "batch_size")
        self.seed = order.check_seed(seed)
        self.shuffle, self.drop_last, self.key_age, self.epoch = shuffle, drop_last, key_age, 0
        anchor_stream = store[self.anchor]
        offsets, times = anchor_stream.offsets, anchor_stream.times
        # Every key's times on the GPU: the anchors there. Keys cut on the
        # host (mapped or host values): the anchors on the host, so that
        # nothing the host needs is read back from the GPU.
        host_cut = any(
            store[p.key].times.device.type == "cpu" or store[p.key].encoding is not None
            for p in self.plans
        )
        if host_cut:
            offsets, times = offsets.cpu(), times.cpu()
        row_episode = order.row_episodes(offsets)
        self._anchors = order.anchor_rows(offsets, row_episode, drop_n_last_frames)
        self._per_rank = order.per_rank(
            store,
            self.anchor,
            drop_n_last_frames,
            self._anchors.numel(),
            self.world_size,
            drop_last,
        )
        if self._anchors.numel() == 0:
            raise ValueError(
                f"{_WHERE}: the store has no anchor frames (stream {self.anchor!r} is empty"
                f"{' after dropping the last frames' if drop_n_last_frames else ''})"
            )
        if drop_last and self.batch_size > self._per_rank:
            raise ValueError(
                f"{_WHERE}: batch_size {self.batch_size} exceeds the {self._per_rank} anchors "
                "a rank visits an epoch, and drop_last=True would leave no batch"
            )
        # Per anchor row, gathered with the windows: its episode_index,
        # frame_index and task_index, and its time from the episode's first
        # frame in seconds (float32, as LeRobot's timestamp).
        first_row = offsets[:-1][row_episode]
        episodes = {
            k: store.episodes[k].to(offsets.device) for k in ("episode_index", "task_index")
        }
        self._row_tables = {
            "episode_index": episodes["episode_index"][row_episode],
            "frame_index": torch.arange(times.numel(), device=offsets.device) - first_row,
            "task_index": episodes["task_index"][row_episode],
            "timestamp": ns_to_seconds(times - times[first_row]),
        }
        if decoding is None:
            decoding = FrameDecoding()
        if not isinstance(decoding, FrameDecoding):
            raise TypeError(
                f"{_WHERE}: decoding must be a robocache.data.frames.FrameDecoding; got "
                f"{type(decoding).__name__}"
            )
        self._frame_keys = [
            FrameKey(k, p, store[p.key], store.episodes["episode_index"], decoding)
            for k, p in enumerate(self.plans)
            if store[p.key].encoding is not None
        ]
        self._windows = WindowCalls(
            store, self.anchor, self.plans, self._row_tables, edge, self._frame_keys
        )
        self._check_window_args()
        if isinstance(prefetch, bool) or not isinstance(prefetch, int) or prefetch < 0:
            raise ValueError(f"{_WHERE}: prefetch must be an int >= 0; got {prefetch!r}")
        on_gpu = self._anchors.is_cuda and self.device.type == "cuda"
        self.prefetch = prefetch if on_gpu else 0
        self._cuda_stream = torch.cuda.Stream(self.device) if self.prefetch else None
        self._graphs = make_graphs(self, cuda_graph, graph_buffers, on_gpu)
        if isinstance(read_ahead, bool) or not isinstance(read_ahead, int) or read_ahead < 0:
            raise ValueError(f"{_WHERE}: read_ahead must be an int >= 0; got {read_ahead!r}")
        self.read_ahead = read_ahead
        self._mapped = [
            MappedKey(k, p, store[p.key], store.mapped_rows[p.key])
            for k, p in enumerate(self.plans)
            if store.mapped_rows.get(p.key) is not None
            and store[p.key].times.device.type == "cpu"
            and store[p.key].encoding is None
        ]
        self._edge = edge

    def _check_window_args(self):
        """Every check of the operator (modes, dtypes, devices, shapes, a build
        with the device's kernels) runs once here, on an empty batch; the
        batches then call it directly. Its errors say which key stream k is."""
        try:
            self._windows.check(self._anchors.device)
        except (ValueError, TypeError, RuntimeError, NotImplementedError) as e:
            streams = ", ".join(f"stream {k} is {p.key!r}" for k, p in enumerate(self.plans))
            raise type(e)(f"{_WHERE}: {e} ({streams})") from None

    # -- epochs --------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The permutation of the next iteration is fixed by (seed, epoch),
        and by rank for a sharded store."""
        if isinstance(epoch, bool) or not isinstance(epoch, int):
            raise ValueError(f"{_WHERE}.set_epoch: epoch must be an int; got {epoch!r}")
        self.epoch = epoch

    @property
    def num_anchors(self):
        return int(self._anchors.numel())

    def __len__(self):
        """Batches an epoch, the same on every rank."""
        n = self._per_rank
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        if torch.utils.data.get_worker_info() is not None:
            raise RuntimeError(
                f"{_WHERE} is iterated inside a DataLoader worker, where every worker would "
                "draw every batch. Iterate the sampler itself in the training loop: it cuts "
                "each batch on the device (docs/data.md, 'WindowSampler')"
            )
        sharded = self.store.shard is not None
        generator = None
        if self.shuffle:
            generator = order.epoch_generator(
                self._anchors, self.seed, self.epoch, self.rank, sharded
            )
        anchors = order.epoch_order(
            self._anchors, self._per_rank, self.rank, self.world_size, sharded, generator
        )
        parts = [anchors[i * self.batch_size : (i + 1) * self.batch_size] for i in range(len(self))]
        reader = None
        if (self._mapped or self._frame_keys) and self.read_ahead:
            ahead = self._mapped or self._frame_keys
            host = self._windows.arguments_of(ahead[0].position)
            anchor = (host["anchor_offsets"], host["anchor_times"])
            reader = ReadAhead(
                self._mapped, anchor, self._edge, parts, self.read_ahead, frames=self._frame_keys
            )
        items = list(enumerate(parts))

        first_step = self.epoch * len(self)

        def make_batch(item):
            i, index = item
            if reader is None:
                return self.batch_at(index, step=first_step + i)
            index = order.anchor_index(index, self._anchors.device)
            return self._batch(index, *reader.get(i), step=first_step + i)

        try:
            if not self.prefetch:
                for item in items:
                    yield make_batch(item)
            else:
                yield from prefetched(make_batch, items, self._cuda_stream, self.prefetch)
        finally:
            if reader is not None:
                reader.close()

    # -- one batch -------------------------------------------------------------------

    def batch_at(self, index, step=None):
        """The batch whose anchors are ``index``: global frame indices (rows)
        of the anchor stream, a (B,) integer tensor, array or list.
        ``step`` fixes the augmentation's draws (default: a count of the
        calls that gave none)."""
        index = order.anchor_index(index, self._anchors.device)
        if self._graphs is not None:
            return self._graphs(index)
        return self._batch(index, step=step)

    def _batch(self, index, substitutes=None, decoded=None, step=None, augment_parts=None):
        params = None
        if self._augmentation is not None:
            if step is None:
                step, self._augment_step = self._augment_step, self._augment_step + 1
            params = self._augmentation.params(
                index.numel(), self.seed, step, self.rank, self.device, augment_parts
            )
        # The store's tensors never need gradients: the op runs below autograd
        # (no autograd bookkeeping a call; the batch's tensors are ordinary).
        with torch._C._AutoDispatchBelowAutograd():
            outs, pads, ages, rows = self._windows(index, substitutes)
            for f in self._frame_keys:
                outs[f.position] = f.frames(outs[f.position], (decoded or {}).get(f.position))
            return transform.assemble(
                self.plans, outs, pads, ages, index, self._row_tables, rows, self.device,
                self.key_age, self._augmentation, params,
            )  # fmt: skip
