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

import torch

from ..store.checks import new_token
from .feed import FED, MappedFeed
from .handed import HandedAhead, wait_all

# Batches whose rows are found at once (the host's cut over row numbers): its
# cost grows with the batches, and an iteration's first chunk is found
# before its first batch; fewer where their indexes would hold more than
# CHUNK_OFFSETS episode offsets.
CHUNK_BATCHES = 8
CHUNK_OFFSETS = 1 << 20


class MappedReads:
    """Batches' mapped rows handed to a native reader: ``submit(b, found)``
    for each finder's rows, then ``wait(b)``, the batch's streams (key
    position -> (values, times, offsets)). They land in ``ring`` (a
    PinnedRing; ``used(b)`` once batch b's copies are queued), or else in
    a buffer of their own a batch (pinned where ``pin``). Batches the
    native ``feed`` (a MappedFeed, where there is one) handed over are
    marked ``FED`` in ``pending``."""

    def __init__(self, finders, reader, pin, ring=None):
        self.finders, self.reader, self.pin, self.ring = finders, reader, pin, ring
        self.pending = {}
        self.feed = None
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
        try:
            for f, (rows, index), buffer, room in zip(self.finders, found, buffers, rooms):
                checks = f.submit_checks(self.reader, rows, token)
                ticket, buffer, size = f.submit(self.reader, rows, index, self.pin, buffer, room)
                landed = (buffer, room or rows.numel(), rows.numel())
                pending.append((f, checks, ticket, landed, size))
        except BaseException:
            for _, _, ticket, _, _ in pending:  # no read left writing behind the error
                try:
                    self.reader.wait(ticket)
                except Exception:
                    pass
            raise
        self.pending[b] = pending

    def wait(self, b, streams=True):
        """Once batch b's checks and reads are done (every one waited for,
        the first error then raised): the bytes each finder's buffer holds
        (``RowFinder.submit``'s sizes), and where ``streams``, the batch's
        streams (key position -> (values, times, offsets))."""
        pending, waits = self.pending.pop(b), []
        if pending is FED:
            first_short, sizes, counts = self.feed.native.wait(b)
            if first_short >= 0:
                raise self.finders[first_short].short_read()
            return (self.feed.views(b, counts) if streams else None), sizes
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
    own, ``depth`` + 2 batches at most: in ``ring`` (a PinnedRing of at
    least ``depth`` + 2 slots; ``used(i)`` once batch i's copies are
    queued), or in a buffer a batch. With a ring, once every episode has
    passed its checks, the native feed (feed.py) hands the batches over;
    from the first of them that ``stage`` stages, the feed's thread waits
    for them and copies them."""

    def __init__(self, finders, anchor, edge_tolerance, parts, depth, reader, pin, ring=None):
        self.reads = MappedReads(finders, reader, pin, ring)
        self.pending = self.reads.pending
        self.chunk = None  # (first batch, [(rows, bounds, offsets, times) per finder])
        # Each batch's index holds every episode's offset: fewer batches a
        # chunk where there are many.
        edges = max(f.offsets.numel() for f in finders)
        self.chunk_batches = max(1, min(CHUNK_BATCHES, CHUNK_OFFSETS // edges))
        self.epoch = torch.classes.robocache.EpochRows(
            [f.windows for f in finders], parts.anchors.cpu(), anchor[0], anchor[1],
            edge_tolerance, parts.batch_size, self.chunk_batches,
        )  # fmt: skip
        if ring is not None:
            try:
                self.reads.feed = MappedFeed(finders, reader, ring, self.epoch)
            except BaseException:
                reader.close()
                raise
            ring.busy = True
        self._start(depth, len(parts))

    def _chunk(self, b):
        """(first batch, each finder's (rows, bounds, offsets, times)) of
        the chunk of batches that batch b is in (``EpochRows.chunk``)."""
        if self.chunk is None or not 0 <= b - self.chunk[0] < self.chunk_batches:
            first, *found = self.epoch.chunk(b)
            self.chunk = (first, list(zip(*found)))
        return self.chunk

    def _found(self, b):
        """Each finder's (rows, index) of batch b."""
        first, found = self._chunk(b)
        k = b - first
        picked = []
        for rows, bounds, offsets, times in found:
            lo, hi = bounds[k : k + 2].tolist()
            picked.append((rows[lo:hi], (offsets[k], times[lo:hi])))
        return picked

    def _submit(self, b):
        feed = self.reads.feed
        if feed is not None and feed.ready():  # handed over by the native feed
            feed.native.hand(b)
            self.pending[b] = FED
        else:
            self.reads.submit(b, self._found(b))

    def get(self, i):
        self.stop_feeding()
        self._hand(i)
        return self.reads.wait(i)[0]

    def stage(self, i, static):
        """Batch i's rows, once read, copied into ``static`` (the StaticRows
        that the graphs cut them from) on the GPU; the ring's slot is free
        once they are. From the first batch the native feed handed over,
        the feed's thread waits for the reads and queues the copies: this
        only waits for batch i's copy to be queued (its graph waits for the
        copy on the GPU)."""
        feed = self.reads.feed
        if feed.feeding and feed.staged_upto.value > i:
            return  # its copy is queued
        if not feed.feeding and self.pending.get(i) is FED:
            # Batches i.. are handed over natively (each later one too).
            feed.start(i, static.staging, self.depth)
            self.pending.clear()
        if feed.feeding:
            first_short = feed.native.staged(i)
            if first_short >= 0:
                raise self.reads.finders[first_short].short_read()
            return
        self._hand(i)
        static.stage(self.reads.ring, i, self.reads.wait(i, streams=False)[1])

    def cut(self, i):
        """The graph that cuts batch i is launched (it marks its cut of the
        StaticRows on the GPU): the feed's next copy into them follows it."""
        feed = self.reads.feed
        if feed is not None and feed.feeding:
            feed.cut_upto.value = i + 1

    def stop_feeding(self):
        """The feed's thread stopped (another iteration took the graphs
        over, or batches are made without them): ``get`` waits for the
        batches it holds."""
        feed = self.reads.feed
        if feed is not None and feed.feeding:
            for b in feed.stop():
                self.pending[b] = FED

    def used(self, i, cuda_stream=None):
        """Batch i's rows are copied by the work queued on ``cuda_stream``
        (default: the current one)."""
        self.reads.used(i, cuda_stream)

    def close(self):
        try:
            try:
                self.stop_feeding()
            finally:
                self.reads.reader.close()
        finally:
            if self.reads.ring is not None:
                self.reads.ring.busy = False
            self.reads.release()
