"""A sampler's JPEG batches decoded on the GPU (a CUDA device with the extra
robocache[nvimgcodec]): equal to the host's decode within the decoder's
tolerance, from pinned, mapped and host bytes, with and without CUDA
graphs, under load and without a host sync; the queue that decodes them
ahead, its steps taken by its mark, running on from one epoch into the
next; and a corrupt frame named."""

import time

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import torch  # noqa: E402
from fixtures.images import camera_frames  # noqa: E402
from frame_checks import assert_gpu_pixels_close, requires_gpu_decoder  # noqa: E402
from helpers import CountedCalls  # noqa: E402

from robocache.data import EpisodeStore, WindowSampler  # noqa: E402
from robocache.data.frames import FrameDecoding  # noqa: E402
from robocache.data.frames.decoders import nvimgcodec  # noqa: E402

MS = 10**6


def _jpeg_store(lengths=(30, 1, 17, 0, 24), size=(40, 56)):
    episodes = []
    for e, n in enumerate(lengths):
        t = torch.arange(n) * 100 * MS
        episodes.append(
            {
                "cam": (camera_frames(n, *size, seed=e), t),
                "state": (torch.randn(n, 3, generator=torch.Generator().manual_seed(e)), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, frames="jpeg", progress=False)


DELTAS = {"cam": [-0.2, 0.0, 0.1], "state": [0.0, 0.1]}


def _batches(sampler):
    return [{k: v.cpu().clone() for k, v in b.items()} for b in sampler]


def _assert_close_to_host(
    gpu_batches,
    host_batches,
    hardware_share=nvimgcodec.HARDWARE_SHARE,
    host_share=nvimgcodec.HOST_SHARE,
):
    assert len(gpu_batches) == len(host_batches)
    for g, h in zip(gpu_batches, host_batches):
        assert g.keys() == h.keys()
        for name in g:
            if name == "cam":
                assert_gpu_pixels_close(g[name], h[name], hardware_share, host_share)
            else:
                assert torch.equal(g[name], h[name]), name


@requires_gpu_decoder
@pytest.mark.parametrize("cuda_graph", [False, None])
@pytest.mark.parametrize("place", ["pinned", "cpu", "mapped"])
def test_sampler_jpeg_batches_on_the_gpu_match_the_host_decode(tmp_path, place, cuda_graph):
    _jpeg_store().save(tmp_path)
    store = EpisodeStore.load(tmp_path, placement={"cam": place, "*": "cuda"})
    kw = dict(batch_size=8, seed=1, device="cuda")
    gpu = WindowSampler(store, DELTAS, cuda_graph=cuda_graph, **kw)
    assert gpu.decoders == {"cam": "nvimgcodec"}
    # Decoded ahead by the queue, wherever the bytes lie: no side stream by
    # default; decoded when asked for (read_ahead=0), one batch made ahead,
    # since the windows are cut on the GPU wherever the anchors lie.
    assert gpu.prefetch == 0
    asked = WindowSampler(store, DELTAS, read_ahead=0, cuda_graph=False, **kw)
    assert asked.prefetch == 1
    # By default the batches replay CUDA graphs, which gather the decoded frames.
    assert (gpu.graphs is not None) == (cuda_graph is None)
    host = WindowSampler(store, DELTAS, decoding=FrameDecoding(backend="host"), cuda_graph=False,
                         **kw)  # fmt: skip
    expected = _batches(host)
    for epoch in range(2):
        gpu.set_epoch(epoch)
        host.set_epoch(epoch)
        _assert_close_to_host(_batches(gpu), _batches(host))
    _assert_close_to_host([{k: v.cpu() for k, v in gpu.batch_at(range(5)).items()}],
                          [{k: v.cpu() for k, v in host.batch_at(range(5)).items()}])  # fmt: skip
    assert expected


@requires_gpu_decoder
@pytest.mark.parametrize("cuda_graph", [False, None])
@pytest.mark.parametrize("hardware_share,host_share", [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)])
def test_sampler_jpeg_batches_draw_without_a_host_sync_and_under_load(
    hardware_share, host_share, cuda_graph
):
    store = _jpeg_store().place({"cam": "pinned", "*": "cuda"})
    kw = dict(batch_size=8, seed=3)
    decoding = FrameDecoding(backend="host")
    host_sampler = WindowSampler(store, DELTAS, decoding=decoding, cuda_graph=False, **kw)
    host = []
    for epoch in range(2):
        host_sampler.set_epoch(epoch)
        host += _batches(host_sampler)
    decoding = FrameDecoding(hardware_share=hardware_share, host_share=host_share)
    sampler = WindowSampler(store, DELTAS, decoding=decoding, cuda_graph=cuda_graph, **kw)
    busy = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = []
        for epoch in range(2):  # the queue runs on from the first epoch into the second
            sampler.set_epoch(epoch)
            for batch in sampler:
                for _ in range(4):  # the caller's stream stays busy while batches decode ahead
                    busy = busy @ busy
                    busy /= busy.norm()
                got.append({k: v.clone() for k, v in batch.items()})
    finally:
        torch.cuda.set_sync_debug_mode("default")
    got = [{k: v.cpu() for k, v in b.items()} for b in got]
    _assert_close_to_host(got, host, hardware_share, host_share)


@requires_gpu_decoder
@pytest.mark.parametrize("cuda_graph", [False, None])
def test_a_batch_whose_frames_have_landed_is_taken_without_a_call_into_the_queue(
    monkeypatch, cuda_graph
):
    """The queue's threads mark the steps whose frames are in device memory;
    the training thread takes such a step by reading the mark."""
    store = _jpeg_store().place({"cam": "pinned", "*": "cuda"})
    kw = dict(batch_size=4, seed=4, shuffle=False)
    host = _batches(WindowSampler(store, DELTAS, decoding=FrameDecoding(backend="host"),
                                  cuda_graph=False, **kw))  # fmt: skip
    taken, queues = [], []
    make_queue = nvimgcodec.GpuDecoder.queue

    def counted_queue(self, *args, **kwargs):
        queues.append(CountedCalls(make_queue(self, *args, **kwargs), "take", taken))
        return queues[-1]

    monkeypatch.setattr(nvimgcodec.GpuDecoder, "queue", counted_queue)
    sampler = WindowSampler(store, DELTAS, cuda_graph=cuda_graph, **kw)
    assert (sampler.graphs is not None) == (cuda_graph is None)
    batches, got = iter(sampler), []
    for i in range(len(sampler)):
        if i:  # batch i asked for once its frames have landed
            landed = queues[0].native.landed()
            deadline = time.monotonic() + 30
            while landed.item() <= i and time.monotonic() < deadline:
                time.sleep(0.001)
            assert landed.item() > i, f"batch {i}'s frames did not land in 30 s"
        got.append({k: v.cpu() for k, v in next(batches).items()})
    _assert_close_to_host(got, host)
    assert len(queues) == 1 and len(got) > 4
    # The first batch may be waited for; every later one is taken by the mark.
    assert len(taken) <= 1


@requires_gpu_decoder
def test_two_iterations_at_once_decode_into_tables_of_their_own():
    store = _jpeg_store().place({"cam": "pinned", "*": "cuda"})
    kw = dict(batch_size=4, seed=5)
    decoding = FrameDecoding(backend="host")
    expected = _batches(WindowSampler(store, DELTAS, decoding=decoding, cuda_graph=False, **kw))
    sampler = WindowSampler(store, DELTAS, **kw)
    assert sampler.graphs is not None
    for _ in range(2):  # the second time, the tables and graphs are those the first kept
        first, second = iter(sampler), iter(sampler)
        got_first, got_second = [], []
        for a, b in zip(first, second):  # the second takes the graphs over from the first
            got_first.append({k: v.cpu() for k, v in a.items()})
            got_second.append({k: v.cpu() for k, v in b.items()})
        _assert_close_to_host(got_first, expected)
        _assert_close_to_host(got_second, expected)
        del first, second


@requires_gpu_decoder
@pytest.mark.parametrize("cuda_graph", [False, None])
def test_the_queue_runs_on_into_the_epoch_guessed_to_follow(cuda_graph):
    store = _jpeg_store().place({"cam": "pinned", "*": "cuda"})
    kw = dict(batch_size=8, seed=2)
    host = WindowSampler(store, DELTAS, decoding=FrameDecoding(backend="host"), cuda_graph=False,
                         **kw)  # fmt: skip
    gpu = WindowSampler(store, DELTAS, cuda_graph=cuda_graph, **kw)
    batches, count = gpu._batches, len(gpu)

    def run(epoch, stop=None):
        """The epoch's batches (the first ``stop``) against the host's; then
        (epoch guessed next, its batches' first step in the queue, the queue)."""
        gpu.set_epoch(epoch)
        host.set_epoch(epoch)
        batches_of = iter(gpu)
        got = [{k: v.cpu() for k, v in b.items()} for _, b in zip(range(stop or count), batches_of)]
        batches_of.close()
        _assert_close_to_host(got, _batches(host)[: len(got)])
        following = batches._following
        return following and (following[0], following[2].base, following[2].decoding)

    guessed, base, queue = run(0)
    assert (guessed, base) == (1, count)  # by default the next
    guessed, base, same = run(1)
    assert same is queue and (guessed, base) == (2, 2 * count)  # ran on into epoch 1
    guessed, base, queue = run(1)
    assert queue is not same and (guessed, base) == (1, count)  # epoch 1 again: a new queue
    guessed, base, same = run(1)
    assert same is queue and (guessed, base) == (1, 2 * count)
    guessed, base, queue = run(4)
    assert queue is not same and (guessed, base) == (5, count)
    assert run(5, stop=2) is None  # an epoch left early: its queue closed
    assert not queue.tables.busy
    assert run(5)[:2] == (5, count)  # the same epoch as the last iteration's
    if cuda_graph is None:
        assert gpu.graphs is not None
    # An order that does not shuffle is every epoch's.
    still = WindowSampler(store, DELTAS, shuffle=False, cuda_graph=cuda_graph, **kw)
    first = _batches(still)
    still.set_epoch(7)
    _assert_close_to_host(_batches(still), first)
    assert still._batches._following[2].base == 2 * len(still)


@requires_gpu_decoder
def test_a_corrupt_frame_in_an_epoch_names_key_episode_and_frame():
    store = _jpeg_store(lengths=(6, 9))
    stream = store["cam"]
    row = 6 + 4  # episode 1, frame 4
    begin = int(stream.byte_offsets[row])
    stream.values[begin : begin + 4] = 0
    placed = store.place({"cam": "pinned", "*": "cuda"})
    sampler = WindowSampler(placed, {"cam": [0.0]}, batch_size=4, shuffle=False, cuda_graph=False)
    with pytest.raises(ValueError, match=r"key 'cam', episode 1, frame 4 \(row 10\).*jpeg"):
        list(sampler)
    torch.cuda.synchronize()
    assert sampler.batch_at([0, 1, 2])["cam"].shape == (3, 1, 40, 56, 3)  # others decode
