"""load_rlds on RLDS shards written here with the tfrecord package's writer
(tf.train.Example episodes) and a TFDS features.json."""

import io

import numpy as np
import pytest
import torch

pytest.importorskip("tfrecord", reason="the rlds extra: pip install robocache[rlds]")
pytest.importorskip("PIL", reason="the rlds extra: pip install robocache[rlds]")

from fixtures.images import jpeg  # noqa: E402
from fixtures.rlds import FPS, write_rlds  # noqa: E402
from frame_checks import every_frame  # noqa: E402
from PIL import Image  # noqa: E402

from robocache.data import LoaderError, WindowSampler, load_rlds  # noqa: E402

IMAGE = "observation/image"


def write_jpeg_rlds(root, truncate=None):
    """write_rlds with camera-like JPEG frames (4:2:0, as RT-X datasets hold);
    returns the JPEG bytes of every step in episode order. ``truncate``: the
    index of a frame cut short by 20 bytes."""
    blobs = []

    def encode(image):
        blob = jpeg(image, subsampling=2, quality=90)
        if len(blobs) == truncate:
            blob = blob[:-20]
        blobs.append(blob)
        return blob

    write_rlds(root, encode=encode, smooth=True, seed=0)
    return blobs


def test_rlds_round_trip_is_exact(tmp_path):
    episodes = write_rlds(tmp_path)
    store = load_rlds(tmp_path, fps=FPS, progress=False)
    assert set(store.keys()) == {
        "observation/image",
        "observation/state",
        "action",
        "reward",
        "is_first",
    }
    assert store.tasks == ["task 0", "task 1", "task 2"]
    for key in store.keys():
        expected = np.concatenate([ep[key] for ep in episodes])
        assert torch.equal(store[key].values, torch.from_numpy(expected)), key
        for e, ep in enumerate(episodes):
            a, z = store[key].offsets[e], store[key].offsets[e + 1]
            assert store[key].times[a:z].tolist() == [
                round(k * 1e9 / FPS) for k in range(len(ep["action"]))
            ]


def test_rlds_images_decode_onto_a_device(tmp_path, device):
    write_rlds(tmp_path)
    on_host = load_rlds(tmp_path, fps=FPS, progress=False)
    decoded = load_rlds(tmp_path, fps=FPS, progress=False, decode_on=device, device=device)
    assert decoded.device.type == device
    for key in on_host.keys():  # PNG is lossless: the same pixels as PIL's
        assert torch.equal(decoded[key].values.cpu(), on_host[key].values), key


@pytest.mark.parametrize(
    "subsampling, smooth", [(0, False), (2, True)], ids=["4:4:4 noise", "4:2:0 smooth"]
)
def test_rlds_jpeg_decodes_on_a_device_as_pil_does(tmp_path, device, subsampling, smooth):
    """JPEG (what RT-X datasets hold) decodes through the frame decoders: on a
    GPU with the nvimgcodec extra, nvJPEG's CUDA decoder's pixels, up to 3
    grey levels from libjpeg-turbo's; else PIL's on the host."""
    write_rlds(tmp_path, encode=lambda im: jpeg(im, subsampling), smooth=smooth)
    on_host = load_rlds(tmp_path, fps=FPS, progress=False)
    decoded = load_rlds(tmp_path, fps=FPS, progress=False, decode_on=device, device=device)
    assert decoded.device.type == device
    key = "observation/image"
    ours, pil = decoded[key].values.cpu(), on_host[key].values
    assert ours.shape == pil.shape and ours.dtype == torch.uint8
    diff = (ours.int() - pil.int()).abs()
    assert diff.max() <= 3 and diff.float().mean() <= 0.1, (diff.max(), diff.float().mean())
    assert torch.equal(decoded[key].times.cpu(), on_host[key].times)


def test_rlds_bad_datasets(tmp_path):
    write_rlds(tmp_path / "ok")
    with pytest.raises(LoaderError, match=r"no step feature 'observation/wrist'"):
        load_rlds(tmp_path / "ok", fps=FPS, keys=["observation/wrist"], progress=False)
    with pytest.raises(LoaderError, match=r"no \*-test.tfrecord-\* shards"):
        load_rlds(tmp_path / "ok", fps=FPS, split="test", progress=False)
    shard = tmp_path / "ok" / "demo-train.tfrecord-00001-of-00002"
    shard.write_bytes(shard.read_bytes()[:-40])
    with pytest.raises(LoaderError, match=r"demo-train.tfrecord-00001-of-00002"):
        load_rlds(tmp_path / "ok", fps=FPS, progress=False)


def test_rlds_jpeg_frames_are_kept_byte_for_byte(tmp_path):
    blobs = write_jpeg_rlds(tmp_path)
    raw = load_rlds(tmp_path, fps=FPS, progress=False)  # decoded by PIL
    kept = load_rlds(tmp_path, fps=FPS, frames="jpeg", progress=False)
    stream = kept[IMAGE]
    assert stream.encoding.codec == "jpeg" and stream.sample_shape == (8, 10, 3)
    assert bytes(stream.values.numpy()) == b"".join(blobs)
    assert stream.byte_offsets.tolist() == np.cumsum([0] + [len(b) for b in blobs]).tolist()
    assert torch.equal(every_frame(kept, IMAGE), raw[IMAGE].values)
    for name in ("mean", "std", "min", "max"):  # from the one decode at ingest
        assert torch.equal(stream.stats[name], raw[IMAGE].stats[name]), name
    deltas = {IMAGE: [-0.2, 0.0, 0.2], "action": [0.0, 0.2]}
    for a, b in zip(
        WindowSampler(raw, deltas, batch_size=4, shuffle=False),
        WindowSampler(kept, deltas, batch_size=4, shuffle=False),
    ):
        assert all(torch.equal(a[k], b[k]) for k in a)
    for key in raw.keys() - {IMAGE}:
        assert torch.equal(kept[key].values, raw[key].values), key
    # Asked for PNG: decoded here and encoded as PNG, which keeps PIL's pixels.
    as_png = load_rlds(tmp_path, fps=FPS, frames={IMAGE: "png"}, progress=False)
    assert as_png[IMAGE].encoding.codec == "png"
    assert torch.equal(every_frame(as_png, IMAGE), raw[IMAGE].values)


def test_rlds_jpeg_frames_resized_are_encoded_again(tmp_path):
    blobs = write_jpeg_rlds(tmp_path)
    raw = load_rlds(tmp_path, fps=FPS, resize=(4, 6), progress=False)
    resized = load_rlds(tmp_path, fps=FPS, frames="jpeg", resize=(4, 6), progress=False)
    stream = resized[IMAGE]
    assert stream.encoding.codec == "jpeg" and stream.sample_shape == (4, 6, 3)
    assert raw[IMAGE].sample_shape == (4, 6, 3) and raw[IMAGE].encoding is None
    bounds = stream.byte_offsets.tolist()
    data = bytes(stream.values.numpy())
    assert len(bounds) == len(blobs) + 1 and data != b"".join(blobs)
    for a, b in zip(bounds[:-1], bounds[1:]):
        with Image.open(io.BytesIO(data[a:b])) as image:
            assert image.format == "JPEG" and image.size == (6, 4)
    diff = (every_frame(resized, IMAGE).float() - raw[IMAGE].values.float()).abs()
    assert diff.mean() < 4, diff.mean()  # JPEG's loss on the resized frames


def test_rlds_corrupt_jpeg_kept_encoded_is_an_error_naming_it(tmp_path):
    write_jpeg_rlds(tmp_path, truncate=5)  # shard 1's first episode (the third), its step 1
    shard = "demo-train.tfrecord-00001-of-00002"
    with pytest.raises(
        LoaderError,
        match=rf"{shard}, episode 0: .*stream '{IMAGE}', frame 1: the jpeg frame does not decode",
    ):
        load_rlds(tmp_path, fps=FPS, frames="jpeg", progress=False)
    with pytest.raises(  # decoded here: the loader's own error
        LoaderError, match=rf"{shard}, episode 0, key '{IMAGE}', frame 1: cannot decode"
    ):
        load_rlds(tmp_path, fps=FPS, progress=False)
