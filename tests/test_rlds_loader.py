"""load_rlds on RLDS shards written here with the tfrecord package's writer
(tf.train.Example episodes) and a TFDS features.json."""

import io
import json

import numpy as np
import pytest
import torch
from PIL import Image
from tfrecord import TFRecordWriter

from robocache.data import LoaderError, load_rlds

FPS = 5


def tensor(shape, dtype):
    return {
        "pythonClassName": "tensorflow_datasets.core.features.tensor_feature.Tensor",
        "tensor": {
            "shape": {"dimensions": [str(d) for d in shape]},
            "dtype": dtype,
            "encoding": "none",
        },
    }


def features_json():
    observation = {
        "featuresDict": {
            "features": {
                "image": {
                    "pythonClassName": "tensorflow_datasets.core.features.image_feature.Image",
                    "image": {
                        "shape": {"dimensions": ["8", "10", "3"]},
                        "dtype": "uint8",
                        "encodingFormat": "png",
                    },
                },
                "state": tensor([6], "float32"),
            }
        }
    }
    steps = {
        "featuresDict": {
            "features": {
                "observation": observation,
                "action": tensor([3], "float32"),
                "reward": tensor([], "float32"),
                "is_first": tensor([], "bool"),
                "language_instruction": {
                    "pythonClassName": "tensorflow_datasets.core.features.text_feature.Text",
                    "text": {},
                },
            }
        }
    }
    return {
        "pythonClassName": "tensorflow_datasets.core.features.features_dict.FeaturesDict",
        "featuresDict": {
            "features": {
                "steps": {
                    "pythonClassName": "tensorflow_datasets.core.features.dataset_feature.Dataset",
                    "sequence": {"feature": steps, "length": "-1"},
                }
            }
        },
    }


def png(image):
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(image, subsampling=0):
    """subsampling 0: full-resolution chroma (4:4:4); 2: 4:2:0, as cameras write."""
    buf = io.BytesIO()
    Image.fromarray(image).save(buf, format="JPEG", quality=95, subsampling=subsampling)
    return buf.getvalue()


def smooth_frames(n, rng):
    """n camera-like (8, 10, 3) frames: brightness ramps, no pixel noise."""
    y, x = np.mgrid[0:8, 0:10]
    base = rng.integers(30, 120, (n, 1, 1, 3))
    return np.clip(base + 9 * x[..., None] + 7 * y[..., None], 0, 255).astype(np.uint8)


def write_rlds(root, lengths=(3, 1, 5), shards=2, encode=png, smooth=False):
    rng = np.random.default_rng()
    root.mkdir(parents=True, exist_ok=True)
    (root / "features.json").write_text(json.dumps(features_json()))
    episodes = []
    for e, n in enumerate(lengths):
        episodes.append(
            {
                "observation/image": (
                    smooth_frames(n, rng)
                    if smooth
                    else rng.integers(0, 256, (n, 8, 10, 3), dtype=np.uint8)
                ),
                "observation/state": rng.standard_normal((n, 6)).astype(np.float32),
                "action": rng.standard_normal((n, 3)).astype(np.float32),
                "reward": rng.standard_normal(n).astype(np.float32),
                "is_first": np.arange(n) == 0,
                "task": f"task {e}",
            }
        )
    per_shard = -(-len(episodes) // shards)
    for s in range(shards):
        writer = TFRecordWriter(str(root / f"demo-train.tfrecord-{s:05d}-of-{shards:05d}"))
        for ep in episodes[s * per_shard : (s + 1) * per_shard]:
            n = len(ep["action"])
            writer.write(
                {
                    "steps/observation/image": (
                        [encode(im) for im in ep["observation/image"]],
                        "byte",
                    ),
                    "steps/observation/state": (
                        ep["observation/state"].reshape(-1).tolist(),
                        "float",
                    ),
                    "steps/action": (ep["action"].reshape(-1).tolist(), "float"),
                    "steps/reward": (ep["reward"].tolist(), "float"),
                    "steps/is_first": (ep["is_first"].astype(int).tolist(), "int"),
                    "steps/language_instruction": ([ep["task"].encode()] * n, "byte"),
                }
            )
        writer.close()
    return episodes


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
