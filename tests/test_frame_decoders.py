"""The decoder seam: FrameDecoding's choice of backend (on any machine), and
the nvimgcodec GPU decoder against Pillow's decode of the same bytes (on a
CUDA device with the extra robocache[nvimgcodec]): chroma 4:4:4, 4:2:2 and
4:2:0, grey frames, odd and tiny sizes, and corrupt frames. A sampler's
JPEG batches on the GPU: test_sampler_jpeg_gpu.py."""

import io
import os
import warnings

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from fixtures.images import camera_frames, jpeg  # noqa: E402
from frame_checks import assert_gpu_pixels_close, pil_frames, requires_gpu_decoder  # noqa: E402
from PIL import Image  # noqa: E402

import robocache  # noqa: E402
from robocache.data.frames import (  # noqa: E402
    FrameDecoding,
    FrameEncoding,
    decoders,  # noqa: E402
)
from robocache.data.frames.decoders import nvimgcodec  # noqa: E402

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


@requires_gpu_decoder
@pytest.mark.parametrize(
    "hardware_share,host_share,batched,kernels",
    [
        (0.0, 0.0, True, True),
        (0.0, 0.0, True, False),
        (0.0, 0.0, False, False),
        (0.5, 0.0, True, True),
        (0.5, 0.0, True, False),
        (1.0, 0.0, True, True),
        (0.0, 1.0, True, True),
        (0.0, 0.5, True, True),
        (0.25, 0.5, True, False),
        (0.5, 0.5, True, True),
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
    height, width, channels, subsampling, hardware_share, host_share, batched, kernels
):
    frames = _frames(12, height, width, channels)
    blobs = _blobs(frames, subsampling)
    encoding = FrameEncoding("jpeg", (height, width, channels), torch.uint8)
    decoder = nvimgcodec.GpuDecoder(
        "cuda", hardware_share, batched=batched, host_share=host_share, kernels=kernels
    )
    assert decoder.batched == batched
    assert decoder.kernels == (kernels and hardware_share + host_share < 1.0)
    got = decoder.decode(blobs, encoding).cpu()
    expected = _pillow(blobs, channels)
    assert got.shape == expected.shape
    assert_gpu_pixels_close(got, expected, hardware_share, host_share, kernels)


@requires_gpu_decoder
def test_frames_the_kernels_do_not_decode_go_to_nvjpeg_in_the_same_batch():
    frames = _frames(6, 32, 40, 3)
    blobs = _blobs(frames, 2)
    blobs[1] = jpeg(frames[1].numpy(), subsampling=2, quality=90, progressive=True)
    encoding = FrameEncoding("jpeg", (32, 40, 3), torch.uint8)
    got = nvimgcodec.GpuDecoder("cuda", 0.0, host_share=0.0).decode(blobs, encoding).cpu()
    expected = _pillow(blobs, 3)
    assert torch.equal(got[[0, 2, 3, 4, 5]], expected[[0, 2, 3, 4, 5]])  # the kernels'
    assert_gpu_pixels_close(got[1:2], expected[1:2], 0.0, 0.0, kernels=False)  # nvJPEG's


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
        assert_gpu_pixels_close(out.cpu(), _pillow(blobs, 3), 0.0, 1.0)


@requires_gpu_decoder
@pytest.mark.parametrize(
    "hardware_share,host_share,kernels",
    [(0.0, 0.0, True), (0.0, 0.0, False), (1.0, 0.0, True), (0.0, 1.0, True)],
)
@pytest.mark.parametrize("damage", ["truncated", "not a jpeg"])
def test_a_corrupt_frame_names_itself_and_the_next_batch_decodes(
    hardware_share, host_share, kernels, damage
):
    frames = _frames(6, 32, 40, 3)
    blobs = _blobs(frames, 2)
    encoding = FrameEncoding("jpeg", (32, 40, 3), torch.uint8)
    decoder = nvimgcodec.GpuDecoder("cuda", hardware_share, host_share=host_share, kernels=kernels)
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
        assert_gpu_pixels_close(got, _pillow(blobs, 3), hardware_share, host_share, kernels)


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
    assert_gpu_pixels_close(got, _pillow(blobs, 3), 0.0)


@requires_gpu_decoder
@pytest.mark.parametrize("host_share,kernels", [(0.0, True), (0.0, False), (1.0, True)])
def test_a_frame_of_another_size_than_its_streams_is_an_error(host_share, kernels):
    blobs = _blobs(_frames(2, 32, 40, 3), 0)
    encoding = FrameEncoding("jpeg", (32, 48, 3), torch.uint8)
    decoder = nvimgcodec.GpuDecoder("cuda", host_share=host_share, kernels=kernels)
    with pytest.raises(
        ValueError, match="frame 0: .* the image is 32x40; its frames' shape says 32x48"
    ):
        decoder.decode(blobs, encoding)
