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
    reader.wait(reader.submit(fd, 16384, torch.arange(0, 256, 2), [0], [64], out, [0], []))
    del out, reader
print("done")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.stdout.strip() == "done", done.stderr


def test_a_read_s_head_lands_before_its_rows(tmp_path):
    import torch

    data = np.random.default_rng(1).integers(0, 256, 64 * 40, dtype=np.uint8)
    path = tmp_path / "rows"
    path.write_bytes(data.tobytes())
    fd = os.open(path, os.O_RDONLY)
    reader = row_reader(3)
    try:
        rows = torch.tensor([1, 2, 7, 30])
        offsets, times = torch.tensor([0, 3, 4]), torch.tensor([10, 20, 30, 40])
        out = torch.zeros(56 + 4 * 64, dtype=torch.uint8)
        ticket = reader.submit(fd, 40, rows, [0], [64], out, [56], [offsets, times])
        assert reader.wait(ticket) == -1
        assert torch.equal(out[:56].view(torch.int64), torch.cat([offsets, times]))
        want = data.reshape(40, 64)[rows.numpy()].reshape(-1)
        assert torch.equal(out[56:], torch.from_numpy(want))
        # No rows: the head alone, within out.
        empty = torch.zeros(56, dtype=torch.uint8)
        reader.wait(reader.submit(fd, 40, rows[:0], [0], [64], empty, [56], [offsets, times]))
        assert torch.equal(empty.view(torch.int64), torch.cat([offsets, times]))
        with pytest.raises(ValueError, match="pass the start of stream 0's rows"):
            reader.submit(fd, 40, rows, [0], [64], out, [48], [offsets, times])
        with pytest.raises(ValueError, match=r"head\[0\] must be a contiguous host tensor"):
            reader.submit(fd, 40, rows, [0], [64], out, [56], [times[::2], offsets])
        with pytest.raises(ValueError, match="do not fit out's 8 bytes"):
            reader.submit(fd, 40, rows[:0], [0], [64], empty[:8], [0], [offsets])
    finally:
        reader.close()
        os.close(fd)
