"""The read: where each key's rows come from.

- Keys on the GPU, and pinned keys (the kernel reads page-locked host memory
  directly), are read by the cut itself: nothing to do here.
- Mapped keys: an epoch's order is known when it starts, so the rows the
  next batches' windows read are too. For each batch a thread finds those
  rows (the cut over row numbers), reads them from the store's file (runs
  of rows, on a few native threads: ``store.rows.MappedRows``) and packs them as a
  small stream of their own with the same episodes: each episode holds its
  rows the batch reads, its first and last rows, and for each query the rows
  on both sides of it, so that the cut finds in it exactly what it finds in
  the whole stream, and cuts the same windows from it.
- Encoded keys (JPEG, PNG): the cut over row numbers (``row + 1``; 0 where a
  window has no sample) picks the same rows as it would from the frames,
  with the same padding; each distinct row of a batch is decoded once, in
  one batched call (decode.py): on the host, read ahead with the mapped
  keys, or on the GPU, decoded ahead by a native queue.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import torch

from ..store.rows import row_reader
from .cut import rows_around
from .decode import DecodeAhead, DecodedEpoch, DecodeTables, FrameKey


@dataclass
class Rows:
    """What the read readied for one batch: key position -> (values, times,
    offsets) of a mapped key's rows; key position -> (rows + 1, frames) of
    an encoded key's distinct rows decoded on the host; and key position ->
    the (B, W, *shape) frames of a key decoded on the GPU."""

    streams: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict)
    decoded: dict = field(default_factory=dict)


class MappedKey:
    """What reading one mapped key ahead needs: its plan, its times and
    offsets on the host, and where its rows lie in the file."""

    def __init__(self, position, plan, stream, rows):
        self.position, self.plan, self.rows = position, plan, rows
        self.times, self.offsets = stream.times.cpu(), stream.offsets.cpu()
        self.deltas = plan.deltas.cpu()  # read on the host each batch: copied once
        self.row_numbers = torch.arange(self.times.numel()).view(-1, 1)

    def rows_read(self, index, anchor, edge_tolerance):
        """The sorted rows a batch anchored at ``index`` reads from this key."""
        plan = self.plan
        shifts = [self.deltas]
        if plan.mode == "mean":
            shifts.append(self.deltas - plan.interval)
        found = []
        for deltas in shifts:
            # "previous" over the row numbers: the row at or before each query
            # (the first row for a query before it).
            rows, episode = rows_around(
                plan, self.row_numbers, self.times, self.offsets, anchor, index, edge_tolerance,
                mode="previous", deltas=deltas, interval=0, tolerance=-1,
            )  # fmt: skip
            found.append(rows.view(-1))
        episodes = episode[episode >= 0]
        firsts, lasts = self.offsets[episodes], self.offsets[episodes + 1] - 1
        last = lasts.repeat_interleave(len(plan.deltas))
        held = found[0]
        after = torch.minimum(held + 1, last.clamp(min=0))
        picked = [held, after, firsts, lasts]  # each episode's edges decide its padding
        if plan.mode == "mean":  # every row of (q - interval, q]
            first = found[1]
            span = (held - first).clamp(min=0)
            picked.append(first.repeat_interleave(span + 1) + _ramp(span + 1))
        rows = torch.cat(picked)
        rows = rows[(rows >= 0) & (rows < self.times.numel())]
        return torch.unique(rows)

    def packed(self, rows, reader, pin):
        """(values, times, offsets) of the rows, as a stream with the same
        episodes; ``pin``: all three in pinned memory (copied to the GPU by
        the cut, with the copies' events keeping the memory theirs)."""
        values = self.rows.read(rows.numpy(), reader, pin)
        times, offsets = self.times[rows], torch.searchsorted(rows, self.offsets)
        if pin:
            times, offsets = times.pin_memory(), offsets.pin_memory()
        return values, times, offsets


def read_mapped(keys, index, anchor, edge_tolerance, reader, pin):
    """key position -> (values, times, offsets) of the rows the batch
    anchored at ``index`` (a host tensor) reads from each mapped key."""
    return {
        key.position: key.packed(key.rows_read(index, anchor, edge_tolerance), reader, pin)
        for key in keys
    }


def _ramp(counts):
    """0, 1, ..., c - 1 for each count c, concatenated."""
    starts = torch.cumsum(counts, 0) - counts
    return torch.arange(int(counts.sum())) - starts.repeat_interleave(counts)


class Reader:
    """A sampler's keys that need reading: mapped keys and encoded keys.
    ``row_numbers``: what the cut cuts in place of encoded frames;
    ``stand_ins``: the (values, times, offsets) it holds in place of mapped
    keys cut on the GPU, whose rows each batch reads for it."""

    def __init__(self, store, plans, decoding, device, batch_size):
        self.batch_size = batch_size
        self.tables = None  # the GPU-decoded keys' DecodeTables, made by the first iteration
        episode_index = store.episodes["episode_index"]
        frames = [
            FrameKey(k, p, store[p.key], episode_index, decoding, device)
            for k, p in enumerate(plans)
            if p.encoded
        ]
        self.frames = [f for f in frames if not f.on_gpu]
        self.gpu_frames = [f for f in frames if f.on_gpu]
        self.mapped = [
            MappedKey(k, p, store[p.key], store.mapped_rows[p.key])
            for k, p in enumerate(plans)
            if p.place == "mapped" and not p.encoded and p.cut_on.type == "cpu"
        ]
        self.row_numbers = {f.position: f.cut_values for f in frames}
        # Batches bound for a GPU: the mapped keys' rows are read into pinned
        # memory, copied to the GPU and cut there (their plans say so).
        self.mapped_on_gpu = device is not None and device.type == "cuda" and bool(self.mapped)
        self.stand_ins = {}
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

    def mapped_now(self, index, anchor, edge_tolerance):
        """The mapped keys' rows of the batch anchored at ``index``, read now
        (batches bound for a GPU with no read ahead, or asked for by index)."""
        return read_mapped(self.mapped, index.cpu(), anchor, edge_tolerance, None, True)

    def __bool__(self):
        return bool(self.frames or self.gpu_frames or self.mapped)

    @property
    def encoded(self):
        """Every encoded key, whichever decoder it has."""
        return self.frames + self.gpu_frames

    def ahead(self, anchor, edge_tolerance, indices, depth, decoded=None):
        """An Ahead of ``indices``' batches, or None where there is nothing
        to read ahead. ``decoded``: the DecodedEpoch of these batches, where
        a queue already decodes them (else one is started)."""
        if not self or not depth or not indices:
            return None
        host = None
        if self.mapped or self.frames:
            host = ReadAhead(self.mapped, anchor, edge_tolerance, indices, depth,
                             pin=self.mapped_on_gpu, frames=self.frames)  # fmt: skip
        gpu = decoded
        if self.gpu_frames and gpu is None:
            try:
                tables = self.decode_tables(depth)
                decoding = DecodeAhead(tables, edge_tolerance, indices)
                gpu = DecodedEpoch(decoding, 0, len(indices))
            except BaseException:
                if host is not None:
                    host.close()
                raise
        return Ahead(host, gpu)

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
    """The read ahead of an iteration: a ReadAhead's (mapped keys, frames
    decoded on the host) and a DecodeAhead's (frames decoded on the GPU),
    either None."""

    def __init__(self, host, gpu):
        self.host, self.gpu = host, gpu

    def get(self, i):
        rows = self.host.get(i) if self.host is not None else Rows()
        if self.gpu is not None:
            rows.decoded = self.gpu.get(i)
        return rows

    def close(self, keep_decoding=False):
        """Stops the work; the GPU's queue goes on where ``keep_decoding``
        (its steps run on into a next epoch's)."""
        try:
            if self.gpu is not None and not keep_decoding:
                self.gpu.close()
        finally:
            if self.host is not None:
                self.host.close()


class ReadAhead:
    """Each batch's mapped keys read ``depth`` batches ahead, on a thread of
    its own (with ``threads`` more for the reads). ``get(i)`` waits for
    batch i's Rows; ``close()`` stops the work, and no thread outlives it."""

    def __init__(
        self, keys, anchor, edge_tolerance, indices, depth=2, threads=8, pin=False, frames=()
    ):
        self.keys, self.anchor, self.edge = keys, anchor, edge_tolerance
        self.frames = frames
        self.indices, self.depth, self.pin = indices, depth, pin
        self.reader = row_reader(threads)
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
        out = Rows(
            streams=read_mapped(self.keys, index, self.anchor, self.edge, self.reader, self.pin)
        )
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
        self.reader.close()
