"""WindowSampler: batches of windows cut from an EpisodeStore on the device.

Each batch is one ``anchor_windows`` launch: every key's windows and the
anchor frames' metadata, with no worker processes, no per-sample Python and
no host synchronization.
"""

import math
import numbers

import torch

from . import _ranks
from ._graphs import BatchGraphs

__all__ = ["WindowSampler"]

_OPS = torch.ops.robocache
_NORMALIZE = ("mean_std", "min_max")
_IMAGES = ("uint8", "float", "float_chw")
# LeRobot's tolerance for timestamps that should coincide.
_EDGE_TOLERANCE_S = 1e-4


def _ns(seconds):
    return int(round(float(seconds) * 1e9))


def _seconds(x, what):
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not math.isfinite(x):
        raise ValueError(f"WindowSampler: {what} must be a finite number of seconds; got {x!r}")
    return float(x)


class WindowSampler:
    """Windows of every key around anchor frames, batched on the device.

    Args:
        store: an EpisodeStore (on the GPU, or in pinned host memory with
            ``device="cuda"``: then windows are cut on the host and each
            batch is copied to the device).
        delta_timestamps: key -> offsets in seconds from the anchor time
            (any real values). Each key is sampled on its own clock at
            ``anchor_time + delta``.
        modes: key -> ``"nearest"`` (default), ``"previous"``, ``"linear"``
            or ``"mean"`` (the mean of the samples in (q - interval, q]).
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
            the store's statistics, on the device.
        images: ``"uint8"`` (as stored), ``"float"`` (uint8 keys as float32
            in [0, 1]) or ``"float_chw"`` (as LeRobot returns them: float32 in
            [0, 1], and (H, W, C) frames as (C, H, W)).
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
            rank draws the same number of batches, with no collective call.
        cuda_graph: replay each batch from a CUDA graph, captured once per
            batch size (a store on a CUDA device): the host's cost of a
            batch is one index copy and one replay. A batch's tensors are
            then the graph's buffers, which hold it until ``graph_buffers``
            more batches of its size are drawn: clone what you keep longer.
        graph_buffers: the graphs per batch size, each with its own buffers
            (default 2: a batch stays valid while the next is drawn).

    A batch is a dict: ``key`` (B, len(deltas), *shape), ``key_is_pad``
    (B, len(deltas)) bool, and ``index``, ``episode_index``, ``frame_index``,
    ``timestamp`` (float32 seconds since the episode's first anchor frame),
    ``task_index``, each (B,).
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
        cuda_graph=False,
        graph_buffers=2,
    ):
        self.store = store
        self.rank, self.world_size = _ranks.resolve(rank, world_size, store)
        self.device = torch.device(device) if device is not None else store.device
        if not isinstance(delta_timestamps, dict) or not delta_timestamps:
            raise ValueError(
                "WindowSampler: delta_timestamps must be a non-empty dict key -> deltas"
            )
        modes, interval_s = dict(modes or {}), dict(interval_s or {})
        tolerance_s, normalize = dict(tolerance_s or {}), dict(normalize or {})
        for what, d in (
            ("modes", modes),
            ("interval_s", interval_s),
            ("tolerance_s", tolerance_s),
            ("normalize", normalize),
        ):
            unknown = sorted(set(d) - set(delta_timestamps))
            if unknown:
                raise ValueError(
                    f"WindowSampler: {what} names keys not in delta_timestamps: {unknown}"
                )
        if images not in _IMAGES:
            raise ValueError(
                f"WindowSampler: images must be 'uint8', 'float' or 'float_chw'; got {images!r}"
            )
        edge = _ns(_seconds(edge_tolerance_s, "edge_tolerance_s"))
        if edge < 0:
            raise ValueError(
                f"WindowSampler: edge_tolerance_s must be >= 0; got {edge_tolerance_s}"
            )
        self.keys = {}
        for key, deltas in delta_timestamps.items():
            self.keys[key] = self._key_plan(
                key,
                deltas,
                modes.get(key, "nearest"),
                interval_s.get(key),
                tolerance_s.get(key),
                edge,
                normalize.get(key),
                images,
            )

        def samples(key):  # in the whole store, so that every shard picks alike
            if store.shard is not None:
                return int(store.shard.counts[key].sum())
            return store[key].values.shape[0]

        self.anchor = anchor if anchor is not None else max(store.keys(), key=samples)
        anchor_stream = store[self.anchor]
        if not isinstance(drop_n_last_frames, int) or drop_n_last_frames < 0:
            raise ValueError(
                f"WindowSampler: drop_n_last_frames must be an int >= 0; got {drop_n_last_frames!r}"
            )
        # Each anchor-stream row's episode: the anchors, and the timestamps below.
        offsets, times = anchor_stream.offsets, anchor_stream.times
        row_episode = torch.repeat_interleave(
            torch.arange(offsets.numel() - 1, device=offsets.device), offsets.diff()
        )
        self._anchors = _anchor_rows(offsets, row_episode, drop_n_last_frames)
        if self._anchors.numel() == 0:
            raise ValueError(
                f"WindowSampler: the store has no anchor frames (stream {self.anchor!r} is empty"
                f"{' after dropping the last frames' if drop_n_last_frames else ''})"
            )
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"WindowSampler: batch_size must be a positive int; got {batch_size!r}"
            )
        self._per_rank = _ranks.per_rank(
            store,
            self.anchor,
            drop_n_last_frames,
            self._anchors.numel(),
            self.world_size,
            drop_last,
        )
        if drop_last and batch_size > self._per_rank:
            raise ValueError(
                f"WindowSampler: batch_size {batch_size} exceeds the {self._per_rank} anchors "
                "a rank visits an epoch, and drop_last=True would leave no batch"
            )
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, int(seed)
        self.drop_last, self.key_age, self.epoch = drop_last, key_age, 0
        if not isinstance(cuda_graph, bool):
            raise ValueError(f"WindowSampler: cuda_graph must be True or False; got {cuda_graph!r}")
        if (
            isinstance(graph_buffers, bool)
            or not isinstance(graph_buffers, int)
            or graph_buffers < 1
        ):
            raise ValueError(
                f"WindowSampler: graph_buffers must be an int >= 1; got {graph_buffers!r}"
            )
        if cuda_graph and (store.device.type != "cuda" or self.device.type != "cuda"):
            raise ValueError(
                "WindowSampler: cuda_graph=True needs the store and the batches on a CUDA "
                f"device (store.to('cuda')); the store is on {store.device}"
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
            "timestamp": ((times - times[first_row]).double() * 1e-9).float(),
        }
        # The arguments of one anchor_windows call for every key a batch.
        plans = self.keys.values()
        streams = [store[key] for key in self.keys]
        self._window_args = (
            [s.values for s in streams],
            [s.times for s in streams],
            [s.offsets for s in streams],
            [plan["deltas"] for plan in plans],
            offsets,
            times,
        )
        self._window_rules = (
            list(self._row_tables.values()),
            ",".join(plan["mode"] for plan in plans),
            [plan["interval"] for plan in plans],
            [plan["tolerance"] for plan in plans],
            edge,
        )
        self._check_window_args()
        self._graphs = (
            BatchGraphs(self._batch, self._anchors, graph_buffers) if cuda_graph else None
        )

    def _check_window_args(self):
        """Every check of the operator (modes, dtypes, devices, shapes, a build
        with the device's kernels) runs once here, on an empty batch; the
        batches then call it directly. Its errors say which key stream k is."""
        nothing = torch.empty(0, dtype=torch.int64, device=self.store.device)
        try:
            _OPS.anchor_windows(*self._window_args, nothing, *self._window_rules)
        except (ValueError, TypeError, RuntimeError, NotImplementedError) as e:
            streams = ", ".join(f"stream {k} is {key!r}" for k, key in enumerate(self.keys))
            raise type(e)(f"WindowSampler: {e} ({streams})") from None

    def _key_plan(self, key, deltas, mode, interval, tolerance, edge, normalize, images):
        stream = self.store[key]
        if torch.is_tensor(deltas):
            deltas = deltas.tolist()
        deltas = [_seconds(d, f"delta_timestamps[{key!r}]") for d in deltas]
        if not deltas:
            raise ValueError(f"WindowSampler: delta_timestamps[{key!r}] is empty")
        if mode == "mean" and interval is None:
            gaps = [b - a for a, b in zip(sorted(deltas), sorted(deltas)[1:]) if b > a]
            if not gaps:
                raise ValueError(
                    f"WindowSampler: mode 'mean' for {key!r} needs interval_s (one delta)"
                )
            interval = min(gaps)
        if mode in ("linear", "mean") and not stream.values.is_floating_point():
            raise ValueError(
                f"WindowSampler: mode {mode!r} for {key!r} needs floating values; the stream "
                f"holds {stream.values.dtype} (use 'nearest' or 'previous')"
            )
        to_float = images != "uint8" and stream.values.dtype == torch.uint8
        to_chw = to_float and images == "float_chw" and stream.values.dim() == 4
        scale = shift = None
        if normalize is not None:
            scale, shift = _normalizer(key, stream, normalize)
            if to_float:  # the statistics are of the stored 0..255 values
                scale = scale * 255
            scale, shift = scale.to(self.device), shift.to(self.device)
        deltas_ns = [_ns(d) for d in deltas]
        interval = 0 if interval is None else _ns(_seconds(interval, f"interval_s[{key!r}]"))
        if tolerance is not None:
            tolerance = _ns(_seconds(tolerance, f"tolerance_s[{key!r}]"))
        for what, value in (("interval_s", interval), ("tolerance_s", tolerance)):
            if value is not None and value < 0:
                raise ValueError(f"WindowSampler: {what}[{key!r}] must be >= 0; got {value} ns")
        return {
            "deltas": torch.tensor(deltas_ns, dtype=torch.int64, device=self.store.device),
            "mode": mode,
            "interval": interval,
            "tolerance": -1 if tolerance is None else tolerance,
            "edge": edge,
            "scale": scale,
            "shift": shift,
            "to_float": to_float,
            "to_chw": to_chw,
        }

    # -- epochs --------------------------------------------------------------------

    def set_epoch(self, epoch):
        """The permutation of the next iteration is fixed by (seed, epoch),
        and by rank for a sharded store."""
        self.epoch = int(epoch)

    @property
    def num_anchors(self):
        return int(self._anchors.numel())

    def __len__(self):
        """Batches an epoch, the same on every rank."""
        n = self._per_rank
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        sharded = self.store.shard is not None
        gen = None
        if self.shuffle:
            gen = torch.Generator(device=self._anchors.device)
            seed = self.seed * 1_000_003 + self.epoch
            if sharded:  # each rank permutes its own episodes' anchors
                seed = seed * 1_000_033 + self.rank
            gen.manual_seed(seed % (2**63))
        order = _ranks.epoch_order(
            self._anchors, self._per_rank, self.rank, self.world_size, sharded, gen
        )
        for i in range(len(self)):
            yield self.batch_at(order[i * self.batch_size : (i + 1) * self.batch_size])

    # -- one batch -------------------------------------------------------------------

    def batch_at(self, index):
        """The batch whose anchors are ``index``: global frame indices (rows)
        of the anchor stream, a (B,) int64 tensor or a list."""
        index = torch.as_tensor(index, dtype=torch.int64, device=self.store.device)
        if self._graphs is not None:
            return self._graphs(index)
        return self._batch(index)

    def _batch(self, index):
        # The store's tensors never need gradients: the op runs below autograd
        # (no autograd bookkeeping a call; the batch's tensors are ordinary).
        with torch._C._AutoDispatchBelowAutograd():
            outs, pads, ages, _, rows = _OPS.anchor_windows(
                *self._window_args, index, *self._window_rules
            )
            batch = {}
            for (key, plan), values, is_pad, age in zip(self.keys.items(), outs, pads, ages):
                values = self._move(values)
                if plan["to_float"]:
                    values = values.float().div_(255)
                if plan["scale"] is not None:
                    values = torch.addcmul(plan["shift"], values, plan["scale"])
                if plan["to_chw"]:  # (B, W, H, W', C) -> (B, W, C, H, W')
                    values = values.movedim(-1, -3)
                batch[key] = values
                batch[f"{key}_is_pad"] = self._move(is_pad)
                if self.key_age:
                    batch[f"{key}_age"] = self._move((age.double() * 1e-9).float())
            batch["index"] = self._move(index)
            for name, t in zip(self._row_tables, rows):
                batch[name] = self._move(t)
        return batch

    def _move(self, t):
        # Non-blocking only host-to-device (a device-to-host copy must be
        # complete before the host reads it).
        host_to_device = t.device.type == "cpu" and self.device.type != "cpu"
        return t.to(self.device, non_blocking=host_to_device)


def _anchor_rows(offsets, row_episode, drop_n_last_frames):
    """Rows of the anchor stream that may anchor a window, on its device
    (``row_episode``: each row's episode)."""
    rows = torch.arange(row_episode.numel(), device=offsets.device)
    if drop_n_last_frames:
        rows = rows[rows < offsets[1:][row_episode] - drop_n_last_frames]
    return rows


def _normalizer(key, stream, how):
    """(scale, shift) with x * scale + shift the normalized value (float32)."""
    if how not in _NORMALIZE:
        raise ValueError(
            f"WindowSampler: normalize[{key!r}] must be 'mean_std' or 'min_max'; got {how!r}"
        )
    missing = [
        s
        for s in (("mean", "std") if how == "mean_std" else ("min", "max"))
        if s not in stream.stats
    ]
    if missing:
        raise ValueError(
            f"WindowSampler: normalize[{key!r}] = {how!r} needs the store's {missing} statistics"
        )
    eps = 1e-8
    if how == "mean_std":
        scale = 1 / (stream.stats["std"] + eps)
        shift = -stream.stats["mean"] * scale
    else:
        scale = 2 / (stream.stats["max"] - stream.stats["min"] + eps)
        shift = -1 - stream.stats["min"] * scale
    return scale.float(), shift.float()
