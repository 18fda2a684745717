"""The decoder seam: FrameDecoding's choice of backend (on any machine), and
the nvimgcodec GPU decoder against Pillow's decode of the same bytes (on a
CUDA device with the extra robocache[nvimgcodec]): chroma 4:4:4, 4:2:2 and
4:2:0, grey frames, odd and tiny sizes, corrupt frames, and a sampler's
JPEG batches, from pinned, mapped and host bytes, under load and without a
host sync."""

import io
import os
import time
import warnings

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from fixtures.images import camera_frames, jpeg  # noqa: E402
from frame_checks import pil_frames  # noqa: E402
from helpers import CountedCalls  # noqa: E402
from PIL import Image  # noqa: E402

import robocache  # noqa: E402
from robocache.data import EpisodeStore, WindowSampler  # noqa: E402
from robocache.data.frames import (  # noqa: E402
    FrameDecoding,
    FrameEncoding,
    decoders,  # noqa: E402
)
from robocache.data.frames.decoders import nvimgcodec  # noqa: E402

MS = 10**6
WHY_NOT = nvimgcodec.unavailable()
requires_gpu_decoder = pytest.mark.skipif(
    WHY_NOT is not None, reason=f"the GPU frame decoder: {WHY_NOT}"
)


# -- the choice of backend ----------------------------------------------------------


def test_frame_decoding_checks_its_arguments():
    for bad, match in [
        (dict(backend="gpu"), "backend must be one of"),
        (dict(idct="slow"), "idct must be 'accurate' or 'fast'"),
        (dict(backend="nvimgcodec", idct="fast"), "idct='fast' decodes on the host"),
        (dict(threads=0), "threads must be an int >= 1"),
        (dict(hardware_share=1.5), r"hardware_share must be in \[0, 1\]"),
        (dict(hardware_share=True), r"hardware_share must be in \[0, 1\]"),
        (dict(host_share=-0.1), r"host_share must be in \[0, 1\]"),
        (
            dict(hardware_share=0.5, host_share=0.75),
            r"hardware_share \+ host_share must be at most",
        ),
    ]:
        with pytest.raises(ValueError, match=match):
            FrameDecoding(**bad)


def test_the_gpu_decoder_checks_its_shares_before_it_starts():
    for hardware_share, host_share, match in [
        (0.5, 0.75, r"GpuDecoder: hardware_share \+ host_share must be at most 1"),
        (-0.5, None, r"GpuDecoder: hardware_share must be in \[0, 1\]"),
        (0.0, 1.5, r"GpuDecoder: host_share must be in \[0, 1\]"),
        (True, None, r"GpuDecoder: hardware_share must be in \[0, 1\]"),
    ]:
        with pytest.raises(ValueError, match=match):
            nvimgcodec.GpuDecoder("cuda", hardware_share, host_share=host_share)


def test_the_host_shares_threads_leave_two_cores_to_training(monkeypatch):
    for usable, expected in [(16, 14), (3, 1), (2, 1), (1, 1)]:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid, n=usable: set(range(n)),
                            raising=False)  # fmt: skip
        assert nvimgcodec.default_threads() == expected


def test_auto_decodes_on_the_host_off_the_gpu_and_for_png_or_the_fast_idct():
    auto = FrameDecoding()
    assert auto.backend_for("jpeg", "cpu") == "host"
    assert auto.backend_for("png", "cuda") == "host"
    assert FrameDecoding(idct="fast").backend_for("jpeg", "cuda") == "host"
    assert FrameDecoding(backend="host").backend_for("jpeg", "cuda") == "host"


def test_auto_without_the_extra_warns_once_and_decodes_on_the_host(monkeypatch):
    monkeypatch.setattr(nvimgcodec, "unavailable", lambda: "a test says so")
    monkeypatch.setattr(nvimgcodec, "_warned", set())
    with pytest.warns(UserWarning, match=r"decode on the host, as a test says so.*nvimgcodec\]"):
        assert FrameDecoding().backend_for("jpeg", "cuda") == "host"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert FrameDecoding().backend_for("jpeg", "cuda:0") == "host"  # said once
    with pytest.raises(RuntimeError, match="backend='nvimgcodec' cannot run: a test says so"):
        FrameDecoding(backend="nvimgcodec").backend_for("jpeg", "cuda")


def test_a_build_without_cuda_kernels_says_so(monkeypatch):
    monkeypatch.setattr(nvimgcodec.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(nvimgcodec, "_has_native_decoder", lambda: False)
    assert nvimgcodec.unavailable() == "this build of robocache has no CUDA kernels"
    if not torch.cuda.is_available() or not robocache.is_cuda_available():
        monkeypatch.undo()
        monkeypatch.setattr(nvimgcodec.torch.cuda, "is_available", lambda: True)
        assert nvimgcodec.unavailable() == "this build of robocache has no CUDA kernels"


def test_auto_falls_back_to_the_host_where_the_gpu_decoder_does_not_start(monkeypatch):
    monkeypatch.setattr(nvimgcodec, "unavailable", lambda: None)
    monkeypatch.setattr(nvimgcodec, "_warned", set())

    def refuse(*args, **kwargs):
        raise RuntimeError("a test's refusal")

    monkeypatch.setattr(nvimgcodec, "GpuDecoder", refuse)
    with pytest.warns(UserWarning, match="the GPU decoder did not start .a test's refusal"):
        assert decoders.decoder_for(FrameDecoding(), "jpeg", "cuda").backend == "host"
    with pytest.raises(RuntimeError, match="a test's refusal"):
        decoders.decoder_for(FrameDecoding(backend="nvimgcodec"), "jpeg", "cuda")


def test_decode_tables_gather_a_slot_named_on_the_host_or_by_the_step_on_the_device():
    from types import SimpleNamespace

    from robocache.data.sampler.decode import DecodeTables

    def key(position, shape):
        encoding = SimpleNamespace(shape=shape)
        return SimpleNamespace(position=position, encoding=encoding,
                               decoder=SimpleNamespace(device=torch.device("cpu")))  # fmt: skip

    keys = [key(1, (2, 3, 3)), key(4, (1, 2, 1))]
    tables = DecodeTables(keys, batch_size=3, windows=[2, 1], depth=1)
    assert tables.slots == 2 + nvimgcodec.SLOTS_BEHIND
    generator = torch.Generator().manual_seed(0)
    for table, position in zip(tables.tables, tables.positions):
        assert table.shape[:2] == (tables.slots, 1 + position.shape[1])
        assert not table[:, 0].any()  # the frame of "no sample"
        table[:, 1:] = torch.randint(0, 256, table[:, 1:].shape, generator=generator).byte()
        position.copy_(torch.randint(0, table.shape[1], position.shape, generator=generator))
    for base, step in [(b, s) for b in (0, 7) for s in range(2 * tables.slots)]:
        # An iteration's batch `step`, the queue's step base + step.
        tables.base.fill_(base)
        slot = (base + step) % tables.slots
        on_device = tables.gather(tables.slot_of(torch.tensor([step])), 2)
        on_host = tables.gather(slot, 2)
        assert on_device.keys() == on_host.keys() == {1, 4}
        for k, (table, position) in zip((1, 4), zip(tables.tables, tables.positions)):
            W = tables.windows[(1, 4).index(k)]
            expected = table[slot][position[slot, : 2 * W]].view(2, W, *table.shape[2:])
            assert torch.equal(on_host[k], expected)
            assert torch.equal(on_device[k], expected)


def test_an_epochs_parts_are_its_batches_anchors_sliced_when_asked_for():
    from robocache.data.sampler.order import EpochParts

    anchors = torch.arange(10) * 3
    parts = EpochParts(anchors, batch_size=4, count=3)
    assert [p.tolist() for p in parts] == [[0, 3, 6, 9], [12, 15, 18, 21], [24, 27]]
    assert [parts.size(i) for i in range(len(parts))] == [4, 4, 2]
    with pytest.raises(IndexError, match="batch 3 of an epoch of 3"):
        parts[3]
    dropped = EpochParts(anchors, batch_size=4, count=2)  # drop_last: the last 2 unread
    assert dropped.anchors.tolist() == anchors[:8].tolist()
    assert [dropped.size(i) for i in range(2)] == [4, 4]


def test_the_gpu_backend_asked_for_batches_on_the_host_is_an_error(monkeypatch):
    monkeypatch.setattr(nvimgcodec, "unavailable", lambda: None)
    with pytest.raises(ValueError, match="decodes onto a CUDA device; the batches go to cpu"):
        FrameDecoding(backend="nvimgcodec").backend_for("jpeg", "cpu")


# -- the GPU decoder ------------------------------------------------------------------


def _frames(n, height, width, channels, seed=0):
    frames = camera_frames(n, height, width, seed=seed)
    return frames[..., :1].contiguous() if channels == 1 else frames


def _blobs(frames, subsampling):
    if frames.shape[-1] == 1:
        return [jpeg(f[..., 0].numpy(), quality=90) for f in frames]
    return [jpeg(f.numpy(), subsampling=subsampling, quality=90) for f in frames]


def _pillow(blobs, channels):
    """Pillow's decode of each JPEG, (n, H, W, channels) uint8."""
    if channels == 3:
        return pil_frames(blobs)
    grey = [np.asarray(Image.open(io.BytesIO(b)).convert("L")) for b in blobs]
    return torch.from_numpy(np.stack(grey)).unsqueeze(-1)


MEAN_TOLERANCE = 0.1


def _tolerance(hardware_share, host_share):
    """The host's share is libjpeg-turbo's pixels, as Pillow's; the hardware
    engines' are those but for a grey level in upsampled chroma; nvJPEG's
    CUDA decoder's are up to 3 grey levels off in colour, in few pixels."""
    if host_share == 1.0:
        return 0
    return 1 if hardware_share + host_share == 1.0 else 3


def _assert_pixels_close(got, expected, hardware_share, host_share=0.0):
    diff = (got.int() - expected.int()).abs()
    assert diff.max() <= _tolerance(hardware_share, host_share), int(diff.max())
    assert diff.double().mean() <= MEAN_TOLERANCE, float(diff.double().mean())


@requires_gpu_decoder
@pytest.mark.parametrize(
    "hardware_share,host_share,batched",
    [
        (0.0, 0.0, True),
        (0.0, 0.0, False),
        (0.5, 0.0, True),
        (1.0, 0.0, True),
        (0.0, 1.0, True),
        (0.0, 0.5, True),
        (0.25, 0.5, True),
        (0.5, 0.5, True),
    ],
)
@pytest.mark.parametrize(
    "height,width,channels,subsampling",
    [
        (48, 64, 3, 0),  # 4:4:4
        (48, 64, 3, 1),  # 4:2:2
        (48, 64, 3, 2),  # 4:2:0
        (37, 53, 3, 2),  # odd sizes
        (1, 1, 3, 2),  # tiny
        (3, 5, 3, 0),
        (40, 56, 1, 0),  # grey
        (17, 9, 1, 0),
    ],
)
def test_gpu_pixels_are_pillows_within_the_backends_tolerance(
    height, width, channels, subsampling, hardware_share, host_share, batched
):
    frames = _frames(12, height, width, channels)
    blobs = _blobs(frames, subsampling)
    encoding = FrameEncoding("jpeg", (height, width, channels), torch.uint8)
    decoder = nvimgcodec.GpuDecoder("cuda", hardware_share, batched=batched, host_share=host_share)
    assert decoder.batched == batched
    got = decoder.decode(blobs, encoding).cpu()
    expected = _pillow(blobs, channels)
    assert got.shape == expected.shape
    _assert_pixels_close(got, expected, hardware_share, host_share)


@requires_gpu_decoder
def test_the_host_shares_pinned_memory_is_reused_only_once_copied():
    # Batches decoded behind a busy CUDA stream: each batch's pixels wait in
    # pinned memory for their copy, and the next batches must not overwrite
    # them there.
    encoding = FrameEncoding("jpeg", (32, 40, 3), torch.uint8)
    decoder = nvimgcodec.GpuDecoder("cuda", 0.0, host_share=1.0)
    batches = [_blobs(_frames(6, 32, 40, 3, seed=k), 2) for k in range(4)]
    decoder.decode(batches[0], encoding)
    torch.cuda.synchronize()
    torch.cuda._sleep(50_000_000)  # the copies queue behind this
    outs = [decoder.decode(blobs, encoding) for blobs in batches]
    for out, blobs in zip(outs, batches):
        _assert_pixels_close(out.cpu(), _pillow(blobs, 3), 0.0, 1.0)


@requires_gpu_decoder
@pytest.mark.parametrize("hardware_share,host_share", [(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)])
@pytest.mark.parametrize("damage", ["truncated", "not a jpeg"])
def test_a_corrupt_frame_names_itself_and_the_next_batch_decodes(
    hardware_share, host_share, damage
):
    frames = _frames(6, 32, 40, 3)
    blobs = _blobs(frames, 2)
    encoding = FrameEncoding("jpeg", (32, 40, 3), torch.uint8)
    decoder = nvimgcodec.GpuDecoder("cuda", hardware_share, host_share=host_share)
    bad = list(blobs)
    bad[3] = {
        "truncated": bad[3][: len(bad[3]) // 3],
        "not a jpeg": b"\x00" * 64,
    }[damage]
    with pytest.raises(ValueError, match="frame 3: the jpeg frame does not decode"):
        decoder.decode(bad, encoding, name=lambda i: f"frame {i}")
    torch.cuda.synchronize()  # no sticky CUDA error
    for _ in range(2):  # the next batches decode, as exactly as before
        got = decoder.decode(blobs, encoding).cpu()
        _assert_pixels_close(got, _pillow(blobs, 3), hardware_share, host_share)


@requires_gpu_decoder
def test_a_batched_decode_that_does_not_load_warns_and_nvimgcodec_decodes(monkeypatch):
    library, _ = nvimgcodec.library_paths()
    missing = "/nonexistent/libnvjpeg.so.13"
    monkeypatch.setattr(nvimgcodec, "library_paths", lambda: (library, missing))
    monkeypatch.setattr(nvimgcodec, "_decoders", {})
    monkeypatch.setattr(nvimgcodec, "_warned", set())
    with pytest.warns(UserWarning, match="nvJPEG's batched decode did not load") as said:
        decoder = nvimgcodec.GpuDecoder("cuda", 0.0, host_share=0.0)
    assert missing in str(said[0].message)
    assert not decoder.batched
    blobs = _blobs(_frames(4, 32, 40, 3), 2)
    got = decoder.decode(blobs, FrameEncoding("jpeg", (32, 40, 3), torch.uint8)).cpu()
    _assert_pixels_close(got, _pillow(blobs, 3), 0.0)


@requires_gpu_decoder
@pytest.mark.parametrize("host_share", [0.0, 1.0])
def test_a_frame_of_another_size_than_its_streams_is_an_error(host_share):
    blobs = _blobs(_frames(2, 32, 40, 3), 0)
    encoding = FrameEncoding("jpeg", (32, 48, 3), torch.uint8)
    with pytest.raises(
        ValueError, match="frame 0: .* the image is 32x40; its frames' shape says 32x48"
    ):
        nvimgcodec.GpuDecoder("cuda", host_share=host_share).decode(blobs, encoding)


# -- the sampler's JPEG batches on the GPU ------------------------------------------


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
    host_share=1.0 - nvimgcodec.HARDWARE_SHARE,
):
    assert len(gpu_batches) == len(host_batches)
    for g, h in zip(gpu_batches, host_batches):
        assert g.keys() == h.keys()
        for name in g:
            if name == "cam":
                _assert_pixels_close(g[name], h[name], hardware_share, host_share)
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
    got = []
    for batch in sampler:
        got.append({k: v.cpu() for k, v in batch.items()})
        time.sleep(0.05)  # the queue lands the next batches meanwhile
    _assert_close_to_host(got, host)
    assert len(queues) == 1 and len(got) > 4
    # The first batch may be waited for; every later one had landed.
    assert len(taken) <= 1
    assert queues[0].native.landed().item() >= len(got)


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
