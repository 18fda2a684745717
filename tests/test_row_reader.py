"""The native row reader's own contract: rows read in runs, at random and
handed over, equal to the file's; what does not fit refused; a file cut
after loading named; checks of extents against their CRC-32 (as zlib
computes it); and readers freed while their threads hold the last of a
read's tensors."""

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest
import torch
from fixtures.corrupt import truncate

from robocache.data import LoaderError
from robocache.data.store.rows import MappedRows, StoreFile, row_reader


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


def test_rows_are_read_in_runs(tmp_path):
    values = torch.arange(40 * 6, dtype=torch.int16).view(40, 6)
    path = tmp_path / "rows.bin"
    header = b"x" * 13
    path.write_bytes(header + values.numpy().tobytes())
    rows = MappedRows(StoreFile(path), len(header), 40, torch.int16, (6,))
    for pool in (None, row_reader(1), row_reader(4)):
        picked = np.array([0, 1, 2, 7, 9, 10, 39])
        assert torch.equal(rows.read(picked, pool), values[picked])
        assert torch.equal(rows.part(7, 12).read(np.array([0, 3]), pool), values[[7, 10]])
    assert rows.read(np.array([], dtype=np.int64)).shape == (0, 6)
    with pytest.raises(ValueError, match=r"rows must increase, each in 0..40; got 40 at 0"):
        rows.read(np.array([40]))
    with pytest.raises(ValueError, match=r"rows must increase, each in 0..40; got 3 at 1 after 5"):
        rows.read(np.array([5, 3]))


@pytest.mark.parametrize("row_bytes", [4, 20_000, 70_000])
@pytest.mark.parametrize("threads", [1, 3, 8])
def test_random_rows_read_natively_are_the_file_s_rows(tmp_path, row_bytes, threads):
    g = np.random.default_rng(row_bytes * 10 + threads)
    count = 300 if row_bytes < 70_000 else 60
    values = torch.from_numpy(g.integers(0, 256, (count, row_bytes), dtype=np.uint8))
    path = tmp_path / "rows.bin"
    path.write_bytes(b"h" * 7 + values.numpy().tobytes())
    rows = MappedRows(StoreFile(path), 7, count, torch.uint8, (row_bytes,))
    reader = row_reader(threads)
    for _ in range(5):  # runs whole and with gaps, near each other and far apart
        picked = np.sort(g.choice(count, size=int(g.integers(1, count)), replace=False))
        for pin in (False, torch.cuda.is_available()):
            got = rows.read(picked, reader, pin)
            assert got.is_pinned() == pin
            assert torch.equal(got, values[picked])
    reader.close()
    with pytest.raises(RuntimeError, match="the reader was closed"):
        rows.read(np.array([0, 5]), reader)


def test_a_row_reader_reads_rows_handed_over_and_refuses_what_does_not_fit(tmp_path):
    path = tmp_path / "rows.bin"
    path.write_bytes(bytes(range(64)))
    reader, out = row_reader(2), torch.zeros(16, dtype=torch.uint8)
    with StoreFileOf(path) as fd:
        # Row r of 4 bytes at byte 8 + 4 r: 14 rows.
        assert reader.read(fd, 14, torch.tensor([0, 1, 2, 13]), [8], [4], out, [0]) == -1
        assert out.tolist() == [*range(8, 20), *range(60, 64)]
        # Two streams of one file: rows of 2 bytes from byte 0, of 1 byte from byte 40.
        two = torch.zeros(6, dtype=torch.uint8)
        assert reader.read(fd, 10, torch.tensor([1, 7]), [0, 40], [2, 1], two, [0, 4]) == -1
        assert two.tolist() == [2, 3, 14, 15, 41, 47]
        tickets = [reader.submit(fd, 8, torch.tensor([r]), [0], [8], out[8 * i : 8 * i + 8], [0], [])
                   for i, r in enumerate((7, 2))]  # fmt: skip
        assert reader.pending() == 2
        assert [reader.wait(t) for t in tickets] == [-1, -1] and reader.pending() == 0
        assert out.tolist() == [*range(56, 64), *range(16, 24)]
        # The file ends inside row 15 of 4 bytes at byte 2, read in one run
        # with row 3 (the gap is under a page): that run's first row.
        rows, eight = torch.tensor([3, 15]), torch.zeros(8, dtype=torch.uint8)
        assert reader.read(fd, 16, rows, [2], [4], eight, [0]) == 0
        assert reader.read(fd, 16, rows[1:], [2], [4], eight, [4]) == 0
        assert reader.read(fd, 16, rows[:1], [2], [4], eight, [0]) == -1
        with pytest.raises(ValueError, match=rf"no read {tickets[0]} is waiting"):
            reader.wait(tickets[0])
        one = torch.tensor([0])
        for args, message in (
            ((14, one, [-1], [4], out, [0]), r"stream 0: begin and row_bytes must be >= 0 and > 0"),
            ((14, one, [0], [0], out, [0]), r"stream 0: begin and row_bytes must be"),
            ((1 << 62, one, [8], [4], out, [0]), r"pass the largest file offset"),
            ((14, one, [0], [4], out, [14]), r"stream 0: 1 rows of 4 bytes from byte 14 do not fit"),
            ((14, one, [0, 4], [4], out, [0]), r"begins, row_bytes and at must be as long"),
            ((-1, one, [0], [4], out, [0]), r"row_count must be >= 0"),
            ((14, torch.tensor([[0]]), [0], [4], out, [0]), r"rows must be a contiguous 1-D int64"),
            ((14, one, [0], [4], out.float(), [0]), r"out must be a contiguous uint8 host tensor"),
            ((14, torch.tensor([5, 3]), [0], [4], out, [0]), r"rows must increase, each in 0..14; got 3 at 1 after 5"),
        ):  # fmt: skip
            with pytest.raises(ValueError, match=message):
                reader.read(fd, *args)
    with pytest.raises(RuntimeError, match=r"reading the file failed: Bad file descriptor"):
        reader.read(1 << 20, 14, one, [0], [4], out, [0])  # no such descriptor
    ticket = reader.submit(1 << 20, 14, one, [0], [4], out, [0], [])
    reader.close()  # reads not waited for are dropped
    with pytest.raises(RuntimeError, match=r"the reader was closed"):
        reader.wait(ticket)
    with pytest.raises(ValueError, match="threads must be in 0..256"):
        row_reader(1000)


class StoreFileOf:
    """An open descriptor of a path, closed on exit."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDONLY)

    def __enter__(self):
        return self.fd

    def __exit__(self, *exc):
        os.close(self.fd)


def test_a_file_cut_after_loading_is_an_error_naming_it(tmp_path):
    values = torch.arange(40 * 6, dtype=torch.int16).view(40, 6)
    path = tmp_path / "rows.bin"
    path.write_bytes(values.numpy().tobytes())
    rows = MappedRows(StoreFile(path), 0, 40, torch.int16, (6,))
    truncate(str(path), 0.5)
    assert torch.equal(rows.read(np.array([0, 19])), values[[0, 19]])
    with pytest.raises(
        LoaderError, match=r"rows.bin: the file ends inside a stream's values \(it was 480 bytes "
        r"when loaded, 240 now"
    ):  # fmt: skip
        rows.read(np.array([3, 25]))
