"""The rows that batches read from mapped keys, found natively
(``torch.classes.robocache.WindowRows`` and ``EpochRows``), against a
reference built on the window operator over row numbers."""

import pytest
import torch
from readahead_cases import DELTAS, make_store

from robocache.data import EpisodeStore
from robocache.data.sampler.cut import rows_around
from robocache.data.sampler.finder import finders_of
from robocache.data.sampler.plan import check_options, edge_tolerance_ns, plan_keys

MODES = {"cam": "nearest", "joints": "mean", "force": "previous"}


def reference_rows(finder, index, anchor, edge, batch_size):
    """Each batch's sorted rows: for each window, the row at or before each
    query and the row after it, its episode's first and last rows, and for
    "mean" every row of each query's interval."""
    plan, count = finder.plan, finder.times.numel()
    row_numbers = torch.arange(count).view(-1, 1)
    rule = dict(mode="previous", interval=0, tolerance=-1)
    held, episode = rows_around(plan, row_numbers, finder.times, finder.offsets, anchor, index,
                                edge, deltas=finder.deltas, **rule)  # fmt: skip
    if plan.mode == "mean":
        low, _ = rows_around(plan, row_numbers, finder.times, finder.offsets, anchor, index, edge,
                             deltas=finder.deltas - plan.interval, **rule)  # fmt: skip
    batches = []
    for start in range(0, index.numel(), batch_size):
        rows = set()
        for a in range(start, min(start + batch_size, index.numel())):
            e = max(int(episode[a]), 0)
            first, last = int(finder.offsets[e]), int(finder.offsets[e + 1]) - 1
            rows |= {first, last}
            for w in range(finder.deltas.numel()):
                at = int(held[a, w, 0])
                rows |= {at, min(at + 1, max(last, 0))}
                if plan.mode == "mean":
                    rows |= set(range(int(low[a, w, 0]), max(at, int(low[a, w, 0])) + 1))
        batches.append(sorted(r for r in rows if 0 <= r < count))
    return batches


def finders(tmp_path, modes):
    make_store().save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    options = check_options(modes=modes, interval_s={"joints": 0.07})
    plans = plan_keys(mapped, DELTAS, options, torch.device("cpu"))
    return finders_of(mapped, plans), (mapped["anchor"].offsets, mapped["anchor"].times)


@pytest.mark.parametrize("batch_size", [1, 3, 8])
def test_each_batch_reads_the_rows_the_reference_finds(tmp_path, batch_size):
    found_by, anchor = finders(tmp_path, MODES)
    assert sorted(f.plan.mode for f in found_by) == ["mean", "nearest", "previous"]
    g = torch.Generator().manual_seed(batch_size)
    anchors = int(anchor[0][-1])
    for edge in (0, edge_tolerance_ns(0.02)):
        index = torch.randint(0, anchors, (2 * anchors + 1,), generator=g)
        for finder in found_by:
            rows, bounds = finder.rows_of(index, anchor, edge, batch_size)
            want = reference_rows(finder, index, anchor, edge, batch_size)
            assert len(bounds) == len(want) + 1
            got = [rows[bounds[b] : bounds[b + 1]].tolist() for b in range(len(want))]
            assert got == want, finder.plan.mode


def test_an_epoch_is_found_a_chunk_at_a_time(tmp_path):
    found_by, anchor = finders(tmp_path, MODES)
    index = torch.randperm(int(anchor[0][-1]), generator=torch.Generator().manual_seed(0))
    edge, size, chunk = edge_tolerance_ns(1e-4), 3, 3
    epoch = torch.classes.robocache.EpochRows(
        [f.windows for f in found_by], index, anchor[0], anchor[1], edge, size, chunk
    )
    batches = -(-index.numel() // size)
    # The last chunk and its last batch are short.
    assert epoch.batches() == batches and batches % chunk == 1 and index.numel() % size
    for b in range(batches):
        first, rows, bounds, offsets, times = epoch.chunk(b)
        assert first == b - b % chunk
        part = index[first * size : (first + chunk) * size]
        for k, finder in enumerate(found_by):
            want_rows, want_bounds = finder.rows_of(part, anchor, edge, size)
            want_offsets, want_times = finder.indexes(want_rows, want_bounds)
            assert torch.equal(rows[k], want_rows) and bounds[k].tolist() == want_bounds
            assert torch.equal(offsets[k], want_offsets) and torch.equal(times[k], want_times)
    with pytest.raises(ValueError, match=rf"EpochRows.chunk: batch {batches} is not in the epoch"):
        epoch.chunk(batches)
    with pytest.raises(ValueError, match="batch_size and chunk_batches must be >= 1; got 0"):
        torch.classes.robocache.EpochRows([], index, anchor[0], anchor[1], edge, 0, 1)


def test_window_rows_name_what_is_wrong(tmp_path):
    (finder, *_), anchor = finders(tmp_path, MODES)
    times, offsets, deltas = finder.times, finder.offsets, finder.deltas
    with pytest.raises(ValueError, match="mode must be 'nearest', 'previous', 'linear' or 'mean'"):
        torch.classes.robocache.WindowRows(times, offsets, deltas, "closest", 0)
    with pytest.raises(ValueError, match="WindowRows: times must be a 1-D int64 CPU tensor"):
        torch.classes.robocache.WindowRows(times.float(), offsets, deltas, "nearest", 0)
    windows = finder.windows
    with pytest.raises(ValueError, match="rows_of: index must be a 1-D int64 CPU tensor"):
        windows.rows_of(torch.tensor([0.0]), anchor[0], anchor[1], 0, 1)
    with pytest.raises(ValueError, match="rows_of: batch_size must be >= 1; got 0"):
        windows.rows_of(torch.tensor([0]), anchor[0], anchor[1], 0, 0)
    rows = torch.tensor([0, 1])
    with pytest.raises(ValueError, match=r"indexes: bounds must rise within 0..2"):
        windows.indexes(rows, torch.tensor([0, 3]))
