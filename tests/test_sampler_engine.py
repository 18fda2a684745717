"""How WindowSampler makes its batches: the defaults chosen per store (CUDA
graphs, prefetch on a side stream), graphs fed from the device (the epoch's
order behind a cursor), several iterations at once, and no host
synchronization while default batches are drawn, capture included."""

import gc
import weakref

import pytest
import torch
from conftest import requires_cuda

from robocache.data import EpisodeStore, Mixture, WindowSampler

MS = 10**6
DELTAS = {"action": [0.0, 0.1, 0.2], "state": [-0.1, 0.0], "cam": [-0.1, 0.0]}


def make_store(lengths=(9, 1, 14, 5, 23), seed=0):
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for n in lengths:
        t = torch.arange(n) * 100 * MS
        episodes.append(
            {
                "action": (torch.randn(n, 7, generator=g), t),
                "state": (torch.randn(2 * n, 3, generator=g), torch.arange(2 * n) * 50 * MS),
                "cam": (torch.randint(0, 256, (n, 6, 8, 3), generator=g, dtype=torch.uint8), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, progress=False)


def cloned(batches):
    return [{k: v.clone() for k, v in b.items()} for b in batches]


def assert_same(got, expected):
    assert len(got) == len(expected)
    for i, (a, b) in enumerate(zip(got, expected)):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]), (i, key)


def test_on_the_host_nothing_is_prefetched_or_graphed():
    sampler = WindowSampler(make_store(), DELTAS, batch_size=4)
    assert sampler.prefetch == 0 and sampler.graphs is None
    with pytest.raises(ValueError, match="prefetch must be an int >= 0; got -1"):
        WindowSampler(make_store(), DELTAS, prefetch=-1)


@requires_cuda
def test_defaults_graph_every_gpu_store_and_prefetch_only_batches_made_on_the_host():
    store = make_store()
    gpu = WindowSampler(store.to("cuda"), DELTAS, batch_size=4)
    assert gpu.prefetch == 0 and gpu.graphs is not None
    pinned = store.place({"cam": "pinned", "*": "cuda"})
    assert WindowSampler(pinned, DELTAS, batch_size=4).prefetch == 0
    assert WindowSampler(pinned, DELTAS, batch_size=4, prefetch=1).prefetch == 1
    mixture = Mixture([(store.to("cuda"), 0.5), (make_store(seed=1).to("cuda"), 0.5)])
    packed = WindowSampler(mixture, DELTAS, batch_size=4)
    assert packed.packed and packed.prefetch == 0 and packed.graphs is not None
    # Cut store by store, the draws' copies to the device run on the side stream.
    apart = Mixture([(store.to("cuda"), 0.5), (make_store(seed=1).to("cuda"), 0.5)], pack=False)
    assert WindowSampler(apart, DELTAS, batch_size=4).prefetch == 1


@requires_cuda
@pytest.mark.parametrize("prefetch", [0, 1, 2])
@pytest.mark.parametrize("placement", ["cuda", {"cam": "pinned", "*": "cuda"}])
def test_graphs_fed_from_the_device_cut_the_eager_batches(placement, prefetch):
    store = make_store().place(placement)
    kw = dict(batch_size=5, seed=3, modes={"state": "linear"}, key_age=True, prefetch=prefetch)
    eager = WindowSampler(store, DELTAS, cuda_graph=False, **kw)
    graphed = WindowSampler(store, DELTAS, **kw)
    for epoch in range(3):  # an epoch's last batch is smaller: a ring of its own
        eager.set_epoch(epoch)
        graphed.set_epoch(epoch)
        assert_same(cloned(graphed), cloned(eager))
    sizes, n = graphed.graphs, graphed.num_anchors
    assert n % 5 and set(sizes) == {("cursor", 5), ("cursor", n % 5)}
    assert_same(cloned(graphed), cloned(eager))
    assert graphed.graphs == sizes  # the next epoch replays the same graphs


@requires_cuda
def test_two_iterations_at_once_each_draw_their_own_order():
    store = make_store().to("cuda")
    sampler = WindowSampler(store, DELTAS, batch_size=4, seed=1)
    expected = cloned(WindowSampler(store, DELTAS, batch_size=4, seed=1, cuda_graph=False))
    first, second = iter(sampler), iter(sampler)
    got_first, got_second = [], []
    for a, b in zip(first, second):
        got_first += cloned([a])
        got_second += cloned([b])
    assert_same(got_first, expected)
    assert_same(got_second, expected)


@requires_cuda
def test_a_batch_kept_while_the_next_are_drawn_never_changes():
    sampler = WindowSampler(make_store().to("cuda"), DELTAS, batch_size=4, seed=2)
    expected = cloned(WindowSampler(sampler.store, DELTAS, batch_size=4, seed=2, cuda_graph=False))
    kept = list(sampler)  # every batch held: the ring grows past its 2 graphs
    assert_same(cloned(kept), expected)
    assert sampler.graphs[("cursor", 4)] > 2


@requires_cuda
def test_default_batches_are_drawn_without_a_host_sync_from_the_first():
    """A new sampler's first epoch (its graphs captured then), for a store on
    the GPU, a pinned one (prefetched on the side stream) and a packed mixture."""
    store = make_store()
    samplers = [
        WindowSampler(store.to("cuda"), DELTAS, batch_size=4),
        WindowSampler(
            store.place({"cam": "pinned", "*": "cuda"}), DELTAS, batch_size=4, prefetch=1
        ),
        WindowSampler(
            Mixture([(store.to("cuda"), 0.7), (make_store(seed=1).to("cuda"), 0.3)]),
            DELTAS,
            batch_size=4,
        ),
    ]
    expected = [cloned(s) for s in samplers]  # a first epoch, outside the check
    fresh = [
        WindowSampler(store.to("cuda"), DELTAS, batch_size=4),
        WindowSampler(
            store.place({"cam": "pinned", "*": "cuda"}), DELTAS, batch_size=4, prefetch=1
        ),
        WindowSampler(samplers[2].mixture, DELTAS, batch_size=4),
    ]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [[{k: v.clone() for k, v in b.items()} for b in s] for s in fresh]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    for a, b in zip(got, expected):
        assert_same(a, b)


@requires_cuda
def test_a_prefetched_batch_is_ready_on_the_callers_stream_under_load():
    """The caller's stream is kept busy while batches are drawn ahead on the
    sampler's: each batch still equals the eager one when the caller reads it."""
    store = make_store().place({"cam": "pinned", "*": "cuda"})
    eager = cloned(WindowSampler(store, DELTAS, batch_size=4, cuda_graph=False, prefetch=0))
    sampler = WindowSampler(store, DELTAS, batch_size=4, prefetch=2)
    got = []
    for batch in sampler:
        torch.cuda._sleep(2_000_000)  # the caller's step
        got.append({k: v.clone() for k, v in batch.items()})
    assert_same(got, eager)


@requires_cuda
def test_batches_kept_from_batch_at_keep_every_field_their_own():
    store = make_store().to("cuda")
    graphed = WindowSampler(store, DELTAS, batch_size=4)
    eager = WindowSampler(store, DELTAS, batch_size=4, cuda_graph=False)
    index = [torch.arange(i, i + 4) for i in range(0, 40, 4)]
    kept = [graphed.batch_at(i) for i in index]
    assert_same(kept, [eager.batch_at(i) for i in index])


@requires_cuda
def test_graphs_are_captured_while_garbage_holds_another_samplers_graphs():
    """An abandoned sampler's graphs, collected during a new capture, would
    end it (cudaErrorStreamCaptureInvalidated): the capture collects first."""
    import gc

    store = make_store().to("cuda")
    expected = cloned(WindowSampler(store, DELTAS, batch_size=4, cuda_graph=False))
    thresholds = gc.get_threshold()
    gc.disable()
    try:
        old = WindowSampler(store, DELTAS, batch_size=4)
        batches = iter(old)
        next(batches)
        cycle = [batches, old]
        cycle.append(cycle)  # garbage only a collection frees
        del batches, old, cycle
        gc.set_threshold(1)
        gc.enable()
        got = cloned(WindowSampler(store, DELTAS, batch_size=4))
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
    assert_same(got, expected)


@requires_cuda
def test_drop_last_graphs_cut_only_whole_batches():
    store = make_store().to("cuda")
    kw = dict(batch_size=5, seed=4, drop_last=True, anchor="action")
    graphed = WindowSampler(store, DELTAS, **kw)
    assert graphed.num_anchors % 5  # a last part that drop_last leaves out
    eager = cloned(WindowSampler(store, DELTAS, cuda_graph=False, **kw))
    got = cloned(graphed)
    assert len(got) == graphed.num_anchors // 5 and {b["index"].numel() for b in got} == {5}
    assert_same(got, eager)


@requires_cuda
def test_an_error_making_a_batch_ahead_comes_after_the_batches_before_it():
    from robocache.data.sampler.pipeline import SideStream

    def make(i):
        if i == 3:
            raise ValueError("batch 3 fails")
        return {"i": torch.full((1,), i, device="cuda")}

    got = []
    with pytest.raises(ValueError, match="batch 3 fails"):
        for batch in SideStream(torch.device("cuda"), 2).run(make, range(6)):
            got.append(int(batch["i"]))
    assert got == [0, 1, 2]


def test_shared_marks_read_and_write_the_native_tensor_in_place_and_keep_it_alive():
    from robocache.data.sampler.marks import shared_marks

    marks = torch.tensor([3, 7], dtype=torch.int64)
    first, second = shared_marks(marks)
    marks[1] = 11
    second.value = second.value + 1
    first.value = 5
    assert marks.tolist() == [5, 12]
    alive = weakref.ref(marks)
    del marks
    gc.collect()
    assert alive() is not None and alive() is first.owner is second.owner
    assert (first.value, second.value) == (5, 12)
    for wrong in (torch.zeros(2, dtype=torch.int32), torch.zeros(4, dtype=torch.int64)[::2]):
        with pytest.raises(TypeError, match="contiguous int64 CPU tensor"):
            shared_marks(wrong)
