"""robocache's own JPEG decoder on the host (torch.classes.robocache.JpegDecoder
into host memory, the steps its CUDA kernels share) against Pillow's decode
of the same bytes, libjpeg-turbo's: every pixel equal, for chroma 4:4:4,
4:2:2, 4:2:0 and 4:4:0, grey frames, odd and tiny sizes, restart markers,
optimized Huffman tables and RGB frames; what it does not decode, frames of
another size, and corrupt frames, each named. The CUDA kernels against
this decode: test_jpeg_kernels_gpu.py."""

import io

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
pytest.importorskip("simplejpeg", reason="the frames extra: pip install robocache[frames]")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from fixtures.images import camera_frames, jpeg, jpeg_sampled  # noqa: E402
from PIL import Image  # noqa: E402

import robocache  # noqa: E402, F401  (loads the classes)
from robocache.data.frames.encoding import pack_images  # noqa: E402

SIZES = [(48, 64), (37, 53), (1, 1), (2, 2), (3, 5), (1, 7), (9, 2), (17, 9), (16, 16), (96, 96)]


def decode(blobs, height, width, channels, device="cpu"):
    """(index, why, pixels) of robocache's decode of `blobs` into (n, H, W, C)."""
    values, byte_offsets = pack_images(blobs)
    out = torch.full((len(blobs), height, width, channels), 7, dtype=torch.uint8, device=device)
    index, why = torch.classes.robocache.JpegDecoder().decode(
        values, byte_offsets, torch.arange(len(blobs)), out
    )
    return index, why, out.cpu()


def pillow(blobs, channels):
    mode = "L" if channels == 1 else "RGB"
    frames = [np.asarray(Image.open(io.BytesIO(bytes(b))).convert(mode)) for b in blobs]
    return torch.from_numpy(np.stack(frames)).reshape(len(blobs), *frames[0].shape[:2], channels)


def noisy_frames(n, height, width, seed=0):
    """Camera-like frames with more noise than the fixtures': more of each
    block's coefficients are not zero, and more codes are long."""
    frames = camera_frames(n, height, width, seed=seed).float()
    g = torch.Generator().manual_seed(seed + 1)
    return (frames + torch.randn(frames.shape, generator=g) * 20).clamp(0, 255).to(torch.uint8)


def assert_pillows(blobs, height, width, channels):
    index, why, got = decode(blobs, height, width, channels)
    assert index == -1, why
    expected = pillow(blobs, channels)
    diff = (got.int() - expected.int()).abs()
    assert int(diff.max()) == 0, f"{int((diff > 0).sum())} values off, by up to {int(diff.max())}"


@pytest.mark.parametrize("height,width", SIZES)
@pytest.mark.parametrize("sampling", ["444", "422", "420", "440"])
@pytest.mark.parametrize("quality", [50, 95])
def test_colour_frames_are_pillows_pixels(height, width, sampling, quality):
    frames = noisy_frames(3, height, width)
    blobs = [jpeg_sampled(f.numpy(), sampling, quality) for f in frames]
    assert_pillows(blobs, height, width, 3)


@pytest.mark.parametrize("height,width", SIZES)
@pytest.mark.parametrize("channels", [1, 3])
def test_grey_frames_are_pillows_pixels_in_one_channel_or_three(height, width, channels):
    frames = noisy_frames(3, height, width)[..., 0]
    blobs = [jpeg_sampled(f.numpy(), "Gray") for f in frames]
    assert_pillows(blobs, height, width, channels)


@pytest.mark.parametrize(
    "options",
    [
        dict(optimize=True),
        dict(restart_marker_blocks=1),
        dict(restart_marker_blocks=5),
        dict(restart_marker_rows=1, subsampling=2),
        dict(keep_rgb=True),
    ],
    ids=lambda o: ",".join(o),
)
@pytest.mark.parametrize("height,width", [(37, 53), (96, 96), (8, 8)])
def test_pillows_other_ways_of_writing_are_its_pixels(options, height, width):
    frames = noisy_frames(3, height, width)
    try:
        blobs = [jpeg(f.numpy(), quality=90, **options) for f in frames]
    except (TypeError, OSError) as e:  # an older Pillow without the option
        pytest.skip(f"this Pillow does not write {options}: {e}")
    if "restart_marker_blocks" in options or "restart_marker_rows" in options:
        assert b"\xff\xdd" in blobs[0]  # a restart interval was written
    assert_pillows(blobs, height, width, 3)


@pytest.mark.parametrize(
    "write,why",
    [
        (lambda f: jpeg(f, progressive=True), "not a sequential Huffman-coded JPEG"),
        (lambda f: jpeg_sampled(f, "411"), "sampling factor is above 2"),
        (lambda f: _cmyk(f), "other than 1 or 3 components"),
        (lambda f: b"\x00" * 64, "does not start as a JPEG does"),
        (lambda f: jpeg(f)[:90], "ends"),
    ],
    ids=["progressive", "4:1:1", "cmyk", "not a jpeg", "cut in its header"],
)
def test_a_frame_it_does_not_decode_is_named_with_why(write, why):
    frames = noisy_frames(3, 32, 40).numpy()
    blobs = [jpeg(f) for f in frames]
    blobs[1] = write(frames[1])
    index, said, _ = decode(blobs, 32, 40, 3)
    assert index == 1 and why in said, (index, said)


def _cmyk(frame):
    buffer = io.BytesIO()
    Image.fromarray(frame).convert("CMYK").save(buffer, format="JPEG")
    return buffer.getvalue()


def test_a_frame_of_another_size_or_colour_into_grey_is_named():
    frames = noisy_frames(2, 32, 40).numpy()
    index, why, _ = decode([jpeg(f) for f in frames], 32, 48, 3)
    assert (index, why) == (0, "the image is 32x40; its frames' shape says 32x48")
    index, why, _ = decode([jpeg(f) for f in frames], 32, 40, 1)
    assert (index, why) == (0, "a colour frame for a grey stream")


def test_a_frame_cut_short_in_its_scan_is_named():
    blobs = [jpeg(f, quality=90) for f in noisy_frames(4, 32, 40).numpy()]
    blobs[2] = blobs[2][: len(blobs[2]) * 2 // 3]
    index, why, _ = decode(blobs, 32, 40, 3)
    assert index == 2 and "ends before its last block" in why, why


def test_corrupt_scans_are_named_or_decode_to_pillows_pixels():
    # Bytes changed inside the entropy-coded data: libjpeg-turbo decodes
    # many such frames with a warning (which simplejpeg raises); robocache
    # names each frame it cannot decode exactly as libjpeg-turbo does
    # without one, and never reads past the data.
    frame = noisy_frames(1, 32, 48).numpy()[0]
    data = jpeg(frame, subsampling=2, quality=90)
    scan = data.index(b"\xff\xda") + 14
    rng = np.random.default_rng(0)
    named = decoded = 0
    for _ in range(120):
        bad = bytearray(data)
        for at in rng.integers(scan, len(data) - 2, 3):
            bad[at] = rng.integers(0, 256)
        index, why, got = decode([bytes(bad)], 32, 48, 3)
        if index == 0:
            assert why.startswith(("its ", "a restart marker")), why
            named += 1
            continue
        assert torch.equal(got, pillow([bytes(bad)], 3))
        decoded += 1
    assert named > 0 and decoded > 0, (named, decoded)


def test_batches_of_many_frames_decode_each_into_its_place():
    frames = noisy_frames(40, 24, 31, seed=3)
    blobs = [jpeg(f.numpy(), subsampling=i % 3, quality=60 + i) for i, f in enumerate(frames)]
    values, byte_offsets = pack_images(blobs)
    rows = torch.tensor([5, 0, 39, 5, 17])
    out = torch.zeros((5, 24, 31, 3), dtype=torch.uint8)
    index, why = torch.classes.robocache.JpegDecoder().decode(values, byte_offsets, rows, out)
    assert index == -1, why
    assert torch.equal(out, pillow([blobs[r] for r in rows.tolist()], 3))


def test_its_arguments_are_checked():
    decoder = torch.classes.robocache.JpegDecoder()
    values, byte_offsets = pack_images([jpeg(noisy_frames(1, 8, 8).numpy()[0])])
    out = torch.zeros((1, 8, 8, 3), dtype=torch.uint8)
    for args, match in [
        (
            (values.float(), byte_offsets, torch.tensor([0]), out),
            "values must be the frames' bytes",
        ),
        ((values, byte_offsets, torch.tensor([1]), out), "row 1 is not a frame of the 1"),
        ((values, byte_offsets, torch.tensor([0]), out[..., :2]), "out must be a contiguous"),
        ((values, byte_offsets[:1] + 5, torch.tensor([0]), out), "row 0 is not a frame"),
    ]:
        with pytest.raises(ValueError, match=match):
            decoder.decode(*args)


@pytest.mark.parametrize(
    "data",
    [b"\xff\xd8\xff\xda\x00\x02", b"\xff\xd8\xff\xc4\x00\x02\xff\xda", b"\xff\xd8" + b"\xff" * 30],
    ids=["a scan with no header", "an empty table", "fill bytes only"],
)
def test_frames_cut_in_their_headers_are_named_and_not_read_past(data):
    index, why, _ = decode([data], 8, 8, 3)
    assert index == 0 and why, why


def test_a_restart_marker_after_the_last_block_is_skipped_as_libjpeg_does():
    frames = noisy_frames(2, 16, 16).numpy()
    try:
        blobs = [jpeg(f, quality=90, restart_marker_blocks=1) for f in frames]
    except (TypeError, OSError) as e:
        pytest.skip(f"this Pillow does not write restart markers: {e}")
    extra = [b[:-2] + b"\xff\xd3\xff\xd9" for b in blobs]  # RST3, then the end
    index, why, got = decode(extra, 16, 16, 3)
    assert index == -1, why
    assert torch.equal(got, pillow(blobs, 3))
    junk = [b[:-2] + b"\x12\x34\xff\xd9" for b in blobs]  # bytes left: named
    index, why, _ = decode(junk, 16, 16, 3)
    assert index == 0 and "does not end after its last block" in why, why


def _restart_frames():
    frames = noisy_frames(2, 32, 48, seed=4).numpy()
    try:
        blobs = [jpeg(f, quality=90, subsampling=2, restart_marker_blocks=1) for f in frames]
    except (TypeError, OSError) as e:
        pytest.skip(f"this Pillow does not write restart markers: {e}")
    scan = blobs[0].index(b"\xff\xda")
    rst = blobs[0].index(b"\xff\xd1", scan)  # the second interval's end
    return blobs, rst


def test_bytes_before_a_restart_marker_are_named_though_libjpeg_skips_them():
    # libjpeg-turbo skips the bytes with a warning ("extraneous bytes before
    # marker"): Pillow gives pixels; robocache names the frame corrupt, as it
    # does bytes left after the last block.
    blobs, rst = _restart_frames()
    junk = blobs[0][:rst] + b"\x12\x34" + blobs[0][rst:]
    assert pillow([junk], 3).shape == (1, 32, 48, 3)
    index, why, _ = decode([blobs[1], junk], 32, 48, 3)
    assert index == 1 and "restart marker" in why and "interval's data" in why, why


def test_fill_bytes_before_a_restart_marker_decode_as_pillow_does():
    blobs, rst = _restart_frames()
    filled = blobs[0][:rst] + b"\xff\xff\xff" + blobs[0][rst:]
    index, why, got = decode([filled, blobs[1]], 32, 48, 3)
    assert index == -1, why
    assert torch.equal(got, pillow(blobs, 3))
