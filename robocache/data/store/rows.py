"""Rows of a mapped stream read from the store's file directly: each run of
consecutive rows one ``preadv`` into the destination, the runs spread over a
few threads, so that a cold disk serves many reads at once (where faults of
a memory map come one at a time). The reads go through the file held open
since ``load`` (``StoreFile``), never through its path again."""

import json
import os
import struct
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import numpy as np
import torch

from ..errors import LoaderError

# safetensors' dtype names, as its header writes them.
_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
}  # fmt: skip
# Runs of rows closer than this many bytes are read as one (the gap read and dropped).
COALESCE_BYTES = 64 << 10


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
    ``begin + r * row_bytes``."""

    file: StoreFile
    begin: int
    rows: int
    dtype: torch.dtype
    shape: tuple  # one row's

    @property
    def path(self):
        return self.file.path

    @property
    def row_bytes(self):
        return (
            int(np.prod(self.shape, dtype=np.int64))
            * torch.empty((), dtype=self.dtype).element_size()
        )

    def part(self, first, end):
        """Rows first:end as a MappedRows of their own."""
        return replace(self, begin=self.begin + first * self.row_bytes, rows=end - first)

    def read(self, rows, pool=None, pin=False):
        """The rows ``rows`` (sorted, unique, int64) as an (R, *shape) tensor."""
        rows = np.asarray(rows, dtype=np.int64)
        out = torch.empty((len(rows), *self.shape), dtype=self.dtype, pin_memory=pin)
        if len(rows) == 0:
            return out
        if rows[0] < 0 or rows[-1] >= self.rows:
            raise IndexError(f"rows outside 0:{self.rows} of {self.path}")
        size = self.row_bytes
        target = out.view(-1).view(torch.uint8).numpy() if size else None
        # Runs: rows whose gap is under COALESCE_BYTES are read with the gap.
        gap = max(1, COALESCE_BYTES // max(size, 1))
        breaks = np.nonzero(np.diff(rows) > gap)[0] + 1
        starts = np.concatenate([[0], breaks])
        ends = np.concatenate([breaks, [len(rows)]])
        jobs = [(self.file.fd, rows[a:b], a, target, size) for a, b in zip(starts, ends)]
        if pool is None or len(jobs) == 1:
            for job in jobs:
                self._read_run(*job)
        else:
            list(pool.map(lambda job: self._read_run(*job), jobs))
        return out

    def _read_run(self, fd, rows, at, target, size):
        first, last = int(rows[0]), int(rows[-1])
        whole = last - first + 1 == len(rows)  # no gap: straight into the destination
        span = (
            target[at * size : (at + len(rows)) * size]
            if whole
            else bytearray((last - first + 1) * size)
        )
        view = memoryview(span)
        done, offset = 0, self.begin + first * size
        while done < len(view):
            got = os.preadv(fd, [view[done:]], offset + done)
            if got <= 0:
                raise self.file.short_read("a stream's values")
            done += got
        if not whole:
            block = np.frombuffer(span, dtype=np.uint8).reshape(-1, size)
            target[at * size : (at + len(rows)) * size] = block[rows - first].reshape(-1)


def reader_pool(threads):
    """The threads that read runs of rows (None: the caller's thread)."""
    return ThreadPoolExecutor(max_workers=threads) if threads > 1 else None
