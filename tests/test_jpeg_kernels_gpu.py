"""robocache's CUDA JPEG kernels (torch.classes.robocache.JpegDecoder into
device memory) against its host decode of the same bytes, which
test_jpeg_decoder.py holds to Pillow's pixels: every pixel equal, for
chroma 4:4:4, 4:2:2, 4:2:0 and 4:4:0, grey frames, odd and tiny sizes,
restart markers and batches of frames of several sizes; corrupt frames
named, with no sticky CUDA error; the decode ordered on the caller's CUDA
stream under load. Needs a CUDA device, not the nvimgcodec extra."""

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
pytest.importorskip("simplejpeg", reason="the frames extra: pip install robocache[frames]")

import torch  # noqa: E402
from conftest import requires_cuda  # noqa: E402
from fixtures.images import jpeg, jpeg_sampled  # noqa: E402
from test_jpeg_decoder import SIZES, decode, noisy_frames, pillow  # noqa: E402

from robocache.data.frames.encoding import pack_images  # noqa: E402

pytestmark = requires_cuda


def assert_kernels_decode_as_the_host(blobs, height, width, channels):
    index, why, on_host = decode(blobs, height, width, channels)
    assert index == -1, why
    index, why, on_gpu = decode(blobs, height, width, channels, device="cuda")
    assert index == -1, why
    assert torch.equal(on_gpu, on_host)
    assert torch.equal(on_gpu, pillow(blobs, channels))


@pytest.mark.parametrize("height,width", SIZES)
@pytest.mark.parametrize("sampling", ["444", "422", "420", "440", "Gray"])
def test_the_kernels_decode_as_the_host_and_pillow(height, width, sampling):
    frames = noisy_frames(4, height, width)
    if sampling == "Gray":
        frames = frames[..., :1]
    blobs = [jpeg_sampled(f.numpy(), sampling, 60 + 10 * i) for i, f in enumerate(frames)]
    assert_kernels_decode_as_the_host(blobs, height, width, 1 if sampling == "Gray" else 3)


@pytest.mark.parametrize(
    "options",
    [dict(restart_marker_blocks=3), dict(optimize=True), dict(keep_rgb=True, subsampling=0)],
    ids=lambda o: ",".join(o),
)  # fmt: skip
def test_restart_markers_optimized_tables_and_rgb_frames_on_the_gpu(options):
    try:
        blobs = [jpeg(f.numpy(), quality=90, **{"subsampling": 2, **options})
                 for f in noisy_frames(6, 61, 37)]  # fmt: skip
    except (TypeError, OSError) as e:
        pytest.skip(f"this Pillow does not write {options}: {e}")
    assert_kernels_decode_as_the_host(blobs, 61, 37, 3)


def test_a_batch_of_512_camera_frames_of_224_squared():
    blobs = [jpeg(f.numpy(), subsampling=2, quality=90) for f in noisy_frames(512, 224, 224)]
    assert_kernels_decode_as_the_host(blobs, 224, 224, 3)


def test_a_corrupt_frame_is_named_and_the_next_batch_decodes():
    frames = noisy_frames(8, 32, 40)
    blobs = [jpeg(f.numpy(), subsampling=2, quality=90) for f in frames]
    cut, flipped = list(blobs), bytearray(blobs[5])
    cut[3] = cut[3][: len(cut[3]) // 2]
    index, why, _ = decode(cut, 32, 40, 3, device="cuda")
    assert index == 3 and "ends before its last block" in why, (index, why)
    # Bytes changed in the scan: named, or decoded as on the host.
    scan = bytes(flipped).index(b"\xff\xda") + 14
    for at in range(scan, len(flipped) - 2, 7):
        flipped[at] ^= 0x5A
    bad = list(blobs)
    bad[5] = bytes(flipped)
    host = decode(bad, 32, 40, 3)
    index, why, got = decode(bad, 32, 40, 3, device="cuda")
    assert (index, why) == host[:2]
    if index < 0:
        assert torch.equal(got, host[2])
    torch.cuda.synchronize()  # no sticky CUDA error
    assert_kernels_decode_as_the_host(blobs, 32, 40, 3)


def test_the_decode_follows_the_work_queued_on_the_current_stream():
    # The output is written on the caller's stream after a long kernel there
    # and a fill of it: the frames, not the fill, are what comes out.
    blobs = [jpeg(f.numpy(), subsampling=2, quality=90) for f in noisy_frames(16, 48, 64)]
    values, byte_offsets = pack_images(blobs)
    expected = pillow(blobs, 3)
    decoder = torch.classes.robocache.JpegDecoder()
    side = torch.cuda.Stream()
    for _ in range(3):
        out = torch.empty((16, 48, 64, 3), dtype=torch.uint8, device="cuda")
        with torch.cuda.stream(side):  # another stream keeps the GPU busy
            torch.cuda._sleep(20_000_000)
        torch.cuda._sleep(20_000_000)
        out.fill_(3)
        index, why = decoder.decode(values, byte_offsets, torch.arange(16), out)
        assert index == -1, why
        assert torch.equal(out.cpu(), expected)


def test_mutated_frames_fail_or_decode_as_on_the_host():
    # Bytes changed, cut or inserted (restart markers and fill bytes among
    # them) anywhere in a frame: the kernels name the same frame for the same
    # reason as the host decode, or give its pixels.
    import random

    try:
        blobs = [
            jpeg(f.numpy(), quality=90, subsampling=i % 3, restart_marker_blocks=2 * (i % 2))
            for i, f in enumerate(noisy_frames(4, 32, 40, seed=7))
        ]
    except (TypeError, OSError) as e:
        pytest.skip(f"this Pillow does not write restart markers: {e}")
    rng = random.Random(0)
    outcomes = set()
    for trial in range(120):
        bad = bytearray(blobs[trial % 4])
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(bad))
            kind = rng.randrange(4)
            if kind == 0:
                bad[at] ^= 1 << rng.randrange(8)
            elif kind == 1:
                del bad[at : at + rng.randint(1, 8)]
            elif kind == 2:
                bad[at:at] = bytes([0xFF, 0xD0 + rng.randrange(8)])
            else:
                bad[at:at] = b"\xff\xff"
        batch = [blobs[(trial + 1) % 4], bytes(bad)]
        host = decode(batch, 32, 40, 3)
        index, why, got = decode(batch, 32, 40, 3, device="cuda")
        assert (index, why) == host[:2], trial
        if index < 0:
            assert torch.equal(got, host[2]), trial
        outcomes.add(index)
    assert outcomes == {-1, 1}, outcomes  # some decoded, some named
    torch.cuda.synchronize()  # no sticky CUDA error
