"""Mapped keys read from the store's file, ahead of their batches, by the
native row reader's threads (``RowReader``, csrc/io): no Python thread.

An epoch's order is known when it starts, so the rows the next batches'
windows read are too. They are found for a chunk of batches at once (the cut
over row numbers, on the host), and each batch's rows are handed to the
reader ``depth`` batches ahead, into memory of their own (pinned where the
batch goes to a GPU); the caller's thread then only waits for them. Each
batch's rows are packed as a small stream with the same episodes: each
episode holds its rows the batch reads, its first and last rows, and for
each query the rows on both sides of it, so that the cut finds in it
exactly what it finds in the whole stream, and cuts the same windows from
it. Keys that share their times and their rule share the rows found."""

from functools import partial

import numpy as np
import torch

from ..store.checks import new_token
from .buffers import capacity
from .cut import rows_around
from .handed import HandedAhead, wait_all

# Batches whose rows are found at once: the host's cut over row numbers runs
# once a chunk, not once a batch; fewer where their indexes would hold more
# than CHUNK_OFFSETS episode offsets.
CHUNK_BATCHES = 64
CHUNK_OFFSETS = 1 << 20


class MappedKey:
    """One mapped key: its position in the plans, its plan and its rows in
    the file (``store.rows.MappedRows``)."""

    def __init__(self, position, plan, rows):
        self.position, self.plan, self.rows = position, plan, rows


def _aligned(size):
    return -(-size // 64) * 64


class RowFinder:
    """The rows that batches read from keys sharing one timeline and one
    rule (mode, deltas, interval, tolerance); ``keys``: those MappedKeys."""

    def __init__(self, plan, stream, keys):
        self.plan, self.keys = plan, keys
        self.times, self.offsets = stream.times.cpu(), stream.offsets.cpu()
        self.deltas = plan.deltas.cpu()
        self.row_numbers = torch.arange(self.times.numel()).view(-1, 1)
        self.file = keys[0].rows.file
        self._reads = {}  # _reads_into's, by room

    def add(self, key):
        self.keys.append(key)
        self._reads.clear()

    def shares(self, plan, stream):
        """Whether a key of ``plan`` over ``stream`` reads the same rows."""
        mine = self.plan
        return (
            (plan.mode, plan.interval, plan.tolerance) == (mine.mode, mine.interval, mine.tolerance)
            and torch.equal(plan.deltas.cpu(), self.deltas)
            and torch.equal(stream.offsets.cpu(), self.offsets)
            and torch.equal(stream.times.cpu(), self.times)
        )

    def rows_of(self, index, anchor, edge_tolerance, batch_size):
        """The sorted rows each batch of ``index`` (host anchors, batches of
        ``batch_size`` in turn) reads: (rows, bounds), batch b's rows
        ``rows[bounds[b]:bounds[b + 1]]``. Past the operator, numpy: one
        thread, so that a busy host's cores are not waited for."""
        plan, count = self.plan, self.times.numel()
        width = len(self.deltas)
        batch = np.arange(index.numel()) // batch_size
        batches = -(-index.numel() // batch_size)
        shifts = [self.deltas] + ([self.deltas - plan.interval] if plan.mode == "mean" else [])
        found = []
        for deltas in shifts:
            # "previous" over the row numbers: the row at or before each query
            # (the first row for a query before it).
            rows, episode = rows_around(
                plan, self.row_numbers, self.times, self.offsets, anchor, index, edge_tolerance,
                mode="previous", deltas=deltas, interval=0, tolerance=-1,
            )  # fmt: skip
            found.append(rows.view(-1).numpy())
        held, window_batch = found[0], np.repeat(batch, width)
        episode = np.maximum(episode.numpy(), 0)
        offsets = self.offsets.numpy()
        firsts, lasts = offsets[episode], offsets[episode + 1] - 1
        after = np.minimum(held + 1, np.maximum(np.repeat(lasts, width), 0))
        # Each episode's edges decide its padding.
        picked = [held, after, firsts, lasts]
        owners = [window_batch, window_batch, batch, batch]
        if plan.mode == "mean":  # every row of (q - interval, q]
            span = np.maximum(held - found[1], 0) + 1
            starts = np.cumsum(span) - span
            ramp = np.arange(int(span.sum())) - np.repeat(starts, span)
            picked.append(np.repeat(found[1], span) + ramp)
            owners.append(np.repeat(window_batch, span))
        rows, owner = np.concatenate(picked), np.concatenate(owners)
        kept = (rows >= 0) & (rows < count)
        keyed = np.sort(owner[kept] * count + rows[kept])  # by batch, then row
        keyed = keyed[np.concatenate(([True], keyed[1:] != keyed[:-1]))]
        bounds = np.searchsorted(keyed, np.arange(batches + 1) * count)
        return torch.from_numpy(keyed % max(count, 1)), bounds.tolist()

    def indexes(self, rows, bounds):
        """Each batch's index of its packed stream (``rows_of``'s batches):
        (offsets, times), batch b's index ``offsets[b]`` (its episodes'
        offsets in its rows) and ``times[bounds[b]:bounds[b + 1]]`` (its
        rows' times), as ``submit`` lays them."""
        batches, count = len(bounds) - 1, max(self.times.numel(), 1)
        bounds = np.asarray(bounds)
        owner = np.repeat(np.arange(batches), np.diff(bounds))
        keyed = owner * count + rows.numpy()  # sorted: by batch, then row
        starts = np.arange(batches).reshape(-1, 1) * count
        offsets = np.searchsorted(keyed, starts + self.offsets.numpy()) - bounds[:-1].reshape(-1, 1)
        return torch.from_numpy(offsets), torch.index_select(self.times, 0, rows)

    def submit_checks(self, reader, found, token):
        """Hands ``reader`` the checks of the episodes that rows ``found``
        lie in, for every key whose file's episodes are not all checked
        yet (store/checks.py): [(EpisodeChecks, what its ``wait`` takes)]."""
        pending = []
        for key in self.keys:
            checks = key.rows.checks
            if checks is not None and not checks.done and found.numel():
                episodes = checks.episodes_of(found.numpy() + key.rows.first_row)
                pending.append((checks, checks.submit(reader, episodes, token)))
        return pending

    def _layout(self, count):
        """(where each key's rows begin, their sizes) in a buffer of
        ``count`` rows: the index (offsets, then times) first."""
        sizes = [key.rows.row_bytes * count for key in self.keys]
        at = [_aligned(8 * (self.offsets.numel() + count))]
        for size in sizes[:-1]:
            at.append(at[-1] + _aligned(size))
        return at, sizes

    def buffer_bytes(self, batch_size):
        """The bytes a buffer of the most rows a batch reads needs (None
        where there is no such bound: mode "mean")."""
        rows = capacity(self, batch_size)
        if rows is None:
            return None
        at, sizes = self._layout(rows)
        return at[-1] + sizes[-1]

    def _reads_into(self, room):
        """A buffer of ``room`` rows, made once for a ring: (where each
        key's rows begin, the buffer's bytes, then what ``submit`` hands the
        reader: each key's begin in the file, row bytes and start in the
        buffer, for keys whose rows have bytes)."""
        layout = self._reads.get(room)
        if layout is None:
            if len(self._reads) > 4:  # buffers of a batch's own size
                self._reads.clear()
            at, sizes = self._layout(room)
            read = [(key.rows, start) for key, start in zip(self.keys, at) if key.rows.row_bytes]
            layout = self._reads[room] = (
                at,
                at[-1] + sizes[-1],
                [r.begin for r, _ in read],
                [r.row_bytes for r, _ in read],
                [start for _, start in read],
            )  # fmt: skip
        return layout

    def views(self, buffer, room, count):
        """Key position -> (values, times, offsets): the packed stream of
        ``count`` rows in ``buffer`` (uint8), laid out for ``room`` rows."""
        edges = self.offsets.numel()
        index = buffer[: 8 * (edges + count)].view(torch.int64)
        offsets, times = index[:edges], index[edges:]
        streams = {}
        for key, start in zip(self.keys, self._reads_into(room)[0]):
            r = key.rows
            values = buffer[start : start + r.row_bytes * count].view(r.dtype)
            streams[key.position] = (values.view(count, *r.shape), times, offsets)
        return streams

    def submit(self, reader, found, index, pin, buffer=None, room=None):
        """Hands the read of rows ``found`` of every key to ``reader``, into
        ``buffer`` (uint8, laid out for ``room`` rows, at least as many) or
        one made now (pinned where ``pin``); the reader copies in the
        batch's index ``index`` ((offsets, times), from ``indexes``) now.
        Returns (ticket, buffer, size), ``size`` the bytes from the
        buffer's start to its last row's end (``views`` then finds the
        streams)."""
        count = found.numel()
        room = count if room is None else room
        at, total, begins, row_bytes, starts = self._reads_into(room)
        if buffer is None:
            buffer = torch.empty(total, dtype=torch.uint8, pin_memory=pin)
        elif count > room or total > buffer.numel():
            raise ValueError(
                f"RowFinder.submit: {count} rows do not fit a buffer of {buffer.numel()} bytes "
                f"laid out for {room} rows ({total} bytes)"
            )
        ticket = reader.submit(self.file.fd, self.keys[0].rows.rows, found, begins, row_bytes,
                               buffer, starts, list(index))  # fmt: skip
        return ticket, buffer, at[-1] + count * self.keys[-1].rows.row_bytes

    def wait(self, reader, ticket):
        if reader.wait(ticket) >= 0:
            keys = ", ".join(repr(key.plan.key) for key in self.keys)
            raise self.file.short_read(f"the values of {keys}")


def finders_of(store, plans):
    """The RowFinders of the plans' mapped keys (their values not encoded)."""
    finders = []
    for k, plan in enumerate(plans):
        if plan.place != "mapped" or plan.encoded:
            continue
        stream = store[plan.key]
        key = MappedKey(k, plan, store.mapped_rows[plan.key])
        shared = next((f for f in finders if f.shares(plan, stream)), None)
        if shared is None:
            finders.append(RowFinder(plan, stream, [key]))
        else:
            shared.add(key)
    return finders


class MappedReads:
    """Batches' mapped rows handed to a native reader: ``submit(b, found)``
    for each finder's rows, then ``wait(b)``, the batch's streams (key
    position -> (values, times, offsets)). They land in ``ring`` (a
    PinnedRing; ``used(b)`` once batch b's copies are queued), or else in
    a buffer of their own a batch (pinned where ``pin``)."""

    def __init__(self, finders, reader, pin, ring=None):
        self.finders, self.reader, self.pin, self.ring = finders, reader, pin, ring
        self.pending = {}
        # The episodes this reader has asked to check are marked with it: a
        # later batch reading one waits for an earlier batch, which waits
        # for its check.
        self.token = new_token()

    def _buffers(self, b):
        if self.ring is None or b < 0:
            return [None] * len(self.finders)
        return self.ring.take(b)

    def used(self, b, cuda_stream=None):
        """The work queued on ``cuda_stream`` (default: the current one)
        copies batch b's rows."""
        if self.ring is not None and b >= 0:
            self.ring.used(b, cuda_stream)

    def submit(self, b, found):
        """Hands batch b's reads over: ``found``, each finder's rows and
        their index, (offsets, times) (``RowFinder.rows_of``,
        ``RowFinder.indexes``)."""
        token = self.token
        buffers = self._buffers(b)
        rooms = self.ring.rooms if buffers[0] is not None else [None] * len(buffers)
        pending = []
        for f, (rows, index), buffer, room in zip(self.finders, found, buffers, rooms):
            checks = f.submit_checks(self.reader, rows, token)
            ticket, buffer, size = f.submit(self.reader, rows, index, self.pin, buffer, room)
            pending.append((f, checks, ticket, (buffer, room or rows.numel(), rows.numel()), size))
        self.pending[b] = pending

    def wait(self, b, streams=True):
        """Once batch b's checks and reads are done (every one waited for,
        the first error then raised): the bytes each finder's buffer holds
        (``RowFinder.submit``'s sizes), and where ``streams``, the batch's
        streams (key position -> (values, times, offsets))."""
        pending, waits = self.pending.pop(b), []
        for finder, checks, ticket, _, _ in pending:
            waits += [partial(c.wait, self.reader, handed) for c, handed in checks]
            waits.append(partial(finder.wait, self.reader, ticket))
        wait_all(waits)
        sizes = [size for *_, size in pending]
        if not streams:
            return None, sizes
        views = {}
        for finder, _, _, landed, _ in pending:
            views.update(finder.views(*landed))
        return views, sizes

    def now(self, index, anchor, edge_tolerance):
        """The streams of the batch anchored at ``index`` (host), read now."""
        size = max(1, index.numel())
        found = []
        for f in self.finders:
            rows, bounds = f.rows_of(index, anchor, edge_tolerance, size)
            offsets, times = f.indexes(rows, bounds)
            found.append((rows, (offsets[0], times)))
        try:
            self.submit(-1, found)
            return self.wait(-1)[0]
        finally:
            self.release()

    def release(self):
        """The checks asked for and not waited for are forgotten: another
        reader asks for them again."""
        for finder in self.finders:
            for key in finder.keys:
                if key.rows.checks is not None:
                    key.rows.checks.release(self.token)


class MappedAhead(HandedAhead):
    """An epoch's mapped rows, read ``depth`` batches ahead: ``get(i)``
    hands batch i + depth to the reader and waits for batch i's streams;
    ``close()`` ends the reader's threads. The rows wait in memory of their
    own, ``depth`` + 1 batches at most: in ``ring`` (a PinnedRing of at
    least ``depth`` + 1 slots; ``used(i)`` once batch i's copies are
    queued), or in a buffer a batch."""

    def __init__(self, finders, anchor, edge_tolerance, parts, depth, reader, pin, ring=None):
        self.anchor, self.edge, self.parts = anchor, edge_tolerance, parts
        self.reads = MappedReads(finders, reader, pin, ring)
        self.pending = self.reads.pending
        self.chunk = None  # (first batch, [(rows, bounds, offsets, times) per finder])
        # Each batch's index holds every episode's offset: fewer batches a
        # chunk where there are many.
        edges = max(f.offsets.numel() for f in finders)
        self.chunk_batches = max(1, min(CHUNK_BATCHES, CHUNK_OFFSETS // edges))
        if ring is not None:
            ring.busy = True
        self._start(depth, len(parts))

    def _found(self, b):
        """Each finder's (rows, index) of batch b, found a chunk of batches
        at a time."""
        chunk = self.chunk_batches
        first = b - b % chunk
        if self.chunk is None or self.chunk[0] != first:
            parts, size = self.parts, self.parts.batch_size
            end = min(first + chunk, len(parts))
            index = parts.anchors[first * size : end * size].cpu()
            found = []
            for f in self.reads.finders:
                rows, bounds = f.rows_of(index, self.anchor, self.edge, size)
                found.append((rows, bounds, *f.indexes(rows, bounds)))
            self.chunk = (first, found)
        k = b - first
        return [(rows[bounds[k] : bounds[k + 1]], (offsets[k], times[bounds[k] : bounds[k + 1]]))
                for rows, bounds, offsets, times in self.chunk[1]]  # fmt: skip

    def _submit(self, b):
        self.reads.submit(b, self._found(b))

    def get(self, i):
        self._hand(i)
        return self.reads.wait(i)[0]

    def stage(self, i, static):
        """Batch i's rows, once read, copied into ``static`` (the StaticRows
        that the graphs cut them from) on the GPU; the ring's slot is free
        once they are."""
        self._hand(i)
        static.stage(self.reads.ring, i, self.reads.wait(i, streams=False)[1])

    def used(self, i, cuda_stream=None):
        """Batch i's rows are copied by the work queued on ``cuda_stream``
        (default: the current one)."""
        self.reads.used(i, cuda_stream)

    def close(self):
        try:
            self.reads.reader.close()
        finally:
            if self.reads.ring is not None:
                self.reads.ring.busy = False
            self.reads.release()
