"""One store's batches: the sampler's stages wired together.

plan (plan.py) -> order (order.py) -> read (read.py) -> cut (cut.py) ->
transform (transform.py), each batch made eagerly or replayed from a CUDA
graph (graphs.py), on the caller's stream or ahead on the sampler's own
(pipeline.py), as launch.py chooses.

Where every key is cut on the GPU, an epoch's order is put on the device
once, behind a cursor that the batch's graph advances itself: a batch then
costs the host one graph launch."""

import torch

from .._device import resolve_device
from ..augment import KeyAugmentation
from . import launch, order
from .cut import WindowCut
from .decode import DecodedEpoch
from .pipeline import batch_stream
from .plan import plan_keys
from .read import Reader, Rows
from .transform import Transform

_WHERE = "WindowSampler"


class StoreBatches:
    """Batches of windows of one store (see WindowSampler for the options).

    ``salt`` names the stream of numbers its augmentation draws from (a
    mixture's stores each have their own)."""

    def __init__(self, store, delta_timestamps, options, salt=""):
        self.store, self.options = store, options
        self.rank, self.world_size = order.resolve_ranks(options.rank, options.world_size, store)
        device = resolve_device(options.device, _WHERE)
        self.device = device if device is not None else store.device
        self.plans = plan_keys(store, delta_timestamps, options, self.device)
        self.keys = {p.key: p for p in self.plans}
        augment = options.augment
        self.augmentation = KeyAugmentation(augment, self.plans, store, salt) if augment else None
        self.anchor = options.anchor if options.anchor is not None else order.default_anchor(store)
        self.batch_size, self.seed = options.batch_size, order.check_seed(options.seed)
        self.shuffle, self.drop_last = options.shuffle, options.drop_last
        self._step = 0  # batch_at's augmentation step when none is given
        self.reader = Reader(store, self.plans, options.decoding, self.device, self.batch_size)
        for frames in self.reader.gpu_frames:
            # Decoded on the GPU: the windows are cut there too, over row
            # numbers, with the keys held there (one launch: the device
            # named with its index, as the keys' times name it).
            frames.plan.cut_on = frames.decoder.device
        self._index_anchors(store, options.drop_n_last_frames)
        self.cut = WindowCut(
            store, self.anchor, self.plans, self.row_tables, options.edge_tolerance,
            self.reader.row_numbers, self.reader.stand_ins,
        )  # fmt: skip
        self._check_cut()
        for frames in self.reader.gpu_frames:
            frames.timeline = self.cut.timeline(frames.position)
        self.transform = Transform(
            self.plans, self.row_tables, self.device, options.key_age, self.augmentation,
            self.seed, self.rank,
        )  # fmt: skip
        on_gpu = self.cut_on_gpu and self.device.type == "cuda"
        self.prefetch = launch.prefetch_depth(self, options.prefetch, on_gpu)
        self.stream = batch_stream(self.device, self.prefetch)
        self.graphs = launch.batch_graphs(self, options, on_gpu)
        if self.graphs is not None:
            self.cursor = order.StepCursor(self._per_rank, self.batch_size, self.device)
            self._static = {}  # batch size -> the index batch_at's graphs read
        self._cursor_user = None
        self._cursor_reader = None  # the read ahead of the iteration feeding the graphs
        # (epoch guessed, its anchors, its DecodedEpoch): the GPU decoder's
        # queue run on into the epoch guessed to follow the last iteration.
        self._following = None
        self._last_epoch = None

    def _index_anchors(self, store, drop_n_last_frames):
        anchor_stream = store[self.anchor]
        offsets, times = anchor_stream.offsets, anchor_stream.times
        cut_on_host = any(p.cut_on.type == "cpu" for p in self.plans)
        # Every key cut on the GPU, from anchors there; or from anchors the
        # host keeps to find mapped or GPU-decoded keys' rows (its index a
        # mapped key's: the cut holds a copy of it on the GPU, and each
        # iteration's order goes there once).
        reads_on_host = bool(self.reader.gpu_frames or self.reader.mapped)
        self.cut_on_gpu = not cut_on_host and (offsets.is_cuda or reads_on_host)
        # Keys cut on the host, or whose batches' rows the host finds for the
        # GPU's decoder: the anchors on the host, so that nothing the host
        # needs is read back from the GPU.
        self.anchor_host = None
        if cut_on_host or self.reader.gpu_frames or self.reader.mapped:
            offsets, times = offsets.cpu(), times.cpu()
            self.anchor_host = (offsets, times)
        row_episode = order.row_episodes(offsets)
        self.anchors = order.anchor_rows(offsets, row_episode, drop_n_last_frames)
        self._per_rank = order.per_rank(
            store, self.anchor, drop_n_last_frames, self.anchors.numel(), self.world_size,
            self.drop_last,
        )  # fmt: skip
        if self.anchors.numel() == 0:
            raise ValueError(
                f"{_WHERE}: the store has no anchor frames (stream {self.anchor!r} is empty"
                f"{' after dropping the last frames' if drop_n_last_frames else ''})"
            )
        if self.drop_last and self.batch_size > self._per_rank:
            raise ValueError(
                f"{_WHERE}: batch_size {self.batch_size} exceeds the {self._per_rank} anchors "
                "a rank visits an epoch, and drop_last=True would leave no batch"
            )
        self.row_tables = order.row_tables(store.episodes, offsets, times, row_episode)

    def _check_cut(self):
        """Every check of the operator (modes, dtypes, devices, shapes, a build
        with the device's kernels) runs once here, on an empty batch; the
        batches then call it directly. Its errors say which key stream k is."""
        try:
            self.cut.check(self.anchors.device)
        except (ValueError, TypeError, RuntimeError, NotImplementedError) as e:
            streams = ", ".join(f"stream {k} is {p.key!r}" for k, p in enumerate(self.plans))
            raise type(e)(f"{_WHERE}: {e} ({streams})") from None

    # -- an epoch --------------------------------------------------------------------

    @property
    def num_anchors(self):
        return int(self.anchors.numel())

    def __len__(self):
        n = self._per_rank
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def _order(self, epoch):
        """The anchors of ``epoch``, in the order its batches visit them."""
        sharded = self.store.shard is not None
        generator = None
        if self.shuffle:
            generator = order.epoch_generator(self.anchors, self.seed, epoch, self.rank, sharded)
        anchors = order.epoch_order(
            self.anchors, self._per_rank, self.rank, self.world_size, sharded, generator
        )
        if self.cut_on_gpu and not anchors.is_cuda and self.device.type == "cuda":
            # Each batch's anchors are copied to the GPU without waiting for it.
            anchors = anchors.pin_memory()
        return anchors

    def _parts(self, anchors):
        return order.EpochParts(anchors, self.batch_size, len(self))

    def _resume(self, epoch):
        """(anchors, DecodedEpoch) of ``epoch`` where the GPU decoder's queue
        already decodes its batches, run on from the last iteration's; else
        None (that queue closed, unless an iteration still open uses it: it
        closes it itself)."""
        following, self._following = self._following, None
        if following is None:
            return None
        guessed, anchors, decoded = following
        if decoded.decoding.released != decoded.base:
            return None
        if guessed == epoch or not self.shuffle:
            return anchors, decoded
        decoded.close()
        return None

    def _decode_following(self, epoch, last_epoch, decoded):
        """The GPU decoder's queue runs on into the batches of the epoch
        guessed to follow ``epoch``: the next, or the same where the last
        two iterations had the same one (any where the order does not
        shuffle)."""
        step = epoch - last_epoch if last_epoch is not None else 1
        guessed = epoch + (step if step in (0, 1) else 1)
        anchors = self._order(guessed)
        base = decoded.decoding.extend(self._parts(anchors))
        self._following = (guessed, anchors, DecodedEpoch(decoded.decoding, base, len(self)))

    def _close_reader(self, reader):
        """Stops an iteration's read ahead. Its GPU decoder's queue runs on
        where it decodes the following epoch's batches and this one's were
        all taken."""
        if reader is None:
            return
        following = self._following
        runs_on = following is not None and following[2].decoding is getattr(
            reader.gpu, "decoding", None
        )
        if runs_on and not reader.gpu.done:
            self._following, runs_on = None, False
        reader.close(keep_decoding=runs_on)

    def epoch(self, epoch):
        """The batches of ``epoch``, made as the caller asks for them."""
        resumed = self._resume(epoch)
        anchors, decoded = resumed if resumed is not None else (self._order(epoch), None)
        last_epoch, self._last_epoch = self._last_epoch, epoch
        count, B = len(self), self.batch_size
        first_step = epoch * count
        reader = None
        parts = self._parts(anchors)
        if self.anchor_host is not None:
            reader = self.reader.ahead(self.anchor_host, self.options.edge_tolerance, parts,
                                       self.options.read_ahead, decoded)  # fmt: skip
        decoded = reader.gpu if reader is not None else None
        # The kept tables' queue runs on into the following epoch's batches
        # from the batch whose take lets it decode this epoch's last.
        follow_at = -1
        if decoded is not None and decoded.tables is self.reader.tables:
            follow_at = max(0, count - decoded.tables.ahead - 1)
        if self.graphs is not None:
            # The graphs gather decoded frames from the tables they were
            # captured with: an iteration decoding elsewhere (another one's
            # still open) makes its batches without them.
            graphed = decoded is None or decoded.tables is self.reader.tables
            # This iteration feeds the graphs through the cursor; another one
            # started later takes it over, and this one then makes its
            # batches without them.
            user = object() if graphed else None
            if graphed:
                # The iteration that fed the graphs stops staging into their
                # buffers before this one does.
                if self._cursor_reader is not None:
                    self._cursor_reader.stop_feeding()
                self._cursor_user, self._cursor_reader = user, reader
            last = B if self.drop_last else anchors.numel() - (count - 1) * B
            rings = [self._cursor_ring(B)] * (count - 1) + [self._cursor_ring(last)]
            cursor = self.cursor

            def make_batch(i):
                if self._cursor_user is not user or not graphed:
                    # Cut without a graph, whose inputs it shares.
                    if reader is None:
                        return self.batch(anchors[i * B : (i + 1) * B])
                    batch = self.batch(parts[i], reader.get(i))
                    reader.used(i)
                    return batch
                if i == 0:
                    cursor.load(anchors)
                    if decoded is not None:
                        decoded.tables.base.fill_(decoded.base)
                static = None
                if reader is not None and reader.mapped is not None:
                    # Batch i's rows, into the buffers its graph cuts them from.
                    static = self.reader.static_rows()
                    reader.mapped.stage(i, static)  # its ring slot is free once copied
                if reader is not None:
                    reader.checked(i)  # its mapped bytes' episodes passed their checks
                if decoded is not None:
                    decoded.take(i)  # batch i's frames, ready on this stream
                batch = rings[i]()
                if decoded is not None:
                    decoded.release(i)
                if static is not None:
                    reader.mapped.cut(i)
                return batch
        else:

            def make_batch(i):
                rows = reader.get(i) if reader is not None else None
                batch = self.batch(parts[i], rows, step=first_step + i)
                if reader is not None:
                    reader.used(i)
                return batch

        def make(i):
            batch = make_batch(i)
            if i == follow_at:
                self._decode_following(epoch, last_epoch, decoded)
            return batch

        try:
            yield from self.stream.run(make, range(count))
        finally:
            if self._cursor_reader is reader:
                self._cursor_reader = None
            self._close_reader(reader)

    def _cursor_ring(self, size):
        """The graphs of a batch of ``size`` whose anchors the cursor reads
        (and whose GPU-decoded frames lie in the slot of the cursor's step)."""
        cursor = self.cursor

        def make():
            decoded = None
            if self.reader.gpu_frames:
                tables = self.reader.tables
                decoded = tables.gather(tables.slot_of(cursor.step), size)
            static = self.reader.static_rows() if self.reader.mapped else None
            streams = static.copied() if static is not None else {}
            batch = self.batch(cursor.take(size), Rows(streams=streams, decoded=decoded or {}))
            if static is not None:
                static.cut()
            return batch

        return self.graphs.ring(("cursor", size), make, (cursor.step,))

    # -- one batch ---------------------------------------------------------------------

    def batch_at(self, index, step=None):
        """The batch anchored at ``index`` (anchor-stream rows, any integer form)."""
        index = order.anchor_index(index, self.anchors.device)
        if self.graphs is None or self.reader.gpu_frames or self.reader.mapped:
            # Frames decoded now, or rows read now: no graph.
            return self.batch(index, step=step)
        size = index.numel()
        static = self._static.get(size)
        if static is None:
            static = self._static[size] = index.clone()
        static.copy_(index)
        # The graph copies the index, so that each of its batches holds its own.
        return self.graphs.replay(("index", size), lambda: self.batch(static.clone()))

    def batch(self, index, rows=None, step=None, parts=None):
        """The batch anchored at ``index``, made now. ``rows``: what the read
        readied ahead for it (else mapped keys are read from the file and
        encoded keys decoded now); ``step`` fixes the augmentation's draws
        (default: a count of the batches that gave none); ``parts``: see
        ``KeyAugmentation.params``."""
        if self.augmentation is not None and step is None:
            step, self._step = self._step, self._step + 1
        # The store's tensors never need gradients: the op runs below autograd
        # (no autograd bookkeeping a call; the batch's tensors are ordinary).
        with torch._C._AutoDispatchBelowAutograd():
            streams = rows.streams if rows is not None else None
            if self.reader.mapped and not streams:  # nothing read ahead: read now
                streams = self.reader.mapped_now(
                    index, self.anchor_host, self.options.edge_tolerance
                )
            cut = self.cut(index, streams)
            if self.reader.encoded:
                self.reader.decode_into(cut.outs, rows if rows is not None else Rows(), index,
                                        self.anchor_host, self.options.edge_tolerance)  # fmt: skip
            return self.transform(cut, index, step, parts)
