"""EpisodeStore: a dataset's episodes packed once, kept where the model is.

Each named stream (``"observation.state"``, ``"action"``,
``"observation.images.top"``, ...) is a PackedStream: ``values`` (N, *shape)
in any dtype, ``times`` (N,) int64 nanoseconds and ``offsets`` (E + 1,),
episode ``e`` owning rows ``offsets[e]:offsets[e + 1]``. Streams keep their
own rates and may start and stop anywhere in an episode; an episode may have
no samples of a stream. ``robocache.data.WindowSampler`` cuts windows from it.
"""

import torch

from .._device import resolve_device
from ..time import check_fps
from . import format as store_format
from .build import add_quantile, pack_episodes, warn_if_spacing_contradicts_fps
from .ingest_frames import FrameOptions
from .placement import current_place, place_stream, resolve, values_nbytes
from .shards import check_rank, shard_parts
from .validate import check_sorted_times


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
        placement: key -> where its values live: ``"cuda"``, ``"pinned"``,
            ``"mapped"`` or ``"cpu"`` (``place``).
        mapped: the keys whose values map the store's file (``load``).
        mapped_rows: key -> where a mapped key's values lie in that file
            (``rows.MappedRows``), for reads ahead of the sampler.
    """

    def __init__(
        self, streams, episodes, tasks, fps=None, shard=None, info=None, mapped=(), *, check=True
    ):
        """The store of ``streams`` (key -> PackedStream) and the ``episodes``
        tables; ``check``: check that each stream's times rise within each
        episode (one pass over the times; off where they were checked as
        they came in)."""
        if not streams:
            raise ValueError("EpisodeStore: a store needs at least one stream")
        self.streams = dict(streams)
        self.episodes = dict(episodes)
        self.tasks = list(tasks)
        self.fps = None if fps is None else float(fps)
        self.shard = shard
        self.info = dict(info or {})
        mapped = mapped if isinstance(mapped, dict) else dict.fromkeys(mapped)
        self.mapped_rows = {k: v for k, v in mapped.items() if k in self.streams}
        self.mapped = frozenset(self.mapped_rows)
        E = self.num_episodes
        for key, s in self.streams.items():
            if s.offsets.shape != (E + 1,):
                raise ValueError(
                    f"EpisodeStore: stream {key!r} has offsets of shape {tuple(s.offsets.shape)}; "
                    f"expected ({E + 1},) for {E} episodes"
                )
        if check:
            check_sorted_times(self.streams, "EpisodeStore", error=ValueError)

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
        frames="raw",
        jpeg_quality=90,
        resize=None,
        verify=True,
    ):
        """Packs episodes in one streaming pass.

        Args:
            episodes: an iterable of dicts, one per episode: key ->
                (values (n, *shape), times (n,)) as tensors or numpy arrays,
                times in int64 nanoseconds (or float seconds, rounded to ns;
                float32 seconds warn: they carry about 7 digits),
                non-decreasing. Optional entries: ``"task"`` (str),
                ``"episode_index"`` (int; default: the position) and
                ``"length"`` (int; default: the largest sample count).
                A stream an episode lacks has no samples in it.
            fps: the source's frame rate, if it has one. Where no stream's
                samples are within 10x of 1/fps apart, a warning says the
                times are probably in another unit.
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
            frames: how image streams are kept: ``"raw"`` (decoded), ``"jpeg"``
                (1- and 3-channel uint8 frames as JPEG; RGBA and uint16 depth
                frames as PNG, which keeps them exactly) or ``"png"``; or a
                dict key -> one of them (other keys raw). An image stream is
                (n, H, W, C) uint8 with C of 1, 3 or 4, or (n, H, W, 1)
                uint16. Frames that arrive encoded (``EncodedFrames``) in the
                codec asked for, with no resize, are kept byte for byte.
            jpeg_quality: JPEG's quality, 1 to 100.
            resize: (H, W): every image stream resized once, here, bilinear
                with antialiasing (as torchvision's ``resize(antialias=True)``).
            verify: decode every frame that arrives encoded once, so that a
                corrupt frame is an error here and not at sampling (off:
                such streams, kept byte for byte, get no statistics).

        Every episode's tensors are copied once into per-stream lists on
        ``device``, and each stream is packed (one concatenation) at the end.
        Peak memory where the store is built: the data plus its largest stream.
        On the host, with a ``device``: the episode in hand (plus what the
        iterator holds).
        """
        where = "EpisodeStore.from_episodes"
        device = resolve_device(device, where)
        if fps is not None:
            fps = check_fps(fps, where)
        options = FrameOptions.check(frames, jpeg_quality, resize, verify)
        streams, rows, tasks = pack_episodes(
            episodes, stats=stats, progress=progress, total=total, device=device, frames=options
        )
        if fps is not None:
            warn_if_spacing_contradicts_fps(streams, fps)
        for q in quantiles:
            add_quantile(streams, float(q))
        return cls(streams, rows, tasks, fps, info=info, check=False)  # checked as they came

    # -- what it holds -----------------------------------------------------------

    @property
    def num_episodes(self):
        return int(self.episodes["episode_index"].shape[0])

    @property
    def device(self):
        """Where the store's index lives (its times, offsets and episode
        tables): a CUDA device where any key's times are there, else the host."""
        for s in self.streams.values():
            if s.times.is_cuda:
                return s.times.device
        return next(iter(self.streams.values())).values.device

    @property
    def placement(self):
        return {k: current_place(s, k in self.mapped) for k, s in self.streams.items()}

    @property
    def nbytes(self):
        meta = sum(t.numel() * t.element_size() for t in self.episodes.values())
        return meta + sum(s.nbytes for s in self.streams.values())

    def keys(self):
        return self.streams.keys()

    def time_range(self):
        """(first, last): the earliest and latest sample time of any stream,
        in ns, or None for a store with no samples (one pass over the times,
        and one host read)."""
        ends = [
            torch.stack(s.times.aminmax()).cpu() for s in self.streams.values() if s.times.numel()
        ]
        if not ends:
            return None
        ends = torch.stack(ends)
        return int(ends[:, 0].min()), int(ends[:, 1].max())

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
        placement = self.placement
        for key, s in self.streams.items():
            encoded = ""
            if s.encoding is not None:
                ratio = s.raw_nbytes / max(1, values_nbytes(s))
                encoded = f" {s.encoding.codec} ({ratio:.1f}x smaller than raw)"
            lines.append(
                f"  {key}: {s.num_samples} samples of {s.sample_shape} "
                f"{str(s.sample_dtype).removeprefix('torch.')}{encoded}, {_size(s.nbytes)}; "
                f"values {placement[key]} ({_size(values_nbytes(s))})"
            )
        return "\n".join(lines)

    # -- moving and keeping --------------------------------------------------------

    def to(self, device, non_blocking=False):
        """The store on ``device`` (a new store; the tensors are copied once)."""
        device = resolve_device(device, "EpisodeStore.to")
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self):
        """The store in pinned host memory: for stores too large for the GPU,
        whose batches the sampler then copies to it without blocking."""
        if not torch.cuda.is_available():
            raise RuntimeError(
                "EpisodeStore.pin_memory: pinned (page-locked) memory serves a CUDA device, and "
                f"torch {torch.__version__} sees none; keep the store on the host as it is"
            )
        return self._map(lambda t: t.pin_memory())

    def _map(self, fn):
        self._check_mapped(self.mapped)
        streams = {k: s.map(fn) for k, s in self.streams.items()}
        episodes = {k: fn(v) for k, v in self.episodes.items()}
        return self._derived(streams, episodes, self.shard)

    def _derived(self, streams, episodes, shard, mapped=()):
        """A store of this one's tasks, fps and info over tensors of its own
        (times already checked)."""
        return EpisodeStore(
            streams, episodes, self.tasks, self.fps, shard, self.info, mapped=mapped, check=False
        )

    def place(self, placement, *, budget=None):
        """The store with each key where ``placement`` says (a new store;
        tensors already there are not copied).

        Args:
            placement: one place for every key (``"cuda"``, ``"pinned"``,
                ``"mapped"``, ``"cpu"``), ``"auto"``, or a dict of fnmatch
                patterns -> place, e.g. ``{"observation.images.*": "pinned",
                "*": "cuda"}``: the first pattern a key matches wins, keys
                no pattern matches stay where they are, and a pattern that
                matches no key is an error. ``"pinned"``: values in
                page-locked host memory, read by the GPU's kernel directly;
                times, offsets and statistics on the GPU. ``"mapped"``:
                values read from the store's file on demand (a store that
                ``load`` mapped); windows cut on the host.
            budget: for ``"auto"``, the GPU bytes it may fill (default: half
                the free GPU memory): the times, offsets and statistics of
                every key first, then the smallest streams' values; the
                largest streams' values go to pinned memory.
        """
        mappable = {k: k in self.mapped for k in self.streams}
        current = self.placement
        plan = resolve(placement, self.streams, current, mappable, budget)
        self._check_mapped([k for k, p in plan.items() if current[k] == "mapped" and p != "mapped"])
        streams = {
            k: place_stream(s, plan[k], read=current[k] == "mapped" and plan[k] == "cpu")
            for k, s in self.streams.items()
        }
        on_gpu = any(p in ("cuda", "pinned") for p in plan.values())
        index_device = torch.device("cuda") if on_gpu else torch.device("cpu")
        episodes = {k: v.to(index_device) for k, v in self.episodes.items()}
        mapped = {k: self.mapped_rows[k] for k, p in plan.items() if p == "mapped"}
        return self._derived(streams, episodes, self.shard, mapped)

    def take_shard(self, rank, world_size):
        """Rank ``rank``'s episodes of ``world_size`` ranks: contiguous, about
        1/world_size of the frames, at least one episode each; views of this
        store's tensors, statistics kept (the whole store's)."""
        if self.shard is not None:
            raise ValueError(f"shard: the store is already rank {self.shard.rank}'s shard")
        streams, episodes, shard = shard_parts(self.streams, self.episodes, rank, world_size)
        first, end = shard.ranges[rank]
        mapped = {}
        for key, rows in self.mapped_rows.items():
            stream = self.streams[key]
            offsets = stream.offsets
            if stream.encoding is not None:  # rows of the file are the frames' bytes
                offsets = stream.byte_offsets[offsets]
            mapped[key] = rows and rows.part(int(offsets[first]), int(offsets[end]))
        return self._derived(streams, episodes, shard, mapped)

    def save(self, directory):
        """Writes ``directory/store.safetensors`` (a new file renamed into
        place): every tensor by name, the keys, tasks and fps in its
        metadata. ``load`` maps it back."""
        if self.shard is not None:
            raise ValueError(
                "EpisodeStore.save: this store is one rank's shard; save the whole store "
                "(each rank then loads its part with load(directory, shard=(rank, world_size)))"
            )
        # Mapped values are read whole, and written with new CRCs: checked first.
        self._check_mapped(self.mapped)
        store_format.write(directory, self.streams, self.episodes, self.tasks, self.fps, self.info)

    @classmethod
    def load(
        cls,
        directory,
        device=None,
        mmap=True,
        shard=None,
        *,
        placement=None,
        check=True,
        verify=True,
    ):
        """A store written by ``save``.

        Args:
            directory: the folder ``save`` wrote.
            device: move the store there (default: stay on the host).
            mmap: map the file (nothing is read until used, but what the
                checks below read); off, the store (or the shard) is read
                into memory.
            shard: ``(rank, world_size)`` keeps only that rank's episodes
                (``take_shard``), so a mapped load reads only their bytes.
            placement: where each key goes, as ``place`` takes it (instead
                of ``device``); keys it leaves out stay mapped.
            check: check that each stream's times rise within each episode
                (one pass over the times, on ``device``). The file's
                structure (shapes, dtypes, offsets, indices) is always
                checked.
            verify: check every tensor against the CRC-32 that ``save``
                wrote: the index (times, offsets, statistics, episodes) at
                once; each episode's values the first time they are read
                (the sampler's reads of a mapped key, raw or encoded, or a
                copy: ``place``, ``to``, ``mmap=False``, ``save``), so that
                a mapped store opens after reading its index alone.
                Values read straight from ``store[key].values`` of a
                mapped key are not checked.

        A file that is truncated, corrupt or not a store raises a
        LoaderError that names it and what was wrong."""
        where = "EpisodeStore.load"
        device = resolve_device(device, where)
        if shard is not None:
            if not isinstance(shard, (tuple, list)) or len(shard) != 2:
                raise ValueError(f"{where}: shard must be (rank, world_size); got {shard!r}")
            check_rank(shard[0], shard[1])
        if device is not None and placement is not None:
            raise ValueError(f"{where}: give device or placement, not both")
        # Mapped first, whatever ``mmap`` says: a shard then reads only its part.
        file = store_format.open_file(directory)
        streams, episodes, tasks, fps, info, sums = store_format.read(file, verify)
        mapped = store_format.mapped_rows(file, list(streams), sums)
        store = cls(streams, episodes, tasks, fps, info=info, mapped=mapped, check=False)
        if shard is not None:
            store = store.take_shard(*shard)
        if not mmap:
            store = store._map(torch.clone)  # read into memory; the mapping is let go
        if device is not None:
            store = store.to(device)
        if placement is not None:
            store = store.place(placement)
        if check:
            check_sorted_times(store.streams, f"{where}({directory})")
        return store

    def _check_mapped(self, keys):
        """The episodes of the mapped ``keys`` not checked yet against their
        CRC-32s, checked now (their values are about to be read whole)."""
        for key in keys:
            rows = self.mapped_rows.get(key)
            if rows:
                rows.check()


def _size(nbytes):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
