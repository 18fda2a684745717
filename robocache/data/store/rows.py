"""Rows of a mapped stream read from the store's file directly, by the
native row reader (``RowReader``, csrc/io): runs of nearby rows each one
positional read, spread over a few native threads, so that a cold disk
serves many reads at once (where faults of a memory map come one at a time).
The reads go through the file held open since ``load`` (``StoreFile``),
never through its path again."""

import json
import os
import struct
import weakref
from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import torch

from ..errors import LoaderError
from .checks import CHECK_THREADS

# safetensors' dtype names, as its header writes them.
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip


class StoreFile:
    """A store's file, held open from ``load`` on: reads of its values go
    through this descriptor, so a ``save`` over the store (a new file put in
    its place) leaves this process reading the file it loaded. Closed when
    nothing refers to it; a copy in another process (pickle) opens the path
    again and refuses a different file."""

    def __init__(self, path):
        self.path = str(path)
        self.fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        weakref.finalize(self, os.close, self.fd)
        found = os.fstat(self.fd)
        self.identity = (found.st_dev, found.st_ino)
        self.size = found.st_size

    def is_at_path(self):
        """Whether the file at ``path`` is still this one."""
        try:
            found = os.stat(self.path)
        except OSError:
            return False
        return (found.st_dev, found.st_ino) == self.identity

    def short_read(self, what):
        """The error for a read that came back short: the file was cut or
        replaced in place after it was loaded."""
        size = os.fstat(self.fd).st_size
        return LoaderError(
            f"{self.path}: the file ends inside {what} (it was {self.size} bytes when loaded, "
            f"{size} now: truncated or rewritten in place after it was loaded)"
        )

    def __reduce__(self):
        return _reopened, (self.path, self.identity)


def _reopened(path, identity):
    file = StoreFile(path)
    if file.identity != identity:
        raise LoaderError(
            f"{path}: not the file this store was loaded from (another was saved in its "
            f"place since); load the store again"
        )
    return file


def tensor_extents(file):
    """name -> (dtype, shape, begin, end): where each tensor's bytes lie in a
    safetensors file (a StoreFile; its header: a little-endian u64 length,
    then JSON)."""
    (length,) = struct.unpack("<Q", _pread_all(file, 8, 0, "its header"))
    header = json.loads(_pread_all(file, length, 8, "its header"))
    base = 8 + length
    return {
        name: (_DTYPES[t["dtype"]], tuple(t["shape"]), base + t["data_offsets"][0],
               base + t["data_offsets"][1])
        for name, t in header.items() if name != "__metadata__"
    }  # fmt: skip


def _pread_all(file, size, offset, what):
    got = b""
    while len(got) < size:
        more = os.pread(file.fd, size - len(got), offset + len(got))
        if not more:
            raise file.short_read(what)
        got += more
    return got


@dataclass(frozen=True)
class MappedRows:
    """A stream's values as rows of a file (a StoreFile): row r at
    ``begin + r * row_bytes``. ``checks``: the file's per-episode CRC-32s of
    the stream (``checks.EpisodeChecks``, shared by its parts), checked the
    first time an episode is read; None where ``load`` was not asked to
    verify."""

    file: StoreFile
    begin: int
    rows: int
    dtype: torch.dtype
    shape: tuple  # one row's
    checks: object = field(default=None, compare=False, repr=False)

    @property
    def path(self):
        return self.file.path

    @cached_property
    def row_bytes(self):
        return (
            int(np.prod(self.shape, dtype=np.int64))
            * torch.empty((), dtype=self.dtype).element_size()
        )

    def part(self, first, end):
        """Rows first:end as a MappedRows of their own."""
        return replace(self, begin=self.begin + first * self.row_bytes, rows=end - first)

    @property
    def first_row(self):
        """Row 0 here as a row of the file's whole stream (these rows may
        be a shard's part of it)."""
        return (self.begin - self.checks.begin) // self.row_bytes if self.checks else 0

    def check(self, rows=None):
        """Checks now, several episodes at once, those not checked yet that
        hold ``rows`` (sorted rows of these, a numpy array; None: every
        one), before they are read (a copy into memory, a decoder's read)."""
        checks = self.checks
        if checks is None or checks.done:
            return
        if rows is None:
            episodes = checks.episodes_between(self.first_row, self.first_row + self.rows)
        else:
            episodes = checks.episodes_of(rows + self.first_row)
        if (checks.state[episodes] == -1).all():
            return
        reader = row_reader(CHECK_THREADS)
        try:
            checks.check_now(episodes, reader)
        finally:
            reader.close()

    def read(self, rows, reader=None, pin=False):
        """The rows ``rows`` (increasing, int64) as an (R, *shape) tensor
        (pinned where ``pin``), read in one native call (``reader``: a
        RowReader from ``row_reader``; None reads on the caller's thread
        alone); the episodes they lie in checked first, where not yet."""
        rows = torch.as_tensor(rows, dtype=torch.int64).contiguous()
        out = torch.empty((rows.numel(), *self.shape), dtype=self.dtype, pin_memory=pin)
        if out.numel() == 0:
            return out
        reader = caller_reader() if reader is None else reader
        if self.checks is not None and not self.checks.done:
            self.checks.check_now(self.checks.episodes_of(rows.numpy() + self.first_row), reader)
        target = out.view(-1).view(torch.uint8)
        short = reader.read(
            self.file.fd, self.rows, rows, [self.begin], [self.row_bytes], target, [0]
        )
        if short >= 0:
            raise self.file.short_read("a stream's values")
        return out


_CALLER_READER = []


def caller_reader():
    """A RowReader of no threads of its own: each read runs on the thread
    that waits for it."""
    if not _CALLER_READER:
        _CALLER_READER.append(torch.classes.robocache.RowReader(0))
    return _CALLER_READER[0]


def row_reader(threads):
    """A native RowReader: ``threads`` read rows at once (the thread that
    waits for a read and ``threads - 1`` of its own); ``close()`` ends its
    threads."""
    return torch.classes.robocache.RowReader(max(0, threads - 1))
