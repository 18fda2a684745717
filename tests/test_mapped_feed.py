"""Mapped keys' rows handed to the GPU: read ahead into a bounded ring of
pinned buffers, fed natively, cut with and without CUDA graphs; equal to
the windows of the store in memory on the GPU."""

import time

import pytest
import torch
from conftest import requires_cuda
from helpers import CountedCalls
from readahead_cases import DELTAS, epoch, make_store, same_batches

import robocache.data.sampler.graphs as graphs_module
import robocache.data.sampler.mapped as mapped_module
from robocache.data import EpisodeStore, WindowSampler
from robocache.data.sampler.buffers import PinnedRing, StaticRows
from robocache.data.sampler.feed import FED, MappedFeed
from robocache.data.sampler.mapped import MappedReads
from robocache.data.store.rows import caller_reader, row_reader


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
