"""The decode of keys whose frames are stored encoded (JPEG or PNG): the cut
runs on the host over row numbers (``row + 1``; 0 where a window has no
sample), which picks the same rows as it would from the frames, with the
same padding. Each distinct row of a batch is then decoded once, in one
batched call (the decoder's: robocache.data.frames.decoders), and gathered
into (B, W, H, W', C).

On the GPU (the nvimgcodec decoder) the windows are cut on the GPU over
row numbers, with the keys held there, and an iteration decodes ahead: its
order gives every batch's rows when it starts, and a native queue decodes
each batch's distinct frames on a thread of its own, without the GIL, into
a ring of device tables (``DecodeAhead``) that the sampler keeps from one
iteration to the next (``DecodeTables``). The queue's steps run on from one
epoch into the next (``DecodedEpoch``: an iteration's batches, from a step
on), so that the next epoch's first batches are decoded while this one's
last are taken. A batch's frames are gathered from its slot, which the
device can find from the step alone: a CUDA graph replays the gather."""

import ctypes

import torch

from ..errors import LoaderError
from ..frames.decoders import decoder_for, nvimgcodec
from ..store.rows import caller_reader
from .cut import rows_around
from .marks import shared_marks
from .open_work import track, untrack

_WHERE = "WindowSampler"


# What a step of the GPU decoder's queue failed at (FrameQueue::Failure):
# a frame that does not decode, a file that ends inside a frame's bytes, a
# read of them that failed, or no frame's.
_DOES_NOT_DECODE, _FILE_ENDS, _READ_FAILED, _OTHER = range(4)


class FrameKey:
    """One encoded key of a sampler: its plan, its stream's bytes and byte
    offsets, its decoder, and where each row lies (episode, frame) for
    errors. Bytes held on a GPU are decoded from a pinned copy, made once.
    ``mapped``: the key's rows of the store's file (a MappedRows) where the
    key is mapped: its bytes are then read from the file with positional
    reads, never through the map, their episodes checked against their
    CRC-32s the first time they are read (here, or ahead of the GPU
    decoder's queue: frame_checks.py)."""

    def __init__(self, position, plan, stream, episode_index, decoding, device, mapped=None):
        self.position, self.plan, self.encoding = position, plan, stream.encoding
        self.mapped = mapped
        self.decoder = decoder_for(decoding, stream.encoding.codec, device)
        self.on_gpu = self.decoder.backend == "nvimgcodec"
        self.values = stream.values  # the frames' bytes, wherever they live
        if self.on_gpu and self.values.is_cuda:
            self.values = self.values.cpu().pin_memory()
        self.bounds = stream.byte_offsets.cpu()
        self.times, self.offsets = stream.times.cpu(), stream.offsets.cpu()
        self.deltas = plan.deltas.cpu()  # read on the host each batch: copied once
        self.episode_index = episode_index.cpu()
        self.row_numbers = torch.arange(1, self.times.numel() + 1).view(-1, 1)
        # Its cut's arguments on the GPU (WindowCut.timeline), set by the
        # sampler for a GPU-decoded key: an epoch's rows are found there.
        self.timeline = None
        # What the cut cuts in place of the frames: with the GPU decoder, on the GPU.
        self.cut_values = (
            self.row_numbers.to(self.decoder.device) if self.on_gpu else self.row_numbers
        )

    def rows_of(self, index, anchor, edge_tolerance):
        """(B, W, 1) int64 row + 1 of each window position of the batch
        anchored at ``index`` (the sampler's own call, for this key alone)."""
        rows, _ = rows_around(
            self.plan, self.row_numbers, self.times, self.offsets, anchor, index, edge_tolerance,
            deltas=self.deltas,
        )  # fmt: skip
        return rows

    def same_rows(self, other):
        """Whether ``rows_of`` gives this key's rows and ``other``'s alike
        (the same times, episodes, deltas and rule: cameras of one clock)."""
        a, b = self.plan, other.plan
        return (
            (a.mode, a.interval, a.tolerance) == (b.mode, b.interval, b.tolerance)
            and self.times.shape == other.times.shape
            and self.offsets.shape == other.offsets.shape
            and self.deltas.shape == other.deltas.shape
            and torch.equal(self.deltas, other.deltas)
            and torch.equal(self.offsets, other.offsets)
            and torch.equal(self.times, other.times)
        )

    def decode(self, rows):
        """(keys, frames): the distinct rows + 1 of ``rows``, sorted, with 0
        first, and their frames decoded (frames[0] is a frame of zeros), on
        the host or, with the GPU decoder, on the device."""
        keys = torch.unique(rows.reshape(-1))
        if keys.numel() == 0 or int(keys[0]) != 0:  # 0 (no sample) leads, always
            keys = torch.cat([keys.new_zeros(1), keys])
        wanted = keys[1:] - 1
        device = self.decoder.device if self.on_gpu else "cpu"
        table = torch.empty((keys.numel(), *self.encoding.shape), dtype=self.encoding.dtype,
                            device=device)  # fmt: skip
        table[0].view(torch.uint8).zero_()  # bytes: any dtype, uint16 included
        if self.on_gpu:
            values, bounds, rows = self.values, self.bounds, wanted
            if self.mapped is not None:
                values, bounds = self._read(wanted)
                rows = torch.arange(wanted.numel())
            self.decoder.decode_rows(values, bounds, rows, table[1:], self._namer(wanted))
        else:
            self.decoder.decode(
                self._images(wanted), self.encoding, out=table[1:], name=self._namer(wanted)
            )
        return keys, table

    def frames(self, rows, decoded=None):
        """(B, W, *shape) frames of ``rows`` (the operator's output for this
        key), from ``decoded`` (``decode``'s, made ahead) or decoded now."""
        rows = rows.cpu()
        keys, table = decoded if decoded is not None else self.decode(rows)
        position = torch.searchsorted(keys, rows.reshape(-1)).to(table.device, non_blocking=True)
        if table.dtype == torch.uint16:  # indexed as int16, which older torch can
            return (
                table.view(torch.int16)[position]
                .view(torch.uint16)
                .view(*rows.shape[:2], *self.encoding.shape)
            )
        return table[position].view(*rows.shape[:2], *self.encoding.shape)

    def _row_of(self, row):
        """Row ``row`` of the stream as "key K, episode E, frame F"."""
        e = int(torch.searchsorted(self.offsets[1:], row, right=True))
        return (
            f"key {self.plan.key!r}, episode {int(self.episode_index[e])}, frame "
            f"{row - int(self.offsets[e])}"
        )

    def where(self, row):
        """Where row ``row`` of the stream is from, for an error."""
        return f"{_WHERE}: {self._row_of(row)} (row {row})"

    def file_ends(self, row):
        """The error for row ``row``'s bytes, which the store's file ends
        inside (it was cut after it was loaded)."""
        return self.mapped.file.short_read(f"the bytes of {self._row_of(row)}")

    def read_failed(self, row, why):
        """The error for a read of row ``row``'s bytes that the OS refused."""
        path = self.mapped.file.path
        return LoaderError(f"{path}: reading the bytes of {self._row_of(row)} failed: {why}")

    @property
    def file(self):
        """(file descriptor, the byte of the file where the values begin),
        or (-1, 0) where the key is not mapped."""
        return (-1, 0) if self.mapped is None else (self.mapped.file.fd, self.mapped.begin)

    def _read(self, rows):
        """(values, bounds): the encoded bytes of ``rows`` (sorted) read
        from the store's file in one native call, end to end, and where
        each one's lie in them."""
        begin = self.bounds[rows]
        self.mapped.check(begin.numpy())  # their episodes, where not checked yet
        lengths = self.bounds[rows + 1] - begin
        at = torch.cumsum(lengths, 0) - lengths
        values = torch.empty(int(lengths.sum()), dtype=torch.uint8)
        try:
            cut = caller_reader().read_extents(
                self.mapped.file.fd, begin + self.mapped.begin, lengths, values, at
            )
        except RuntimeError as e:  # the OS's error, named with the first frame read
            raise self.read_failed(int(rows[0]), e) from None
        if cut >= 0:
            raise self.file_ends(int(rows[cut]))
        return values, torch.cat([at, at.new_full((1,), values.numel())])

    def _images(self, rows):
        """The encoded bytes of each row, as buffers (host values are not
        copied; a mapped key's are read from the file)."""
        begin, end = self.bounds[rows], self.bounds[rows + 1]
        values = self.values
        if self.mapped is not None:
            values, bounds = self._read(rows)
            begin, end = bounds[:-1], bounds[1:]
        elif values.is_cuda:  # one gather on the GPU, then one copy
            spans = end - begin
            starts = torch.cumsum(spans, 0) - spans
            where = torch.arange(int(spans.sum())) - starts.repeat_interleave(spans)
            where = where + begin.repeat_interleave(spans)
            values = values[where.to(values.device)].cpu()
            begin, end = starts, starts + spans
        data = values.numpy()
        return [data[b:e] for b, e in zip(begin.tolist(), end.tolist())]

    def _namer(self, rows):
        return lambda i: self.where(int(rows[i]))


class DecodeTables:
    """The device memory a sampler's GPU-decoded keys are decoded into, kept
    from one iteration to the next: per key a ring of ``slots`` tables of
    (1 + B * W, *shape) frames (row 0: the frame of "no sample", zeros;
    then each distinct frame a batch reads) and (B * W,) positions, where
    each window position's frame lies in its slot's table. Batch i of an
    iteration lies in slot (base + i) % slots, ``base`` (a (1,) int64 on
    the device, for the graphs) the queue's step of the iteration's batch 0.
    ``busy``: a queue decodes into them."""

    def __init__(self, keys, batch_size, windows, depth):
        self.keys, self.windows, self.batch_size = keys, windows, batch_size
        self.busy = False
        self.ahead = depth + 1
        self.slots = slots = self.ahead + nvimgcodec.SLOTS_BEHIND
        device = keys[0].decoder.device
        self.base = torch.zeros(1, dtype=torch.int64, device=device)
        self.tables, self.positions = [], []
        for key, W in zip(keys, windows):
            table = torch.empty((slots, 1 + batch_size * W, *key.encoding.shape),
                                dtype=torch.uint8, device=device)  # fmt: skip
            table[:, 0].zero_()
            self.tables.append(table)
            self.positions.append(
                torch.zeros((slots, batch_size * W), dtype=torch.int64, device=device)
            )

    def gather(self, slot, size):
        """key position -> the (size, W, *shape) frames of the batch in
        ``slot`` (an int, or a (1,) int64 tensor on the device: then all on
        the device, as a CUDA graph can replay it)."""
        frames = {}
        for key, W, table, position in zip(self.keys, self.windows, self.tables, self.positions):
            n = size * W
            if isinstance(slot, int):
                taken = table[slot].index_select(0, position[slot, :n])
            else:
                where = torch.add(position.index_select(0, slot).view(-1)[:n], slot,
                                  alpha=table.shape[1])  # fmt: skip
                taken = table.view(-1, *table.shape[2:]).index_select(0, where)
            frames[key.position] = taken.view(size, W, *key.encoding.shape)
        return frames

    def slot_of(self, step):
        """The slot of an iteration's batch ``step`` (a (1,) int64 tensor on the device)."""
        return torch.remainder(step + self.base, self.slots)


class DecodeAhead:
    """The GPU-decoded keys' frames of batches decoded ahead into ``tables``
    (a DecodeTables) by a native queue, whose steps run on from one epoch to
    the next: steps 0, 1, ... are the batches of ``parts`` (an EpochParts:
    each batch's anchor rows, on the host), and ``extend(parts)`` appends a
    next epoch's (returning the step of its first). ``take(step)``: its
    slot, its frames in device memory (any stream may read them);
    ``release(step)``, on the stream that reads the slot, once that work is
    queued there: the slot then takes a later step. ``get(step)``: take,
    gather (key position -> (B, W, *shape) frames) and release.
    ``close()`` stops the queue's thread."""

    def __init__(self, tables, edge_tolerance, parts):
        self.tables, self.keys = tables, tables.keys
        self.edge_tolerance = edge_tolerance
        self.queue = None
        self.sizes = {}  # step -> its batch's size, until released
        self.released = 0  # the steps released
        # Keys whose rows are another's (found once an epoch): that key's position.
        self.twin = [
            next(j for j in range(k + 1) if self.keys[j].same_rows(key))
            for k, key in enumerate(self.keys)
        ]
        # An epoch's rows are found on a CUDA stream of their own, from the
        # keys' cut arguments on the GPU, and copied to pinned memory; the
        # queue's threads wait for the copies there.
        self.rows_stream = torch.cuda.Stream(tables.base.device)
        self.rows_stream.wait_stream(torch.cuda.current_stream(tables.base.device))
        none = [torch.zeros((0, tables.batch_size * W), dtype=torch.int64) for W in tables.windows]
        self.queue = self.keys[0].decoder.queue(
            [k.values for k in self.keys], [k.bounds for k in self.keys], none, tables.tables,
            tables.positions, tables.ahead, files=[k.file for k in self.keys],
        )  # fmt: skip
        # The queue's threads mark the steps whose frames have landed in
        # device memory (FrameQueue.landed); a step below the mark is taken
        # by reading it, with no call into the queue.
        (self.landed,) = shared_marks(self.queue.landed())
        tables.busy = True
        track(self)  # a queue left running is stopped at exit
        try:
            self.extend(parts)
        except BaseException:
            self.close()
            raise

    def _rows(self, parts):
        """Per key the (steps, B * W) int64 row + 1 of each step's window
        positions (the last batch padded with "none"), found on the GPU and
        copied to pinned memory on the current CUDA stream (a twin's once)."""
        steps, batch = len(parts), self.tables.batch_size
        index = parts.anchors.to(self.tables.base.device, non_blocking=True)
        n = index.numel()
        rows = []
        for k, (key, W) in enumerate(zip(self.keys, self.tables.windows)):
            if self.twin[k] != k:
                rows.append(rows[self.twin[k]])
                continue
            per_step = torch.zeros((steps * batch, W), dtype=torch.int64, device=index.device)
            if n:
                values, times, offsets, deltas, anchor = key.timeline
                found, _ = rows_around(key.plan, values, times, offsets, anchor, index,
                                       self.edge_tolerance, deltas=deltas)  # fmt: skip
                per_step[:n] = found.view(n, W)
            rows.append(per_step.view(steps, batch * W).to("cpu", non_blocking=True))
        return rows

    def _sized(self, first, parts):
        for i in range(len(parts)):
            self.sizes[first + i] = parts.size(i)

    def extend(self, parts):
        """Appends the batches of ``parts`` (an EpochParts) to the queue's
        steps; the step of the first."""
        with torch.cuda.stream(self.rows_stream):
            first = self.queue.extend(self._rows(parts), True)  # read once the copies are done
        self._sized(first, parts)
        return first

    def take(self, step):
        if self.released <= step < self.landed.value:
            return step % self.tables.slots
        slot = self.queue.take(step)
        if slot < 0:
            k, row, why, kind = self.queue.failure()
            if kind == _OTHER:
                raise RuntimeError(f"{_WHERE}: the GPU frame decoder failed: {why}")
            key = self.keys[k]
            if kind == _FILE_ENDS:
                raise key.file_ends(row)
            if kind == _READ_FAILED:
                raise key.read_failed(row, why)
            raise ValueError(f"{key.where(row)}: the jpeg frame does not decode: {why}")
        return slot

    def release(self, step):
        self.queue.release(step)
        self.sizes.pop(step, None)
        self.released = step + 1

    def get(self, step):
        frames = self.tables.gather(self.take(step), self.sizes[step])
        self.release(step)
        return frames

    def close(self):
        if self.queue is not None:
            untrack(self)
            self.queue.close()
            self.landed = ctypes.c_int64(0)  # the tables may take another queue's steps now
            self.tables.busy = False
            self.queue = None


class DecodedEpoch:
    """An iteration's ``count`` batches in a DecodeAhead: batch i is its
    step ``base + i``. ``done``: every batch released."""

    def __init__(self, decoding, base, count):
        self.decoding, self.base, self.count = decoding, base, count
        self.tables = decoding.tables

    def take(self, i):
        return self.decoding.take(self.base + i)

    def release(self, i):
        self.decoding.release(self.base + i)

    def get(self, i):
        return self.decoding.get(self.base + i)

    @property
    def done(self):
        return self.decoding.released >= self.base + self.count

    def close(self):
        self.decoding.close()
