"""Mapped keys read ahead of the sampler: the windows are those of the store
in memory, bit for bit, in every mode; the reads are the rows the windows
use; and the reading threads end with the iteration, however it ends."""

import os
import threading
import time

import numpy as np
import pytest
import torch
from conftest import requires_cuda
from fixtures.corrupt import truncate
from helpers import CountedCalls

import robocache.data.sampler.graphs as graphs_module
import robocache.data.sampler.mapped as mapped_module
from robocache.data import EpisodeStore, LoaderError, WindowSampler
from robocache.data.sampler.buffers import PinnedRing, StaticRows
from robocache.data.sampler.feed import FED, MappedFeed
from robocache.data.sampler.finder import finders_of
from robocache.data.sampler.mapped import MappedReads
from robocache.data.sampler.plan import check_options, edge_tolerance_ns, plan_keys
from robocache.data.store.rows import MappedRows, StoreFile, caller_reader, row_reader

MS = 1_000_000


def make_store(seed=0):
    """Episodes of several lengths (one empty, one of a single frame), a
    camera at 10 Hz and a fast stream with repeated times and a drop-out."""
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for e, n in enumerate((9, 1, 0, 14, 5)):
        t = torch.arange(n) * 100 * MS
        fast = torch.sort(torch.randint(0, max(1, n) * 100, (4 * n,), generator=g)).values * MS
        fast[fast.numel() // 2 :] += 150 * MS  # a gap of 150 ms
        episodes.append(
            {
                "cam": (torch.randint(0, 256, (n, 3, 4, 2), generator=g, dtype=torch.uint8), t),
                "joints": (torch.randn(4 * n, 3, generator=g, dtype=torch.float64), fast),
                "force": (torch.randn(4 * n, 2, generator=g).to(torch.bfloat16), fast),
                "anchor": (torch.zeros(n, 1), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, progress=False)


DELTAS = {
    "cam": [-0.1, 0.0, 0.05],
    "joints": [-0.12, 0.0, 0.03, 0.2],
    "force": [-0.05, 0.0],
}


def epoch(store, modes, read_ahead, **kw):
    sampler = WindowSampler(
        store, DELTAS, modes=modes, anchor="anchor", batch_size=4, seed=3, key_age=True,
        read_ahead=read_ahead, **kw,
    )  # fmt: skip
    return [{k: v.clone() for k, v in b.items()} for b in sampler]


@pytest.mark.parametrize(
    "modes",
    [
        {"cam": "nearest", "joints": "linear", "force": "mean"},
        {"cam": "previous", "joints": "mean", "force": "nearest"},
        {"cam": "nearest", "joints": "nearest", "force": "linear"},
    ],
)
@pytest.mark.parametrize("tolerances", [None, {"joints": 0.04, "force": 0.02}])
def test_windows_read_ahead_are_the_windows_in_memory(tmp_path, modes, tolerances):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    assert mapped.mapped == set(store.keys())
    kw = {"tolerance_s": tolerances} if tolerances else {}
    expected = epoch(store, modes, 0, **kw)
    for depth in (0, 1, 3):
        got = epoch(mapped, modes, depth, **kw)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.keys() == b.keys()
            for key in a:
                assert torch.equal(a[key].view(torch.uint8) if a[key].dtype == torch.bfloat16 else a[key],
                                   b[key].view(torch.uint8) if b[key].dtype == torch.bfloat16 else b[key]), key  # fmt: skip


def same_batches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].device == b[key].device, key
            assert torch.equal(a[key].view(torch.uint8) if a[key].dtype == torch.bfloat16 else a[key],
                               b[key].view(torch.uint8) if b[key].dtype == torch.bfloat16 else b[key]), key  # fmt: skip


@requires_cuda
@pytest.mark.parametrize("prefetch", [None, 0])
def test_mapped_rows_cut_on_the_gpu_are_the_windows_on_the_gpu(tmp_path, prefetch):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    modes = {"cam": "nearest", "joints": "linear", "force": "mean"}
    # In order: a store on the GPU draws its order there, with another generator.
    kw = dict(device="cuda", prefetch=prefetch, tolerance_s={"joints": 0.04}, shuffle=False)
    want = epoch(store.to("cuda"), modes, 0, **kw)
    for depth in (0, 1, 3):
        sampler = WindowSampler(mapped, DELTAS, modes=modes, anchor="anchor", batch_size=4,
                                seed=3, key_age=True, read_ahead=depth, **kw)  # fmt: skip
        assert {p.cut_on.type for p in sampler._batches.plans} == {"cuda"}  # one launch
        busy = torch.cuda.Stream()
        with torch.cuda.stream(busy):  # another stream keeps the GPU busy meanwhile
            big = torch.randn(2048, 2048, device="cuda")
            for _ in range(20):
                big = big @ big / 2048
        same_batches([{k: v.clone() for k, v in b.items()} for b in sampler], want)
        torch.cuda.synchronize()
    # Asked for by index: the rows read when asked for.
    sampler = WindowSampler(mapped, DELTAS, modes=modes, anchor="anchor", batch_size=4,
                            seed=3, key_age=True, **kw)  # fmt: skip
    index = torch.tensor([0, 5, 11, 20])
    reference = WindowSampler(store.to("cuda"), DELTAS, modes=modes, anchor="anchor",
                              batch_size=4, seed=3, key_age=True, **kw)  # fmt: skip
    same_batches([sampler.batch_at(index)], [reference.batch_at(index)])
    with pytest.raises(ValueError, match=r"'cam' is mapped from the store's file"):
        WindowSampler(mapped, DELTAS, anchor="anchor", device="cuda", cuda_graph=True,
                      read_ahead=0)  # fmt: skip
    with pytest.raises(ValueError, match=r"'cam' is mapped from the store's file"):
        WindowSampler(mapped, DELTAS, anchor="anchor", device="cuda", cuda_graph=True,
                      modes={"force": "mean"})  # fmt: skip


@requires_cuda
@pytest.mark.parametrize("anchor_place", ["cuda", "mapped"])
@pytest.mark.parametrize("prefetch", [None, 0])
def test_mapped_rows_cut_in_cuda_graphs_are_the_windows_on_the_gpu(tmp_path, prefetch,
                                                                   anchor_place):  # fmt: skip
    store = make_store()
    store.save(tmp_path)
    # Every key is cut on the GPU, in graphs, whether the anchor stream's
    # index lies there or stays on the host (a mapped key's).
    mapped = EpisodeStore.load(tmp_path, placement={"anchor": anchor_place})
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    kw = dict(device="cuda", prefetch=prefetch, tolerance_s={"joints": 0.04}, shuffle=False,
              modes=modes, anchor="anchor", batch_size=4, seed=3, key_age=True)  # fmt: skip
    reference = WindowSampler(store.to("cuda"), DELTAS, cuda_graph=False, **kw)
    want = [{k: v.clone() for k, v in b.items()} for b in reference]
    sampler = WindowSampler(mapped, DELTAS, **kw)
    if prefetch is None:  # the rows are copied beside the step: no side stream
        assert sampler.prefetch == 0
        assert WindowSampler(mapped, DELTAS, **{**kw, "cuda_graph": False}).prefetch == 1
    for _ in range(2):  # two epochs, the second through the graphs captured in the first
        busy = torch.cuda.Stream()
        with torch.cuda.stream(busy):  # another stream keeps the GPU busy meanwhile
            big = torch.randn(2048, 2048, device="cuda")
            for _ in range(20):
                big = big @ big / 2048
        held = list(sampler)  # every batch kept: the ring grows, or cuts without a graph
        same_batches([{k: v.clone() for k, v in b.items()} for b in held], want)
        torch.cuda.set_sync_debug_mode("error")  # nothing waits on the host
        try:
            got = [{k: v.clone() for k, v in b.items()} for b in sampler]  # each let go
        finally:
            torch.cuda.set_sync_debug_mode(0)
        same_batches(got, want)
        torch.cuda.synchronize()
    assert sampler.graphs and all(n >= 1 for n in sampler.graphs.values())
    assert sampler._batches.reader.static is not None


@requires_cuda
def test_mapped_rows_cut_without_a_graph_while_its_batch_is_held(tmp_path, monkeypatch):
    store = make_store()
    store.save(tmp_path)
    monkeypatch.setattr(graphs_module, "MAX_GRAPHS_PER_RING", 1)
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    kw = dict(device="cuda", shuffle=False, modes=modes, anchor="anchor", batch_size=2, seed=3)
    want = [{k: v.clone() for k, v in b.items()} for b in WindowSampler(store.to("cuda"), DELTAS,
                                                                       cuda_graph=False, **kw)]  # fmt: skip
    mapped = EpisodeStore.load(tmp_path, verify=False)  # fed natively from the first batch
    sampler = WindowSampler(mapped, DELTAS, graph_buffers=1, **kw)
    for _ in range(2):
        torch.cuda._sleep(200_000_000)  # the host runs ahead of the copies
        held = list(sampler)  # the one graph's batch held: the later ones cut without it
        same_batches([{k: v.clone() for k, v in b.items()} for b in held], want)
    assert len(want) > 4 and sampler.graphs and all(n == 1 for n in sampler.graphs.values())


@requires_cuda
@pytest.mark.parametrize("cuda_graph", [None, False])
def test_mapped_rows_land_in_a_bounded_ring_of_pinned_buffers(tmp_path, monkeypatch, cuda_graph):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    kw = dict(device="cuda", shuffle=False, modes=modes, anchor="anchor", batch_size=2, seed=3,
              read_ahead=1)  # fmt: skip
    want = [{k: v.clone() for k, v in b.items()} for b in WindowSampler(store.to("cuda"), DELTAS,
                                                                       cuda_graph=False, **kw)]  # fmt: skip
    sampler = WindowSampler(mapped, DELTAS, cuda_graph=cuda_graph, **kw)
    assert "the rows of each batch in a ring of 4 pinned buffers (" in repr(sampler)
    finders = len(sampler._batches.reader.finders)
    pinned = []
    empty = torch.empty

    def counted(*args, **kwargs):
        if kwargs.get("pin_memory"):
            pinned.append(args)
        return empty(*args, **kwargs)

    monkeypatch.setattr(torch, "empty", counted)
    epochs = 3
    for _ in range(epochs):
        # The sampler's own stream held up: the host runs ahead of its copies,
        # so a buffer read into before the GPU copied from it would show.
        torch.cuda._sleep(200_000_000)
        same_batches([{k: v.clone() for k, v in b.items()} for b in sampler], want)
    torch.cuda.synchronize()
    # The sampler makes its ring once; no batch allocates pinned memory.
    assert len(want) > 4 and len(pinned) == 4 * finders
    # An iteration opened while another reads into the ring has one of its own.
    first, second = iter(sampler), iter(sampler)
    a, b = next(first), next(second)
    assert sampler._batches.reader.ring.busy and len(pinned) == 8 * finders
    same_batches([{k: v.clone() for k, v in x.items()} for x in (a, b)], want[:1] * 2)
    del first, second


def test_reads_handed_over_are_waited_for_when_a_later_one_cannot_be(tmp_path, monkeypatch):
    store = make_store()
    store.save(tmp_path)
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    sampler = WindowSampler(EpisodeStore.load(tmp_path, verify=False), DELTAS, modes=modes,
                            anchor="anchor", batch_size=4)  # fmt: skip
    batches, finders = sampler._batches, sampler._batches.reader.finders
    reader, handed, waited = row_reader(3), [], []

    class Counted:  # the reader, its reads counted
        def submit(self, *args):
            handed.append(reader.submit(*args))
            return handed[-1]

        def wait(self, ticket):
            waited.append(ticket)
            return reader.wait(ticket)

    index = torch.tensor([0, 5, 11, 20])
    found = []
    for f in finders:
        rows, bounds = f.rows_of(index, batches.anchor_host, batches.options.edge_tolerance, 4)
        offsets, times = f.indexes(rows, bounds)
        found.append((rows, (offsets[0], times)))

    def refused(*args):
        raise ValueError("refused")

    monkeypatch.setattr(finders[-1], "submit", refused)
    reads = MappedReads(finders, Counted(), False)
    try:
        with pytest.raises(ValueError, match="refused"):
            reads.submit(0, found)
        assert len(finders) >= 2 and len(handed) == len(finders) - 1 and waited == handed
        assert reads.pending == {}
    finally:
        reader.close()


@requires_cuda
def test_rows_staged_for_the_graphs_are_not_zeroed_after_they_land(tmp_path):
    store = make_store()
    store.save(tmp_path)
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    sampler = WindowSampler(EpisodeStore.load(tmp_path), DELTAS, device="cuda", modes=modes,
                            anchor="anchor", batch_size=4)  # fmt: skip
    batches, reader = sampler._batches, sampler._batches.reader
    device = torch.device("cuda")
    # Batch 0's rows read into a ring's slot, as the read ahead reads them.
    ring = PinnedRing(reader.finders, 4, 1, device)
    reads = MappedReads(reader.finders, caller_reader(), True, ring)
    index = torch.tensor([0, 5, 11, 20])
    found = []
    for f in reader.finders:
        rows, bounds = f.rows_of(index, batches.anchor_host, batches.options.edge_tolerance, 4)
        offsets, times = f.indexes(rows, bounds)
        found.append((rows, (offsets[0], times)))
    reads.submit(0, found)
    streams, sizes = reads.wait(0)
    reads.release()
    # Buffers of these sizes made and freed first: the next come from the
    # allocator's cache, with no cudaMalloc, which may wait for the device.
    StaticRows(reader.finders, 4, device)
    # The buffers' zero fill waits behind other work on the current stream;
    # the rows copied on the buffers' own stream land after it.
    torch.cuda._sleep(2_000_000_000)
    static = StaticRows(reader.finders, 4, device)
    static.stage(ring, 0, sizes)
    assert not ring.native.ready(0)  # the slot is busy until the copy is done
    for position, (values, times, offsets) in streams.items():
        staged = static.streams[position]
        assert values.shape[0] > 0
        for got, want in zip(staged, (values, times, offsets)):
            got = got[: want.shape[0]].cpu()
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), position


@requires_cuda
def test_a_graph_waits_for_the_staged_copy_and_marks_its_cut_at_each_launch():
    size = 1 << 22
    target = torch.zeros(size, dtype=torch.uint8, device="cuda")
    staging = torch.classes.robocache.RowStaging([target])
    slots = [[torch.full((size,), k, dtype=torch.uint8).pin_memory()] for k in (1, 2)]
    ring = torch.classes.robocache.RowRing(slots, torch.cuda.current_device())
    out = torch.empty_like(target)
    graph, side = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        graph.capture_begin()
        staging.await_copy()
        torch.cuda._sleep(50_000_000)  # the cut reads the target slowly
        out.copy_(target)
        staging.cut()
        graph.capture_end()
    torch.cuda.current_stream().wait_stream(side)
    # The first copy follows a cut marked behind another stream's work; the
    # graph's launch must wait for it, and the second copy for that
    # launch's cut.
    other = torch.cuda.Stream()
    with torch.cuda.stream(other):
        torch.cuda._sleep(100_000_000)
        staging.cut()
    ring.copy(0, staging, [size])
    graph.replay()
    ring.copy(1, staging, [size])
    first = out.clone()
    graph.replay()
    assert torch.equal(first.cpu(), torch.ones(size, dtype=torch.uint8))
    assert torch.equal(out.cpu(), torch.full((size,), 2, dtype=torch.uint8))


@requires_cuda
@pytest.mark.parametrize("verify", [False, True])
def test_batches_fed_natively_equal_the_store_in_memory(tmp_path, monkeypatch, verify):
    """Once every episode is checked (with ``verify=False`` there are no
    checks; else the feed takes over within the first epoch), the feed's
    thread waits for each batch's rows, hands a later batch over and copies
    the rows for the graphs; an iteration whose graphs a later one takes
    over stops its thread and goes on from the batches it holds."""
    store = make_store()
    store.save(tmp_path)
    modes = {"cam": "nearest", "joints": "linear", "force": "nearest"}
    kw = dict(device="cuda", shuffle=False, modes=modes, anchor="anchor", batch_size=2, seed=3,
              read_ahead=2)  # fmt: skip
    want = [{k: v.clone() for k, v in b.items()} for b in WindowSampler(store.to("cuda"), DELTAS,
                                                                       cuda_graph=False, **kw)]  # fmt: skip
    monkeypatch.setattr(mapped_module, "CHUNK_BATCHES", 4)  # batches of several chunks
    sampler = WindowSampler(EpisodeStore.load(tmp_path, verify=verify), DELTAS, **kw)
    found = []  # the batches whose chunk Python found, an iteration
    chunk = mapped_module.MappedAhead._chunk
    monkeypatch.setattr(
        mapped_module.MappedAhead, "_chunk", lambda self, b: found[-1].append(b) or chunk(self, b)
    )
    for _ in range(2):
        found.append([])
        torch.cuda._sleep(200_000_000)  # the host runs ahead of the copies
        same_batches([{k: v.clone() for k, v in b.items()} for b in sampler], want)
    # Python finds rows only while episodes wait for their checks; the feed
    # finds the rest (with checks, once every episode has passed).
    assert sampler.graphs and len(want) > 8 and found[1] == [] and bool(found[0]) == verify
    first = iter(sampler)
    got = [{k: v.clone() for k, v in next(first).items()} for _ in range(3)]
    ahead = sampler._batches._cursor_reader.mapped
    feed = ahead.reads.feed
    assert feed.feeding  # every episode is checked by now
    second = iter(sampler)  # takes the graphs over: the first goes on without them
    same_batches([{k: v.clone() for k, v in next(second).items()}], want[:1])
    assert not feed.feeding
    # The batch after the last one cut, handed over or copied for a graph
    # that was never launched, is kept for the first iteration.
    assert ahead.pending.get(3) is FED
    got += [{k: v.clone() for k, v in b.items()} for b in first]
    same_batches(got, want)
    del second
    # The feed's own errors.
    finders = sampler._batches.reader.finders
    ring = PinnedRing(finders, 2, 3, torch.device("cuda"))
    staging = sampler._batches.reader.static_rows().staging
    anchor = sampler._batches.anchor_host
    windows = [f.windows for f in finders]
    epoch = torch.classes.robocache.EpochRows(windows, torch.arange(8), *anchor, 0, 2, 4)
    other = torch.classes.robocache.EpochRows(windows * 2, torch.arange(8), *anchor, 0, 2, 4)
    with pytest.raises(ValueError, match=rf"epoch finds the rows of {2 * len(finders)} finders"):
        MappedFeed(finders, caller_reader(), ring, other)
    feed = MappedFeed(finders, caller_reader(), ring, epoch)
    with pytest.raises(ValueError, match=r"batch 4 is not in the epoch \(4 batches\)"):
        feed.native.hand(4)
    with pytest.raises(ValueError, match="batch 5 is not handed over"):
        feed.native.wait(5)
    with pytest.raises(ValueError, match="slot must be in 0..2; got 3"):
        ring.native.take(3)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        feed.native.start(0, staging, 0)
    with pytest.raises(ValueError, match=r"a ring of 3 slots is too small to read 2 batches ahead"):
        feed.native.start(0, staging, 2)
    with pytest.raises(ValueError, match="batch 0 is not fed: the feed is not started"):
        feed.native.staged(0)
    # A feed started with no read handed over stops on its first batch,
    # and never marks it staged: its marks stay where start put them.
    feed.start(1, staging, 1)
    with pytest.raises(ValueError, match="batch 1 is not handed over"):
        feed.native.staged(1)
    assert feed.native.marks().tolist() == [1, 1]
    assert feed.stop() == []


@requires_cuda
def test_a_batch_whose_copy_is_queued_is_taken_without_a_native_call(tmp_path, monkeypatch):
    """Where the feed's thread has queued a batch's copy before the batch is
    asked for, the training thread takes it by reading the feed's mark."""
    store = make_store()
    store.save(tmp_path)
    kw = dict(device="cuda", shuffle=False, anchor="anchor", batch_size=2, seed=3, read_ahead=2)
    want = [{k: v.clone() for k, v in b.items()} for b in WindowSampler(store.to("cuda"), DELTAS,
                                                                       cuda_graph=False, **kw)]  # fmt: skip
    sampler = WindowSampler(EpisodeStore.load(tmp_path, verify=False), DELTAS, **kw)
    staged = []
    start = MappedFeed.start

    def counted_start(self, i, staging, depth):
        start(self, i, staging, depth)
        self.native = CountedCalls(self.native, "staged", staged)

    monkeypatch.setattr(MappedFeed, "start", counted_start)
    got = []
    for b in sampler:
        got.append({k: v.clone() for k, v in b.items()})
        time.sleep(0.05)  # the feed's thread queues the next batch's copy meanwhile
    same_batches(got, want)
    # The first batch, where the feed starts, is waited for; none after it.
    assert sampler.graphs and len(want) > 8 and len(staged) == 1


@requires_cuda
def test_an_anchor_left_on_the_host_with_every_key_on_the_gpu(tmp_path):
    store = make_store()
    placed = store.place({"anchor": "cpu", "*": "cuda"})
    kw = dict(anchor="anchor", batch_size=4, seed=3, device="cuda", shuffle=False)
    reference = WindowSampler(store.to("cuda"), DELTAS, **kw)
    sampler = WindowSampler(placed, DELTAS, **kw)
    index = torch.tensor([0, 5, 11, 20])
    for _ in range(2):  # a graph, where one is captured, replays the new index
        same_batches([sampler.batch_at(index)], [reference.batch_at(index)])
        index = index.flip(0)
    same_batches([{k: v.clone() for k, v in b.items()} for b in sampler],
                 [{k: v.clone() for k, v in b.items()} for b in reference])  # fmt: skip


def test_a_shard_reads_its_own_rows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    modes = {"joints": "linear"}
    for rank in range(2):
        shard = EpisodeStore.load(tmp_path, shard=(rank, 2))
        whole = store.take_shard(rank, 2)
        assert shard.mapped_rows["cam"].rows == shard["cam"].values.shape[0]
        got = epoch(shard, modes, 2, rank=rank, world_size=2)
        want = epoch(whole, modes, 0, rank=rank, world_size=2)
        for a, b in zip(got, want):
            for key in ("cam", "joints", "cam_is_pad", "index", "frame_index"):
                assert torch.equal(a[key], b[key]), key


def os_threads(at_most=None):
    """This process's threads, native ones included (Linux), once at most
    ``at_most`` or after 5 s: a Python thread that was joined may still be
    ending in the OS for a moment."""
    deadline = time.monotonic() + 5
    while True:
        count = len(os.listdir("/proc/self/task"))
        if at_most is None or count <= at_most or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_the_threads_end_with_the_iteration(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    sampler = WindowSampler(mapped, DELTAS, anchor="anchor", batch_size=2, read_ahead=2)
    for _ in sampler:  # torch's own thread pools start once, here
        pass
    time.sleep(0.2)
    before = threading.active_count(), os_threads()
    iterator = iter(sampler)
    next(iterator)
    assert os_threads() >= before[1] + 7  # the reader's 7 native threads
    for _ in iterator:  # a whole epoch
        pass
    assert (threading.active_count(), os_threads(before[1])) == before
    for _ in sampler:  # a break
        break
    assert (threading.active_count(), os_threads(before[1])) == before
    with pytest.raises(KeyError):  # an exception in the loop body
        for batch in sampler:
            batch["nothing"]
    assert (threading.active_count(), os_threads(before[1])) == before


LEFT_OPEN = """
import sys
sys.path.insert(0, {tests!r})
from test_readahead import DELTAS
from robocache.data import EpisodeStore, WindowSampler

sampler = WindowSampler(EpisodeStore.load({folder!r}), DELTAS, anchor="anchor", batch_size=4,
                        read_ahead=2)


def endless():
    while True:
        yield from sampler


batches = endless()
next(batches)
"""


def test_an_iteration_left_open_at_exit_ends_cleanly(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    make_store().save(tmp_path)
    code = LEFT_OPEN.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Exception ignored" not in done.stderr, done.stderr[-2000:]


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


def test_a_batch_reads_only_rows_near_its_windows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    options = check_options(modes={"joints": "linear"})
    plans = plan_keys(mapped, DELTAS, options, torch.device("cpu"))
    (finder,) = [f for f in finders_of(mapped, plans) if f.keys[0].plan.key == "joints"]
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    edge = edge_tolerance_ns(1e-4)
    # Two batches of one window each: episode 0's, then episode 3's.
    index = torch.tensor([3, int(store["anchor"].offsets[3]) + 2])
    found, bounds = finder.rows_of(index, anchor, edge, 1)
    first = found[bounds[0] : bounds[1]]
    n = int(store["joints"].offsets[1])  # episode 0's rows
    assert 0 < first.numel() < n and int(first.max()) < n
    later = found[bounds[1] : bounds[2]]
    episode = store["joints"].offsets
    assert int(episode[3]) <= int(later.min()) and int(later.max()) < int(episode[4])
    reader = row_reader(2)
    offsets, times = finder.indexes(found, bounds)
    ticket, buffer, _ = finder.submit(reader, first, (offsets[0], times[: bounds[1]]), False)
    finder.wait(reader, ticket)
    ((values, times, offsets),) = finder.views(buffer, first.numel(), first.numel()).values()
    assert torch.equal(values, store["joints"].values[first])
    assert torch.equal(times, store["joints"].times[first])
    assert offsets[0] == 0 and offsets[1] == first.numel() and offsets[-1] == first.numel()
    reader.close()


def test_each_batch_of_a_chunk_has_its_own_index(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    plans = plan_keys(mapped, DELTAS, check_options(), torch.device("cpu"))
    (finder,) = [f for f in finders_of(mapped, plans) if f.keys[0].plan.key == "joints"]
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    # Batches of 3 anchors, the last one short; then batches with no rows.
    index = torch.randperm(
        int(store["anchor"].offsets[-1]), generator=torch.Generator().manual_seed(0)
    )
    found, bounds = finder.rows_of(index, anchor, edge_tolerance_ns(1e-4), 3)
    cases = [(found, bounds), (found[:0], [0, 0, 0])]
    for rows, bounds in cases:
        offsets, times = finder.indexes(rows, bounds)
        assert offsets.shape == (len(bounds) - 1, finder.offsets.numel())
        for b in range(len(bounds) - 1):  # its episodes' offsets in its own rows, its rows' times
            mine = rows[bounds[b] : bounds[b + 1]]
            assert torch.equal(offsets[b], torch.searchsorted(mine, finder.offsets))
            assert torch.equal(times[bounds[b] : bounds[b + 1]], finder.times[mine])


def test_rows_land_in_a_buffer_laid_out_for_more_rows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    deltas = {"joints": [-0.1, 0.0], "force": [-0.1, 0.0]}
    modes = {"joints": "linear", "force": "linear"}
    plans = plan_keys(mapped, deltas, check_options(modes=modes), torch.device("cpu"))
    (finder,) = finders_of(mapped, plans)  # the two keys share their rows
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    found, bounds = finder.rows_of(torch.tensor([3, 12]), anchor, edge_tolerance_ns(1e-4), 2)
    offsets, times = finder.indexes(found, bounds)
    count, room = found.numel(), found.numel() + 7
    buffer = torch.full((1 << 16,), 255, dtype=torch.uint8)  # room enough
    reader = row_reader(2)
    try:
        ticket, _, size = finder.submit(reader, found, (offsets[0], times), False, buffer, room)
        finder.wait(reader, ticket)
        streams = finder.views(buffer, room, count)
        assert sorted(streams) == sorted(k.position for k in finder.keys)
        ends = []
        for key in finder.keys:
            values, times, offsets = streams[key.position]
            stream = store[key.plan.key]
            assert torch.equal(values, stream.values[found]), key.plan.key
            assert torch.equal(times, stream.times[found])
            assert torch.equal(offsets, torch.searchsorted(found, stream.offsets))
            ends.append(values.data_ptr() + values.nbytes - buffer.data_ptr())
        # The size a copy takes covers every key's rows, and ends with the last one's.
        assert size == max(ends) and len(set(ends)) == len(ends)
        with pytest.raises(ValueError, match="do not fit"):
            finder.submit(reader, found, (offsets[0], times), False, buffer, count - 1)
    finally:
        reader.close()


def test_keys_of_one_timeline_and_rule_share_the_rows_found(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    deltas = {"joints": [-0.1, 0.0], "force": [-0.1, 0.0], "cam": [0.0]}
    options = check_options(modes={"joints": "linear", "force": "linear"})
    plans = plan_keys(mapped, deltas, options, torch.device("cpu"))
    groups = sorted(sorted(k.plan.key for k in f.keys) for f in finders_of(mapped, plans))
    assert ["force", "joints"] in groups and ["cam"] in groups
    options = check_options(modes={"joints": "linear", "force": "nearest"})
    plans = plan_keys(mapped, deltas, options, torch.device("cpu"))
    assert ["force"] in sorted(
        sorted(k.plan.key for k in f.keys) for f in finders_of(mapped, plans)
    )


SAVE_OVER = """
import sys
sys.path.insert(0, {tests!r})
from test_readahead import make_store
make_store(seed=1).save({folder!r})
"""


@pytest.mark.parametrize("saver", ["this process", "another process"])
def test_a_save_over_the_store_leaves_this_process_reading_its_own_file(tmp_path, saver):
    import subprocess
    import sys
    from pathlib import Path

    store = make_store()
    modes = {"joints": "linear", "force": "mean"}
    expected = epoch(store, modes, 0)
    for depth in (0, 2):
        store.save(tmp_path)
        mapped = EpisodeStore.load(tmp_path)
        sampler = WindowSampler(mapped, DELTAS, modes=modes, anchor="anchor", batch_size=4,
                                seed=3, key_age=True, read_ahead=depth)  # fmt: skip
        batches = iter(sampler)
        got = [{k: v.clone() for k, v in next(batches).items()}]
        if saver == "this process":
            make_store(seed=1).save(tmp_path)
        else:
            code = SAVE_OVER.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
            subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        assert not torch.equal(EpisodeStore.load(tmp_path)["joints"].values[:4],
                               store["joints"].values[:4])  # fmt: skip
        got += [{k: v.clone() for k, v in b.items()} for b in batches]
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            for key in ("cam", "joints", "index"):
                assert torch.equal(a[key], b[key]), (depth, key)
            assert torch.equal(a["force"].view(torch.uint8), b["force"].view(torch.uint8))


def test_a_store_file_pickled_is_the_file_loaded_or_an_error(tmp_path):
    import pickle

    store = make_store()
    store.save(tmp_path)
    file = EpisodeStore.load(tmp_path).mapped_rows["cam"].file
    copy = pickle.loads(pickle.dumps(file))
    assert copy.identity == file.identity and copy.fd != file.fd
    make_store(seed=1).save(tmp_path)
    with pytest.raises(LoaderError, match=r"store.safetensors: not the file this store was loaded"):
        pickle.loads(pickle.dumps(file))


CUT_WHILE_SAMPLING = """
import sys
sys.path.insert(0, {tests!r})
from fixtures.corrupt import truncate
from test_readahead import DELTAS
from robocache.data import EpisodeStore, LoaderError, WindowSampler

store = EpisodeStore.load({folder!r}, verify={verify})
sampler = WindowSampler(store, DELTAS, anchor="anchor", batch_size=4, read_ahead={depth},
                        device={device!r}, modes={{"joints": "linear"}})
next(iter(sampler))
truncate({path!r}, 0.1)
try:
    for batch in sampler:
        pass
    sampler.batch_at([0, 3])
except LoaderError as e:
    print(e)
    sys.exit(0)
sys.exit(3)
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
@pytest.mark.parametrize("depth", [0, 2])
@pytest.mark.parametrize("verify", [True, False])
def test_a_file_cut_while_sampling_is_an_error_naming_it_not_a_crash(
    tmp_path, device, depth, verify
):
    import subprocess
    import sys
    from pathlib import Path

    make_store().save(tmp_path)
    path = tmp_path / "store.safetensors"
    code = CUT_WHILE_SAMPLING.format(tests=str(Path(__file__).parent), folder=str(tmp_path),
                                     path=str(path), depth=depth, device=device,
                                     verify=verify)  # fmt: skip
    # A SIGBUS (a fault of the mapping) would kill the process with -7.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "store.safetensors: the file ends inside the values of" in done.stdout or (
        "store.safetensors: the file ends inside a stream's values" in done.stdout
    ), done.stdout


def test_a_sampler_s_repr_shows_what_it_holds_ahead(tmp_path):
    make_store().save(tmp_path)
    sampler = WindowSampler(EpisodeStore.load(tmp_path), DELTAS, anchor="anchor", batch_size=4,
                            read_ahead=3)  # fmt: skip
    text = repr(sampler)
    assert text.startswith(
        f"WindowSampler(a store, {len(sampler)} batches of 4 an epoch, device=cpu"
    )
    assert (
        "read from the file 3 batches ahead, the rows of at most 4 batches in host memory" in text
    )
    assert "'cam'" in text and "'joints'" in text
