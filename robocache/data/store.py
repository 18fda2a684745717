"""EpisodeStore: a dataset's episodes packed once, kept where the model is.

Each named stream (``"observation.state"``, ``"action"``,
``"observation.images.top"``, ...) is packed: ``values`` (N, *shape) in any
dtype, ``times`` (N,) int64 nanoseconds and ``offsets`` (E + 1,), episode
``e`` owning rows ``offsets[e]:offsets[e + 1]``. Streams keep their own rates
and may start and stop anywhere in an episode; an episode may have no samples
of a stream. Windows are cut from it by ``robocache.sample_windows``
(``robocache.data.WindowSampler``).
"""

import json
import math
import os
from dataclasses import dataclass, field

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load, load_file, save_file
from tqdm.auto import tqdm

from .shards import take_shard

__all__ = ["EpisodeStore", "PackedStream"]

_FORMAT = "robocache.EpisodeStore"
_VERSION = "1"
_FILE = "store.safetensors"
_STATS = ("mean", "std", "min", "max")
_META_KEYS = ("task", "episode_index", "length")


@dataclass
class PackedStream:
    """One stream of every episode, back to back."""

    values: torch.Tensor  # (N, *shape)
    times: torch.Tensor  # (N,) int64 ns, non-decreasing within each episode
    offsets: torch.Tensor  # (E + 1,) int64
    stats: dict = field(default_factory=dict)  # name -> tensor of the sample shape (float64)

    @property
    def nbytes(self):
        tensors = (self.values, self.times, self.offsets, *self.stats.values())
        return sum(t.numel() * t.element_size() for t in tensors)

    def map(self, fn):
        return PackedStream(
            fn(self.values),
            fn(self.times),
            fn(self.offsets),
            {k: fn(v) for k, v in self.stats.items()},
        )


class _Moments:
    """Streaming per-element mean, variance (Chan's merge), min and max in float64."""

    def __init__(self):
        self.count, self.mean, self.m2, self.min, self.max = 0, None, None, None, None

    def add(self, values):
        """Adds the samples in chunks of rows, so the float64 temporaries stay small."""
        per_row = max(1, math.prod(values.shape[1:]))
        step = max(1, (1 << 22) // per_row)
        for start in range(0, values.shape[0], step):
            self._add(values[start : start + step])

    def _add(self, values):
        n = values.shape[0]
        if values.dtype in _SMALL_INTEGERS:  # exact integer sums, 4-byte temporaries
            x = values.to(torch.int32)
            total = x.sum(0, dtype=torch.int64).double()
            mean = total / n
            m2 = x.square_().sum(0, dtype=torch.int64).double() - total * mean
            lo, hi = values.amin(0).double(), values.amax(0).double()
        else:
            x = values.double()
            mean = x.mean(0)
            m2 = ((x - mean) ** 2).sum(0)
            lo, hi = x.amin(0), x.amax(0)
        if self.count == 0:
            self.count, self.mean, self.m2, self.min, self.max = n, mean, m2, lo, hi
            return
        total = self.count + n
        delta = mean - self.mean
        self.mean = self.mean + delta * (n / total)
        self.m2 = self.m2 + m2 + delta**2 * (self.count * n / total)
        self.min, self.max = torch.minimum(self.min, lo), torch.maximum(self.max, hi)
        self.count = total

    def result(self):
        if self.count == 0:
            return {}
        std = (self.m2 / self.count).sqrt()
        return {"mean": self.mean, "std": std, "min": self.min, "max": self.max}


def _as_tensor(x, what, device=None):
    """A tensor of its own on device (default: the host): an iterator may
    reuse its buffers."""
    device = torch.device("cpu") if device is None else device
    if torch.is_tensor(x):
        return x.detach().to(device, copy=True)
    if isinstance(x, np.ndarray):
        if device.type != "cpu":
            return torch.from_numpy(x).to(device)
        return torch.from_numpy(np.array(x, copy=True))
    raise TypeError(
        f"EpisodeStore: {what} must be a torch.Tensor or numpy array; got {type(x).__name__}"
    )


def _nanoseconds(times, what):
    """int64 ns as given, or float seconds rounded to ns."""
    if times.dtype == torch.int64:
        return times
    if times.is_floating_point():
        if not torch.isfinite(times).all():
            raise ValueError(f"EpisodeStore: {what} has NaN or infinite times")
        return (times.double() * 1e9).round().to(torch.int64)
    raise TypeError(
        f"EpisodeStore: {what} must be int64 nanoseconds or float seconds; got {times.dtype}"
    )


class _Builder:
    """Collects episodes one at a time; packs each stream once at the end."""

    def __init__(self, stats, device):
        self.stats, self.device = stats, device
        self.chunks, self.counts, self.moments, self.specs = {}, {}, {}, {}
        self.episode_index, self.lengths, self.task_index, self.tasks = [], [], [], {}

    def add(self, e, episode):
        if not isinstance(episode, dict):
            raise TypeError(
                f"EpisodeStore.from_episodes: episode {e} must be a dict of key -> "
                f"(values, times); got {type(episode).__name__}"
            )
        counts = {}
        for key, item in episode.items():
            if key in _META_KEYS:
                continue
            where = f"episode {e}, stream {key!r}"
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise TypeError(f"EpisodeStore: {where} must be a (values, times) pair")
            values = _as_tensor(item[0], f"{where} values", self.device)
            times = _nanoseconds(_as_tensor(item[1], f"{where} times"), where)
            if times.dim() != 1 or values.dim() < 1 or values.shape[0] != times.shape[0]:
                raise ValueError(
                    f"EpisodeStore: {where}: values (N, ...) and times (N,) must have the same "
                    f"N; got values {tuple(values.shape)} and times {tuple(times.shape)}"
                )
            if times.numel() > 1 and bool((times[1:] < times[:-1]).any()):
                i = int((times[1:] < times[:-1]).nonzero()[0])
                raise ValueError(
                    f"EpisodeStore: {where}: times must be non-decreasing; sample {i + 1} "
                    f"({int(times[i + 1])} ns) comes before sample {i} ({int(times[i])} ns)"
                )
            spec = (values.dtype, tuple(values.shape[1:]))
            if self.specs.setdefault(key, spec) != spec:
                raise ValueError(
                    f"EpisodeStore: {where}: dtype {spec[0]} and shape {spec[1]} differ from "
                    f"the earlier episodes' {self.specs[key][0]} and {self.specs[key][1]}"
                )
            if self.device is not None:
                times = times.to(self.device)  # checked on the host first
            if key not in self.chunks:
                self.chunks[key] = []
                self.counts[key] = [0] * len(self.lengths)  # earlier episodes had none
                self.moments[key] = _Moments()
            self.chunks[key].append((values.contiguous(), times.contiguous()))
            counts[key] = values.shape[0]
            if self.stats and (values.is_floating_point() or values.dtype in _INTEGER_STATS):
                self.moments[key].add(values)
        for key in self.counts:
            self.counts[key].append(counts.get(key, 0))
        index = episode.get("episode_index", len(self.lengths))
        length = episode.get("length", max(counts.values(), default=0))
        task = episode.get("task", "")
        if not isinstance(task, str):
            raise TypeError(f"EpisodeStore: episode {e}: task must be a str; got {task!r}")
        self.episode_index.append(int(index))
        self.lengths.append(int(length))
        self.task_index.append(self.tasks.setdefault(task, len(self.tasks)))

    def finish(self, fps, info=None):
        if not self.lengths:
            raise ValueError("EpisodeStore.from_episodes: no episodes were given")
        streams = {}
        for key in list(self.chunks):
            chunks = self.chunks.pop(key)  # freed as each stream is packed
            dtype, shape = self.specs[key]
            values = (
                torch.cat([c[0] for c in chunks])
                if chunks
                else torch.empty(0, *shape, dtype=dtype, device=self.device)
            )
            times = torch.cat([c[1] for c in chunks])
            del chunks
            offsets = torch.tensor([0] + self.counts[key], dtype=torch.int64).cumsum(0)
            offsets = offsets.to(values.device)
            streams[key] = PackedStream(values, times, offsets, self.moments[key].result())
        episodes = {
            "episode_index": torch.tensor(self.episode_index, dtype=torch.int64),
            "length": torch.tensor(self.lengths, dtype=torch.int64),
            "task_index": torch.tensor(self.task_index, dtype=torch.int64),
        }
        if self.device is not None:
            episodes = {k: v.to(self.device) for k, v in episodes.items()}
        return EpisodeStore(streams, episodes, list(self.tasks), fps, info=info)


_INTEGER_STATS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
# Integers whose squares sum exactly in int64 over a chunk of _Moments.add.
_SMALL_INTEGERS = (torch.uint8, torch.int8, torch.int16)


class EpisodeStore:
    """Packed streams of E episodes on one device, with per-episode metadata.

    Build one with ``EpisodeStore.from_episodes`` (or a loader), keep it with
    ``save``/``load``, move it with ``to``. ``store[key]`` is a PackedStream.

    Attributes:
        streams: key -> PackedStream.
        episodes: ``episode_index`` (the source's index), ``length`` (frames,
            as the source counts them) and ``task_index``, each (E,) int64.
        tasks: task strings; ``tasks[task_index]``.
        fps: the source's frame rate, or None.
        shard: a ``Shard`` when the store is one rank's episodes of a larger
            one (``take_shard``, ``load(shard=...)``), else None.
        info: what the source says of itself beyond its data, as JSON-ready
            values (robomimic's ``env_args``, for one); ``save`` keeps it.
    """

    def __init__(self, streams, episodes, tasks, fps=None, shard=None, info=None):
        if not streams:
            raise ValueError("EpisodeStore: a store needs at least one stream")
        self.streams = dict(streams)
        self.episodes = dict(episodes)
        self.tasks = list(tasks)
        self.fps = None if fps is None else float(fps)
        self.shard = shard
        self.info = dict(info or {})
        E = self.num_episodes
        for key, s in self.streams.items():
            if s.offsets.shape != (E + 1,):
                raise ValueError(
                    f"EpisodeStore: stream {key!r} has offsets of shape {tuple(s.offsets.shape)}; "
                    f"expected ({E + 1},) for {E} episodes"
                )

    # -- building --------------------------------------------------------------

    @classmethod
    def from_episodes(
        cls,
        episodes,
        *,
        fps=None,
        stats=True,
        quantiles=(),
        progress=True,
        total=None,
        device=None,
        info=None,
    ):
        """Packs episodes in one streaming pass.

        Args:
            episodes: an iterable of dicts, one per episode: key ->
                (values (n, *shape), times (n,)) as tensors or numpy arrays,
                times in int64 nanoseconds (or float seconds, rounded to ns),
                non-decreasing. Optional entries: ``"task"`` (str),
                ``"episode_index"`` (int; default: the position) and
                ``"length"`` (int; default: the largest sample count).
                A stream an episode lacks has no samples in it.
            fps: the source's frame rate, if it has one.
            stats: compute per-stream mean, std, min and max (float64, over
                the samples, per element of the sample shape).
            quantiles: e.g. ``(0.01, 0.99)``: also these quantiles (as
                ``"q01"``, ``"q99"``), for streams of at most 4096 elements a
                sample (not images).
            progress: show a progress bar.
            total: the number of episodes, for the bar, if ``episodes`` has no len().
            device: pack the store there (default: the host). Each episode
                moves there as it arrives.
            info: the source's own metadata (``EpisodeStore.info``).

        Every episode's tensors are copied once into per-stream lists on
        ``device``, and each stream is packed (one concatenation) at the end.
        Peak memory where the store is built: the data plus its largest stream.
        On the host, with a ``device``: the episode in hand (plus what the
        iterator holds).
        """
        builder = _Builder(stats, None if device is None else torch.device(device))
        total = (
            total
            if total is not None
            else (len(episodes) if hasattr(episodes, "__len__") else None)
        )
        bar = tqdm(episodes, total=total, disable=not progress, desc="packing episodes", unit="ep")
        for e, episode in enumerate(bar):
            builder.add(e, episode)
        store = builder.finish(fps, info)
        for q in quantiles:
            store._add_quantile(float(q))
        return store

    def _add_quantile(self, q):
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"EpisodeStore: quantiles must lie in [0, 1]; got {q}")
        name = quantile_name(q)
        for s in self.streams.values():
            per_sample = math.prod(s.values.shape[1:])
            if s.values.shape[0] == 0 or per_sample > 4096 or s.values.dtype == torch.bool:
                continue
            if name in s.stats:
                raise ValueError(f"EpisodeStore: quantile {q} is asked for twice (as {name})")
            flat = s.values.reshape(s.values.shape[0], per_sample).cpu().double().numpy()
            value = torch.from_numpy(np.quantile(flat, q, axis=0))
            s.stats[name] = value.reshape(s.values.shape[1:]).to(s.values.device)

    # -- what it holds -----------------------------------------------------------

    @property
    def num_episodes(self):
        return int(self.episodes["episode_index"].shape[0])

    @property
    def device(self):
        return next(iter(self.streams.values())).values.device

    @property
    def nbytes(self):
        meta = sum(t.numel() * t.element_size() for t in self.episodes.values())
        return meta + sum(s.nbytes for s in self.streams.values())

    def keys(self):
        return self.streams.keys()

    def __getitem__(self, key):
        try:
            return self.streams[key]
        except KeyError:
            raise KeyError(
                f"EpisodeStore: no stream {key!r}; the streams are {sorted(self.streams)}"
            ) from None

    def __contains__(self, key):
        return key in self.streams

    def __repr__(self):
        lines = [
            f"EpisodeStore({self.num_episodes} episodes, {len(self.tasks)} tasks, "
            f"fps={self.fps}, device={self.device}, {_size(self.nbytes)})"
        ]
        for key, s in self.streams.items():
            lines.append(
                f"  {key}: {s.values.shape[0]} samples of {tuple(s.values.shape[1:])} "
                f"{str(s.values.dtype).removeprefix('torch.')}, {_size(s.nbytes)}"
            )
        return "\n".join(lines)

    # -- moving and keeping --------------------------------------------------------

    def to(self, device, non_blocking=False):
        """The store on ``device`` (a new store; the tensors are copied once)."""
        fn = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return self._map(fn)

    def pin_memory(self):
        """The store in pinned host memory: for stores too large for the GPU,
        whose batches the sampler then copies to it without blocking."""
        return self._map(lambda t: t.pin_memory())

    def _map(self, fn):
        streams = {k: s.map(fn) for k, s in self.streams.items()}
        episodes = {k: fn(v) for k, v in self.episodes.items()}
        return EpisodeStore(streams, episodes, self.tasks, self.fps, self.shard, self.info)

    def take_shard(self, rank, world_size):
        """Rank ``rank``'s episodes of ``world_size`` ranks: contiguous, about
        1/world_size of the frames, at least one episode each; views of this
        store's tensors, statistics kept (the whole store's)."""
        return take_shard(self, rank, world_size)

    def save(self, directory):
        """Writes ``directory/store.safetensors`` (a new file renamed into
        place): every tensor by name, the keys, tasks and fps in its
        metadata. ``load`` maps it back."""
        if self.shard is not None:
            raise ValueError(
                "EpisodeStore.save: this store is one rank's shard; save the whole store "
                "(each rank then loads its part with load(directory, shard=(rank, world_size)))"
            )
        info = _info_json(self.info)  # before any tensor is copied to the host
        os.makedirs(directory, exist_ok=True)
        tensors = {f"episodes/{k}": v.contiguous().cpu() for k, v in self.episodes.items()}
        # Streams are named by position (keys may hold any character); the
        # keys are in the metadata, in that order.
        for i, s in enumerate(self.streams.values()):
            tensors[f"streams/{i}/values"] = s.values.contiguous().cpu()
            tensors[f"streams/{i}/times"] = s.times.contiguous().cpu()
            tensors[f"streams/{i}/offsets"] = s.offsets.contiguous().cpu()
            for name, t in s.stats.items():
                tensors[f"streams/{i}/stats/{name}"] = t.contiguous().cpu()
        meta = {
            "format": _FORMAT,
            "version": _VERSION,
            "keys": json.dumps(list(self.streams)),
            "tasks": json.dumps(self.tasks),
            "fps": json.dumps(self.fps),
            "info": info,
        }
        # A new file, then a rename: a store loaded (mapped) from this file
        # stays valid, and a crash never leaves half a cache.
        path = os.path.join(directory, _FILE)
        save_file(tensors, path + ".tmp", metadata=meta)
        os.replace(path + ".tmp", path)

    @classmethod
    def load(cls, directory, device=None, mmap=True, shard=None):
        """A store written by ``save``. With ``mmap`` the tensors map the file
        (nothing is read until used); ``shard=(rank, world_size)`` keeps only
        that rank's episodes (``take_shard``), so a mapped load reads only
        their bytes; ``device`` moves them there."""
        path = os.path.join(directory, _FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"EpisodeStore.load: no {_FILE} in {directory}")
        if mmap:
            tensors = load_file(path)
        else:
            with open(path, "rb") as f:
                tensors = load(f.read())
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
        if meta.get("format") != _FORMAT or meta.get("version") != _VERSION:
            raise ValueError(
                f"EpisodeStore.load: {path} is not an EpisodeStore of version {_VERSION} "
                f"(format {meta.get('format')!r}, version {meta.get('version')!r})"
            )
        streams = {}
        for i, key in enumerate(json.loads(meta["keys"])):
            prefix = f"streams/{i}/"
            stats = {
                name[len(prefix) + 6 :]: t
                for name, t in tensors.items()
                if name.startswith(prefix + "stats/")
            }
            streams[key] = PackedStream(
                tensors[prefix + "values"],
                tensors[prefix + "times"],
                tensors[prefix + "offsets"],
                stats,
            )
        episodes = {
            name[len("episodes/") :]: t
            for name, t in tensors.items()
            if name.startswith("episodes/")
        }
        store = cls(
            streams,
            episodes,
            json.loads(meta["tasks"]),
            json.loads(meta["fps"]),
            info=json.loads(meta.get("info", "{}")),  # stores saved before info: none
        )
        if shard is not None:
            if not isinstance(shard, (tuple, list)) or len(shard) != 2:
                raise ValueError(
                    f"EpisodeStore.load: shard must be (rank, world_size); got {shard!r}"
                )
            store = store.take_shard(*shard)
        return store.to(device) if device is not None else store


def _info_json(info):
    try:
        return json.dumps(info)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"EpisodeStore.save: info must hold JSON values (str, number, bool, None, "
            f"list, dict); {e}"
        ) from e


def quantile_name(q):
    """q01 for 0.01, q99 for 0.99 (LeRobot's names); q99_5 for 0.995."""
    percent = round(q * 100, 6)
    return (
        f"q{int(percent):02d}"
        if percent == int(percent)
        else "q" + f"{percent:g}".replace(".", "_")
    )


def _size(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
