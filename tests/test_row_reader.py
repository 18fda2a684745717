"""The native row reader's own contract: checks of extents against their
CRC-32 (as zlib computes it), and readers freed while their threads hold
the last of a read's tensors."""

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

from robocache.data.store.rows import row_reader


def test_a_crc_checked_natively_is_zlib_s(tmp_path):
    data = np.random.default_rng(0).integers(0, 256, 3_000_011, dtype=np.uint8).tobytes()
    path = tmp_path / "bytes"
    path.write_bytes(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        extents = [(0, 0), (5, 1), (3, 17), (100, 2_000_003), (7, len(data) - 7)]
        crcs = [zlib.crc32(data[b : b + n]) for b, n in extents]
        begins, lengths = [b for b, _ in extents], [n for _, n in extents]
        for threads in (0, 3):
            reader = row_reader(threads + 1)
            assert reader.wait(reader.submit_checks(fd, begins, lengths, crcs)) == -1
            wrong = list(crcs)
            wrong[3] ^= 1 << 7
            assert reader.wait(reader.submit_checks(fd, begins, lengths, wrong)) == 3
            past = lengths[:-1] + [len(data)]  # the file ends inside the last extent
            assert reader.wait(reader.submit_checks(fd, begins, past, crcs)) == 4
            reader.close()
        with pytest.raises(ValueError, match=r"crcs\[0\] must be a CRC-32"):
            row_reader(1).submit_checks(fd, [0], [1], [2**32])
        with pytest.raises(ValueError, match="must be as long"):
            row_reader(1).submit_checks(fd, [0, 1], [1], [0])
    finally:
        os.close(fd)


def test_a_reader_freed_right_after_its_reads_ends(tmp_path):
    """The tensors of a read are let go by the thread that waited for it, never
    by one of the reader's own (which would need the GIL while the thread
    freeing the reader holds it and waits for that thread: a hang). In a
    fresh process, with a time limit, so that a hang fails the test."""
    path = tmp_path / "rows"
    path.write_bytes(os.urandom(1 << 20))
    script = f"""
import os, torch, robocache
fd = os.open({str(path)!r}, os.O_RDONLY)
for _ in range(3000):
    reader = torch.classes.robocache.RowReader(4)
    out = torch.empty(128 * 64, dtype=torch.uint8)
    reader.wait(reader.submit(fd, 16384, torch.arange(0, 256, 2), [0], [64], out, [0]))
    del out, reader
print("done")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.stdout.strip() == "done", done.stderr
