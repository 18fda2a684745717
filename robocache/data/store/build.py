"""Packing episodes into a store in one streaming pass, with statistics."""

import math
import numbers
import warnings

import numpy as np
import torch
from tqdm.auto import tqdm

from ..frames import EncodedFrames
from ..time import NS_PER_S, times_to_ns
from .ingest_frames import FrameOptions, Frames, pack_frames, prepare
from .packed import PackedStream

META_KEYS = ("task", "episode_index", "length")
_INTEGER_STATS = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
# Integers whose squares sum exactly in int64 over a chunk of _Moments.add.
_SMALL_INTEGERS = (torch.uint8, torch.int8, torch.int16)
# Statistics are computed per element up to this many elements a sample (not images).
MAX_QUANTILE_ELEMENTS = 4096


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


class Builder:
    """Collects episodes one at a time; packs each stream once at the end."""

    def __init__(self, stats, device, frames=None):
        self.stats, self.device = stats, device
        self.frames = frames or FrameOptions()
        self.chunks, self.counts, self.moments, self.specs = {}, {}, {}, {}
        self.unstated = set()  # encoded keys some of whose frames ingest did not decode
        self.episode_index, self.lengths, self.task_index, self.tasks = [], [], [], {}
        self.coarse_times = {}  # key -> the first episode's note on float32 seconds

    def add(self, e, episode):
        if not isinstance(episode, dict):
            raise TypeError(
                f"EpisodeStore.from_episodes: episode {e} must be a dict of key -> "
                f"(values, times); got {type(episode).__name__}"
            )
        counts = {}
        for key, item in episode.items():
            if key in META_KEYS:
                continue
            counts[key] = self._add_stream(e, key, item)
        for key in self.counts:
            self.counts[key].append(counts.get(key, 0))
        index = episode.get("episode_index", len(self.lengths))
        length = episode.get("length", max(counts.values(), default=0))
        task = episode.get("task", "")
        if not isinstance(task, str):
            raise TypeError(f"EpisodeStore: episode {e}: task must be a str; got {task!r}")
        for name, value in (("episode_index", index), ("length", length)):
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise TypeError(
                    f"EpisodeStore: episode {e}: {name} must be an int >= 0; got {value!r}"
                )
            if value > 2**63 - 1:  # kept as int64
                raise ValueError(
                    f"EpisodeStore: episode {e}: {name} must be in [0, 2**63 - 1]; got {value}"
                )
        self.episode_index.append(int(index))
        self.lengths.append(int(length))
        self.task_index.append(self.tasks.setdefault(task, len(self.tasks)))

    def _add_stream(self, e, key, item):
        where = f"episode {e}, stream {key!r}"
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(f"EpisodeStore: {where} must be a (values, times) pair")
        values = item[0]
        if not isinstance(values, EncodedFrames):  # frames are encoded on the host
            coded = self.frames.form(key) != "raw" or self.frames.size is not None
            values = _as_tensor(values, f"{where} values", None if coded else self.device)
        coarse = []
        times = times_to_ns(_as_tensor(item[1], f"{where} times"), f"EpisodeStore: {where}", coarse)
        if coarse:
            self.coarse_times.setdefault(key, coarse[0])
        shape = (len(values),) if isinstance(values, EncodedFrames) else tuple(values.shape)
        if times.dim() != 1 or len(shape) < 1 or shape[0] != times.shape[0]:
            raise ValueError(
                f"EpisodeStore: {where}: values (N, ...) and times (N,) must have the same "
                f"N; got values {shape} and times {tuple(times.shape)}"
            )
        if times.numel() > 1 and bool((times[1:] < times[:-1]).any()):
            i = int((times[1:] < times[:-1]).nonzero()[0])
            raise ValueError(
                f"EpisodeStore: {where}: times must be non-decreasing; sample {i + 1} "
                f"({int(times[i + 1])} ns) comes before sample {i} ({int(times[i])} ns)"
            )
        values = prepare(key, values, where, self.frames)
        raw = values.decoded if isinstance(values, Frames) else values
        spec = (
            (values.encoding.dtype, values.encoding.shape, values.encoding.codec)
            if isinstance(values, Frames)
            else (values.dtype, tuple(values.shape[1:]), "raw")
        )
        if self.specs.setdefault(key, spec) != spec:
            raise ValueError(
                f"EpisodeStore: {where}: dtype {spec[0]}, shape {spec[1]} and frames "
                f"{spec[2]!r} differ from the earlier episodes' {self.specs[key][0]}, "
                f"{self.specs[key][1]} and {self.specs[key][2]!r}"
            )
        if self.device is not None:
            times = times.to(self.device)  # checked on the host first
            if not isinstance(values, Frames):
                values = values.to(self.device)
        if key not in self.chunks:
            self.chunks[key] = []
            self.counts[key] = [0] * len(self.lengths)  # earlier episodes had none
            self.moments[key] = _Moments()
        if isinstance(values, Frames):
            self.chunks[key].append((Frames(values.images, values.encoding), times.contiguous()))
        else:
            self.chunks[key].append((values.contiguous(), times.contiguous()))
        if raw is None:
            self.unstated.add(key)
        elif self.stats and (raw.is_floating_point() or raw.dtype in _INTEGER_STATS):
            self.moments[key].add(raw)
        return times.shape[0]

    def finish(self):
        """(streams, episodes, tasks): key -> PackedStream, the per-episode
        tables, and the task strings."""
        if not self.lengths:
            raise ValueError("EpisodeStore.from_episodes: no episodes were given")
        self.frames.check_keys(self.chunks)
        if self.coarse_times:  # said once, not once an episode
            keys = list(self.coarse_times)
            others = f" (also streams {keys[1:]})" if len(keys) > 1 else ""
            warnings.warn(self.coarse_times[keys[0]] + others, stacklevel=4)
        streams = {}
        for key in list(self.chunks):
            chunks = self.chunks.pop(key)  # freed as each stream is packed
            dtype, shape, form = self.specs[key]
            byte_offsets, encoding = None, None
            if form != "raw":
                values, byte_offsets = pack_frames([c[0] for c in chunks])
                values = values.to(chunks[0][1].device)
                encoding = chunks[0][0].encoding
            else:
                values = torch.cat([c[0] for c in chunks])
            times = torch.cat([c[1] for c in chunks])
            del chunks
            offsets = torch.tensor([0] + self.counts[key], dtype=torch.int64).cumsum(0)
            offsets = offsets.to(times.device)
            if byte_offsets is not None:
                byte_offsets = byte_offsets.to(times.device)
            stats = {} if key in self.unstated else self.moments[key].result()
            streams[key] = PackedStream(values, times, offsets, stats, byte_offsets, encoding)
        episodes = {
            "episode_index": torch.tensor(self.episode_index, dtype=torch.int64),
            "length": torch.tensor(self.lengths, dtype=torch.int64),
            "task_index": torch.tensor(self.task_index, dtype=torch.int64),
        }
        if self.device is not None:
            episodes = {k: v.to(self.device) for k, v in episodes.items()}
        return streams, episodes, list(self.tasks)


def pack_episodes(episodes, *, stats, progress, total, device, frames=None):
    """Every episode of an iterable packed per stream: (streams, episodes, tasks)."""
    builder = Builder(stats, device, frames)
    if total is None and hasattr(episodes, "__len__"):
        total = len(episodes)
    bar = tqdm(episodes, total=total, disable=not progress, desc="packing episodes", unit="ep")
    for e, episode in enumerate(bar):
        builder.add(e, episode)
    return builder.finish()


def warn_if_spacing_contradicts_fps(streams, fps):
    """A warning where no stream's typical sample spacing is within 10x of
    the frame period that ``fps`` implies: the times are then most likely in
    another unit (int64 times are nanoseconds; float times are seconds)."""
    period = NS_PER_S / fps
    spacings = {}
    for key, s in streams.items():
        gaps = s.times.diff()
        if gaps.numel() == 0:
            continue
        inside = torch.ones_like(gaps, dtype=torch.bool)
        starts = s.offsets[1:-1]
        inside[starts[(starts > 0) & (starts <= gaps.numel())] - 1] = False  # across episodes
        gaps = gaps[inside & (gaps > 0)]
        if gaps.numel():
            spacings[key] = float(gaps.double().median())
    if not spacings or any(0.1 <= g / period <= 10 for g in spacings.values()):
        return
    key = min(spacings, key=lambda k: abs(math.log(spacings[k] / period)))
    warnings.warn(
        f"EpisodeStore.from_episodes: fps={fps:g} means samples about {period:.4g} ns apart, "
        f"but no stream's samples are within 10x of that (stream {key!r}: {spacings[key]:.4g} "
        "ns apart). int64 times are nanoseconds and float times are seconds: convert "
        "milliseconds or microseconds first",
        stacklevel=3,
    )


def quantile_name(q):
    """q01 for 0.01, q99 for 0.99 (LeRobot's names); q99_5 for 0.995."""
    percent = round(q * 100, 6)
    return (
        f"q{int(percent):02d}"
        if percent == int(percent)
        else "q" + f"{percent:g}".replace(".", "_")
    )


def add_quantile(streams, q):
    """Adds quantile ``q`` to every stream's statistics (streams of at most
    MAX_QUANTILE_ELEMENTS elements a sample)."""
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"EpisodeStore: quantiles must lie in [0, 1]; got {q}")
    name = quantile_name(q)
    for s in streams.values():
        per_sample = math.prod(s.values.shape[1:])
        if (
            s.encoding is not None
            or s.values.shape[0] == 0
            or per_sample > MAX_QUANTILE_ELEMENTS
            or s.values.dtype == torch.bool
        ):
            continue
        if name in s.stats:
            raise ValueError(f"EpisodeStore: quantile {q} is asked for twice (as {name})")
        flat = s.values.reshape(s.values.shape[0], per_sample).cpu().double().numpy()
        value = torch.from_numpy(np.quantile(flat, q, axis=0))
        s.stats[name] = value.reshape(s.values.shape[1:]).to(s.values.device)
