"""The read: where each key's rows come from.

- Keys on the GPU, and pinned keys (the kernel reads page-locked host memory
  directly), are read by the cut itself: nothing to do here.
- Mapped keys: each batch's rows read from the store's file ahead of it by
  the native row reader, and packed as a small stream of their own
  (mapped.py).
- Encoded keys (JPEG, PNG): the cut over row numbers (``row + 1``; 0 where a
  window has no sample) picks the same rows as it would from the frames,
  with the same padding; each distinct row of a batch is decoded once, in
  one batched call (decode.py): on the host, read ahead with the mapped
  keys, or on the GPU, decoded ahead by a native queue.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from ..store.rows import caller_reader, row_reader
from .buffers import PinnedRing, StaticRows, capacity, ring_slots
from .decode import DecodeAhead, DecodedEpoch, DecodeTables, FrameKey
from .finder import finders_of
from .frame_checks import FrameChecks, checked_frames
from .mapped import MappedAhead, MappedReads
from .open_work import track, untrack

# The row reader's threads (and the thread waiting for a batch beside them).
READ_THREADS = 8


@dataclass
class Rows:
    """What the read readied for one batch: key position -> (values, times,
    offsets) of a mapped key's rows; key position -> (rows + 1, frames) of
    an encoded key's distinct rows decoded on the host; and key position ->
    the (B, W, *shape) frames of a key decoded on the GPU."""

    streams: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)
    decoded: dict = field(default_factory=dict)


class Reader:
    """A sampler's keys that need reading: mapped keys and encoded keys.
    ``row_numbers``: what the cut cuts in place of encoded frames;
    ``stand_ins``: the (values, times, offsets) it holds in place of mapped
    keys cut on the GPU, whose rows each batch reads for it."""

    def __init__(self, store, plans, decoding, device, batch_size):
        self.batch_size = batch_size
        self.tables = None  # the GPU-decoded keys' DecodeTables, made by the first iteration
        episode_index = store.episodes["episode_index"]
        mapped = {k: store.mapped_rows[k] for k in store.mapped}
        frames = [
            FrameKey(k, p, store[p.key], episode_index, decoding, device, mapped.get(p.key))
            for k, p in enumerate(plans)
            if p.encoded
        ]
        self.frames = [f for f in frames if not f.on_gpu]
        self.gpu_frames = [f for f in frames if f.on_gpu]
        self.finders = finders_of(store, plans)
        self.mapped = [key for finder in self.finders for key in finder.keys]
        self.row_numbers = {f.position: f.cut_values for f in frames}
        # Batches bound for a GPU: the mapped keys' rows are read into pinned
        # memory, copied to the GPU and cut there (their plans say so).
        self.mapped_on_gpu = device is not None and device.type == "cuda" and bool(self.mapped)
        self.stand_ins = {}
        self.static = None  # the StaticRows of the sampler's graphs
        self.ring = None  # the PinnedRing the mapped rows read ahead land in
        if self.mapped_on_gpu:
            index = device.index if device.index is not None else torch.cuda.current_device()
            for key in self.mapped:
                key.plan.cut_on = torch.device("cuda", index)
                # The cut always has a key's rows in place of its stream:
                # these stand-ins only pass its checks (one pinned row; none
                # would hold no pinned memory).
                stream = store[key.plan.key]
                self.stand_ins[key.position] = (
                    torch.empty((1, *stream.sample_shape), dtype=stream.values.dtype,
                                pin_memory=True),
                    torch.zeros(1, dtype=stream.times.dtype),
                    torch.zeros_like(stream.offsets, device="cpu"),
                )  # fmt: skip

    @property
    def mapped_graphable(self):
        """Whether the mapped keys' rows can be cut in a CUDA graph: batches
        bound for a GPU, read ahead into static buffers of a bounded size."""
        return self.mapped_on_gpu and all(
            capacity(f, self.batch_size) is not None for f in self.finders
        )

    @property
    def mapped_device(self):
        """The GPU the mapped keys are cut on."""
        return self.mapped[0].plan.cut_on

    def static_rows(self):
        """The StaticRows the sampler's graphs cut mapped keys from (made
        the first time)."""
        if self.static is None:
            self.static = StaticRows(self.finders, self.batch_size, self.mapped_device)
        return self.static

    def mapped_now(self, index, anchor, edge_tolerance):
        """The mapped keys' rows of the batch anchored at ``index``, read now
        (no read ahead, or asked for by index)."""
        reads = MappedReads(self.finders, caller_reader(), self.mapped_on_gpu)
        return reads.now(index.cpu(), anchor, edge_tolerance)

    def __bool__(self):
        return bool(self.frames or self.gpu_frames or self.mapped)

    @property
    def encoded(self):
        """Every encoded key, whichever decoder it has."""
        return self.frames + self.gpu_frames

    def ahead(self, anchor, edge_tolerance, indices, depth, decoded=None):
        """An Ahead of ``indices``' batches (EpochParts), or None where there
        is nothing to read ahead. ``decoded``: the DecodedEpoch of these
        batches, where a queue already decodes them (else one is started)."""
        if not self or not depth or not indices:
            return None
        ahead = Ahead()
        try:
            if self.mapped:
                ahead.mapped = MappedAhead(self.finders, anchor, edge_tolerance, indices, depth,
                                           row_reader(READ_THREADS), self.mapped_on_gpu,
                                           self.pinned_ring(depth))  # fmt: skip
            if self.frames:
                ahead.host = HostDecodeAhead(self.frames, anchor, edge_tolerance, indices, depth)
            ahead.gpu = decoded
            if self.gpu_frames and decoded is None:
                tables = self.decode_tables(depth)
                decoding = DecodeAhead(tables, edge_tolerance, indices)
                ahead.gpu = DecodedEpoch(decoding, 0, len(indices))
            checked = checked_frames(self.gpu_frames)
            if checked:
                ahead.checks = FrameChecks(checked, anchor[0], indices, depth)
        except BaseException:
            ahead.close(keep_decoding=decoded is not None)
            raise
        return ahead

    def pinned_ring(self, depth):
        """The PinnedRing an iteration reading ``depth`` batches ahead reads
        its mapped rows into (None where batches do not go to a GPU, or
        have no bound on the rows they read): the one kept, made the first
        time, or, while another iteration reads into it, one of its own."""
        if not self.mapped_graphable:
            return None
        slots = ring_slots(depth)
        if self.ring is None or self.ring.slots != slots:
            self.ring = PinnedRing(self.finders, self.batch_size, slots, self.mapped_device)
        if self.ring.busy:
            return PinnedRing(self.finders, self.batch_size, slots, self.mapped_device)
        return self.ring

    def decode_tables(self, depth):
        """The GPU-decoded keys' DecodeTables for an iteration reading
        ``depth`` batches ahead: the ones kept (``tables``, which the
        sampler's CUDA graphs read), or, while another iteration decodes into
        those, tables of its own."""
        windows = [len(f.deltas) for f in self.gpu_frames]
        if self.tables is None:
            self.tables = DecodeTables(self.gpu_frames, self.batch_size, windows, depth)
        if self.tables.busy:
            return DecodeTables(self.gpu_frames, self.batch_size, windows, depth)
        return self.tables

    def decoded_ahead(self, depth):
        """The keys an iteration reading ``depth`` batches ahead has decoded
        by the GPU decoder's queue before their batches are asked for (none
        where ``depth`` is 0: then each batch decodes its own)."""
        return {f.plan.key for f in self.gpu_frames} if depth else set()

    def decode_into(self, outs, rows, index, anchor, edge_tolerance):
        """Each encoded key's windows in ``outs`` replaced by its frames:
        from ``rows`` (a Rows read ahead), or decoded now (the windows of
        ``index``, a host tensor, found again on the host where they were
        cut on the GPU)."""
        for f in self.encoded:
            decoded = rows.decoded.get(f.position)
            if decoded is not None:
                outs[f.position] = decoded
            elif f.on_gpu:
                found = f.rows_of(index, anchor, edge_tolerance)
                outs[f.position] = f.frames(found)
            else:
                outs[f.position] = f.frames(outs[f.position], rows.frames.get(f.position))


class Ahead:
    """The read ahead of an iteration: a MappedAhead's (mapped keys), a
    HostDecodeAhead's (frames decoded on the host), a DecodeAhead's (frames
    decoded on the GPU) and the FrameChecks of the mapped bytes the last
    one reads, each None where there is none. ``get(i)`` and ``checked(i)``
    return once batch i's episodes have passed their checks."""

    def __init__(self):
        self.mapped = self.host = self.gpu = self.checks = None
        self.closed = False
        track(self)  # an iteration left open is stopped at exit

    def get(self, i):
        rows = self.host.get(i) if self.host is not None else Rows()
        if self.mapped is not None:
            rows.streams = self.mapped.get(i)
        self.checked(i)  # before the decoded frames: a corrupt one is named as such
        if self.gpu is not None:
            rows.decoded = self.gpu.get(i)
        return rows

    def checked(self, i):
        """Returns once batch i's GPU-decoded mapped bytes have passed
        their checks (a LoaderError where one has not)."""
        if self.checks is not None:
            self.checks.wait(i)

    def stop_feeding(self):
        """The mapped rows' native feed stops staging into the graphs'
        buffers (see MappedAhead.stop_feeding)."""
        if self.mapped is not None:
            self.mapped.stop_feeding()

    def used(self, i, cuda_stream=None):
        """Batch i's mapped rows are copied by the work queued on
        ``cuda_stream`` (default: the current one); their pinned buffer may
        be read into again once it is done."""
        if self.mapped is not None:
            self.mapped.used(i, cuda_stream)

    def close(self, keep_decoding=False):
        """Stops the work (once); the GPU's queue goes on where
        ``keep_decoding`` (its steps run on into a next epoch's)."""
        if self.closed:
            return
        self.closed = True
        untrack(self)
        parts = [self.host, self.mapped, self.checks]
        if not keep_decoding:
            parts.insert(0, self.gpu)
        error = None
        for part in parts:  # each one closed, whatever the others raise
            try:
                if part is not None:
                    part.close()
            except BaseException as e:
                error = error or e
        if error is not None:
            raise error


class HostDecodeAhead:
    """Each batch's encoded keys decoded on the host ``depth`` batches
    ahead, on a thread of its own. ``get(i)`` waits for batch i's Rows;
    ``close()`` stops the work, and no thread outlives it."""

    def __init__(self, frames, anchor, edge_tolerance, indices, depth=2):
        self.frames, self.anchor, self.edge = frames, anchor, edge_tolerance
        self.indices, self.depth = indices, depth
        self.worker = ThreadPoolExecutor(max_workers=1)
        self.futures = {}
        self.closed = False
        for i in range(min(depth, len(indices))):
            self._submit(i)

    def _submit(self, i):
        self.futures[i] = self.worker.submit(self.prepare, self.indices[i])

    def prepare(self, index):
        """One batch's Rows."""
        index = index.cpu()
        out = Rows()
        for key in self.frames:
            out.frames[key.position] = key.decode(key.rows_of(index, self.anchor, self.edge))
        return out

    def get(self, i):
        if i + self.depth < len(self.indices) and i + self.depth not in self.futures:
            self._submit(i + self.depth)
        future = self.futures.pop(i, None)
        if future is None:
            return self.prepare(self.indices[i])
        return future.result()

    def close(self):
        if self.closed:
            return
        self.closed = True
        for future in self.futures.values():
            future.cancel()
        self.worker.shutdown(wait=True, cancel_futures=True)
