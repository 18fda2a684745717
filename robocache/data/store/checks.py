"""Each episode's values in a store's file checked against the CRC-32 that
``save`` wrote for it, the first time they are read, not at ``load``: a
mapped store opens after reading its index alone, whatever its size.

The native row reader checks them (``RowReader.submit_checks``): each
episode's bytes read whole by one of its threads, episodes by several at
once, off the GIL. Whatever reads values first asks for their episodes'
checks: the sampler's reads of a batch's rows (sampler/mapped.py), and
whatever copies a mapped key into memory (``place``, ``to``,
``pin_memory``, ``load(mmap=False)``)."""

import os
from itertools import count

import numpy as np

from ..errors import LoaderError

# Threads that check a whole stream at once (placement, load).
CHECK_THREADS = 8
# Each reader of batches marks the episodes it has asked to check with a
# number of its own (0: not checked, -1: checked).
_TOKENS = count(1)


def new_token():
    """A number marking the checks one reader of batches has asked for."""
    return next(_TOKENS)


class EpisodeChecks:
    """The per-episode CRC-32s of one stream's values in a store file (a
    ``rows.StoreFile``): episode e holds rows ``bounds[e]:bounds[e + 1]``
    of ``row_bytes`` each from byte ``begin`` (an encoded stream's rows are
    its bytes), and must have the CRC ``sums[e]``. ``name``: the tensor's,
    ``key``: the stream's, for the errors."""

    def __init__(self, file, key, name, begin, row_bytes, bounds, sums):
        self.file, self.key, self.name = file, key, name
        self.begin, self.row_bytes = begin, row_bytes
        self.bounds = np.asarray(bounds, dtype=np.int64)
        self.sums = np.asarray(sums, dtype=np.int64)
        # Per episode: 0 not checked, -1 checked, else the token of the
        # reader whose check of it is in flight.
        self.state = np.zeros(self.sums.shape[0], dtype=np.int64)
        empty = self.bounds[1:] == self.bounds[:-1]
        self.state[empty & (self.sums == 0)] = -1  # no bytes: the CRC of none is 0
        self.done = bool((self.state == -1).all())  # every episode checked

    def episodes_of(self, rows):
        """The episodes holding ``rows`` (sorted rows of the file's stream,
        a numpy array), each once."""
        episodes = np.searchsorted(self.bounds, rows, side="right") - 1
        if episodes.size > 1:
            episodes = episodes[np.concatenate(([True], episodes[1:] != episodes[:-1]))]
        return episodes

    def submit(self, reader, episodes, token):
        """Hands the check of ``episodes`` to ``reader`` (a RowReader), but
        those checked, or asked for under ``token`` already; marks them
        ``token``. Returns what ``wait`` takes (None where none is left)."""
        state = self.state[episodes]
        left = episodes[(state != -1) & (state != token)]
        if left.size == 0:
            return None
        first, end = self.bounds[left], self.bounds[left + 1]
        ticket = reader.submit_checks(
            self.file.fd,
            (self.begin + first * self.row_bytes).tolist(),
            ((end - first) * self.row_bytes).tolist(),
            self.sums[left].tolist(),
        )
        self.state[left] = token  # once handed over: a refused submit marks none
        return ticket, left

    def wait(self, reader, pending):
        """Waits for a check ``submit`` handed over: a LoaderError naming the
        file, the stream and the first episode whose bytes differ."""
        if pending is None:
            return
        ticket, episodes = pending
        bad = reader.wait(ticket)
        if bad >= 0:
            self.state[episodes[bad:]] = 0
            self.state[episodes[:bad]] = -1
            raise self.mismatch(int(episodes[bad]))
        self.state[episodes] = -1
        self.done = bool((self.state == -1).all())

    def release(self, token):
        """The checks asked for under ``token`` and not waited for are
        forgotten (its reader stopped)."""
        self.state[self.state == token] = 0

    def episodes_between(self, first, end):
        """The episodes holding rows ``first:end`` of the file's stream."""
        if end <= first:
            return np.zeros(0, dtype=np.int64)
        return np.arange(
            np.searchsorted(self.bounds, first, side="right") - 1,
            np.searchsorted(self.bounds, end - 1, side="right"),
        )

    def check_now(self, episodes, reader):
        """Checks ``episodes`` not checked yet, now, on ``reader``."""
        token = new_token()
        try:
            self.wait(reader, self.submit(reader, episodes, token))
        finally:
            self.release(token)

    def mismatch(self, episode):
        path = self.file.path
        rows = f"rows {self.bounds[episode]}:{self.bounds[episode + 1]}"
        size = os.fstat(self.file.fd).st_size
        if size != self.file.size:
            return self.file.short_read(
                f"the values of key {self.key!r}, episode {episode} ({self.name}, {rows})"
            )
        return LoaderError(
            f"{path}: stream {self.key!r}: {self.name}, episode {episode} ({rows}) does not "
            "match its checksum: the file is corrupt, or was changed in place after it was loaded"
        )
