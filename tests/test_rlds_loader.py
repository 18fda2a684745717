"""load_rlds on RLDS shards written here with the tfrecord package's writer
(tf.train.Example episodes) and a TFDS features.json."""

import numpy as np
import pytest
import torch

pytest.importorskip("tfrecord", reason="the rlds extra: pip install robocache[rlds]")
pytest.importorskip("PIL", reason="the rlds extra: pip install robocache[rlds]")

from fixtures.images import jpeg  # noqa: E402
from fixtures.rlds import FPS, write_rlds  # noqa: E402

from robocache.data import LoaderError, load_rlds  # noqa: E402


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


def test_rlds_images_decode_with_torchvision_on_a_device(tmp_path, device):
    pytest.importorskip("torchvision")
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
    """JPEG (what RT-X datasets hold) takes torchvision's batched decode_jpeg,
    nvJPEG on a GPU. JPEG decoders may round their inverse transforms
    differently: pixels agree with PIL's within a few levels, and on average
    within one. Their chroma upsampling differs too (PIL's is smoothed), so
    4:2:0 frames are compared on camera-like frames: on pixel noise that
    difference alone reaches tens of levels."""
    pytest.importorskip("torchvision")
    write_rlds(tmp_path, encode=lambda im: jpeg(im, subsampling), smooth=smooth)
    on_host = load_rlds(tmp_path, fps=FPS, progress=False)
    decoded = load_rlds(tmp_path, fps=FPS, progress=False, decode_on=device, device=device)
    assert decoded.device.type == device
    key = "observation/image"
    ours, pil = decoded[key].values.cpu(), on_host[key].values
    assert ours.shape == pil.shape and ours.dtype == torch.uint8
    diff = (ours.int() - pil.int()).abs()
    assert diff.max() <= 8 and diff.float().mean() <= 1.0, (diff.max(), diff.float().mean())
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
