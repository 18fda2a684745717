"""The rows that batches read from mapped keys (``RowFinder``): found on
the host over row numbers a chunk of batches at a time, each batch's rows
packed as a small stream with the same episodes, and read by the native
row reader into a buffer laid out for them."""

from typing import NamedTuple

import torch

from .buffers import capacity


class BufferReads(NamedTuple):
    """A finder's buffer laid out for a number of rows: where each key's
    rows begin (``at``), its bytes (``total``), then what the reader is
    handed: each key's begin in the file, row bytes and start in the buffer
    (``begins``, ``row_bytes``, ``starts``, for keys whose rows have
    bytes); a batch of n rows fills ``at[-1] + n * last_row_bytes``."""

    at: list
    total: int
    begins: list
    row_bytes: list
    starts: list
    last_row_bytes: int


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
        # The rows batches read, found natively (csrc/io/window_rows.cpp).
        self.windows = torch.classes.robocache.WindowRows(
            self.times, self.offsets, self.deltas, plan.mode, plan.interval
        )
        self.file = keys[0].rows.file
        self._reads = {}  # buffer_reads's, by room

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
        ``rows[bounds[b]:bounds[b + 1]]`` (``WindowRows.rows_of``)."""
        rows, bounds = self.windows.rows_of(index, anchor[0], anchor[1], edge_tolerance, batch_size)
        return rows, bounds.tolist()

    def indexes(self, rows, bounds):
        """Each batch's index of its packed stream (``rows_of``'s batches):
        (offsets, times), batch b's index ``offsets[b]`` (its episodes'
        offsets in its rows) and ``times[bounds[b]:bounds[b + 1]]`` (its
        rows' times), as ``submit`` lays them."""
        return self.windows.indexes(rows, torch.as_tensor(bounds, dtype=torch.int64))

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

    def buffer_reads(self, room):
        """A buffer of ``room`` rows, made once for a ring (a BufferReads)."""
        layout = self._reads.get(room)
        if layout is None:
            if len(self._reads) > 4:  # buffers of a batch's own size
                self._reads.clear()
            at, sizes = self._layout(room)
            read = [(key.rows, start) for key, start in zip(self.keys, at) if key.rows.row_bytes]
            layout = self._reads[room] = BufferReads(
                at,
                at[-1] + sizes[-1],
                [r.begin for r, _ in read],
                [r.row_bytes for r, _ in read],
                [start for _, start in read],
                self.keys[-1].rows.row_bytes,
            )  # fmt: skip
        return layout

    def views(self, buffer, room, count):
        """Key position -> (values, times, offsets): the packed stream of
        ``count`` rows in ``buffer`` (uint8), laid out for ``room`` rows."""
        edges = self.offsets.numel()
        index = buffer[: 8 * (edges + count)].view(torch.int64)
        offsets, times = index[:edges], index[edges:]
        streams = {}
        for key, start in zip(self.keys, self.buffer_reads(room).at):
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
        reads = self.buffer_reads(room)
        if buffer is None:
            buffer = torch.empty(reads.total, dtype=torch.uint8, pin_memory=pin)
        elif count > room or reads.total > buffer.numel():
            raise ValueError(
                f"RowFinder.submit: {count} rows do not fit a buffer of {buffer.numel()} bytes "
                f"laid out for {room} rows ({reads.total} bytes)"
            )
        ticket = reader.submit(self.file.fd, self.keys[0].rows.rows, found, reads.begins,
                               reads.row_bytes, buffer, reads.starts, list(index))  # fmt: skip
        return ticket, buffer, reads.at[-1] + count * reads.last_row_bytes

    def wait(self, reader, ticket):
        if reader.wait(ticket) >= 0:
            raise self.short_read()

    def short_read(self):
        """The LoaderError of a read that the file ended inside."""
        keys = ", ".join(repr(key.plan.key) for key in self.keys)
        return self.file.short_read(f"the values of {keys}")


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
