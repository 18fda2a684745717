"""Encoded frames of a mapped store read from its file with positional
reads, never through the map: on the host decoder (CPU) and the GPU
decoder's queue (CUDA, with the nvimgcodec extra). Batches equal those of
the store in memory, a ``save`` over the store leaves the process reading
its own file, and a file cut after loading is a LoaderError naming it, not
a SIGBUS."""

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import torch  # noqa: E402
from conftest import requires_cuda  # noqa: E402
from fixtures.images import camera_frames  # noqa: E402

from robocache.data import EpisodeStore, WindowSampler  # noqa: E402
from robocache.data.frames import FrameDecoding  # noqa: E402
from robocache.data.frames.decoders import nvimgcodec  # noqa: E402

MS = 10**6
DELTAS = {"cam": [-0.1, 0.0], "a": [0.0, 0.1]}
DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def make_store(seed=0, lengths=(12, 1, 0, 9, 15)):
    episodes = []
    for e, n in enumerate(lengths):
        t = torch.arange(n) * 100 * MS
        episodes.append(
            {
                "cam": (camera_frames(n, 24, 32, seed=seed + e), t),
                "a": (torch.randn(n, 2, generator=torch.Generator().manual_seed(seed + e)), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, frames="jpeg", progress=False)


def decoding_for(device):
    if device == "cpu":
        return FrameDecoding(backend="host")
    why = nvimgcodec.unavailable()
    if why:
        pytest.skip(f"the GPU decoder: {why}")
    return FrameDecoding(backend="nvimgcodec")


def sampler_of(store, device, deltas=DELTAS, **kw):
    return WindowSampler(store, deltas, batch_size=4, device=device, decoding=decoding_for(device),
                         seed=3, **kw)  # fmt: skip


def frame_keys(sampler):
    reader = sampler._batches.reader
    return reader.frames + reader.gpu_frames


def cloned(batches):
    return [{k: v.clone() for k, v in b.items()} for b in batches]


@pytest.mark.parametrize("device", DEVICES)
def test_mapped_jpeg_batches_come_from_the_file_not_the_map(tmp_path, device):
    store = make_store()
    store.save(tmp_path)
    expected = cloned(sampler_of(store, device))
    loaded = EpisodeStore.load(tmp_path)
    assert "cam" in loaded.mapped
    sampler = sampler_of(loaded, device)
    keys = frame_keys(sampler)
    assert [k.plan.key for k in keys] == ["cam"] and keys[0].mapped is not None
    # Bytes read through the map would now be zeros: no frame would decode.
    keys[0].values = torch.zeros_like(keys[0].values)
    for _ in range(2):  # an epoch, then another: the queue runs on into it
        got = cloned(sampler)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert torch.equal(a["cam"], b["cam"]) and torch.equal(a["a"], b["a"])
    one = sampler.batch_at([0, 5, 20])
    assert torch.equal(one["cam"], sampler_of(store, device).batch_at([0, 5, 20])["cam"])


@pytest.mark.parametrize("device", DEVICES)
def test_a_save_over_the_store_leaves_the_sampler_reading_its_own_file(tmp_path, device):
    make_store().save(tmp_path)
    loaded = EpisodeStore.load(tmp_path)
    sampler = sampler_of(loaded, device)
    before = cloned(sampler)
    make_store(seed=7).save(tmp_path)  # a new file renamed into place
    assert not torch.equal(EpisodeStore.load(tmp_path)["cam"].values, loaded["cam"].values)
    after = cloned(sampler)
    assert len(after) == len(before)
    for a, b in zip(after, before):
        assert torch.equal(a["cam"], b["cam"])


CUT_WHILE_SAMPLING = """
import sys
sys.path.insert(0, {tests!r})
from fixtures.corrupt import truncate
from test_mapped_frames import sampler_of
from robocache.data import EpisodeStore, LoaderError

store = EpisodeStore.load({folder!r})
sampler = sampler_of(store, {device!r}, deltas={{"cam": [-0.1, 0.0]}})
it = iter(sampler)
next(it)
truncate({path!r}, 0.3)
try:
    if {one!r}:
        sampler.batch_at(list(range(len(store["cam"].times) - 3)))
    else:
        for _ in range(3):
            for batch in sampler:
                pass
except LoaderError as e:
    print(e)
    sys.exit(0)
sys.exit(3)
"""


@pytest.mark.parametrize("one", [False, True], ids=["iteration", "batch_at"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_file_cut_after_loading_is_an_error_naming_it_not_a_crash(tmp_path, device, one):
    decoding_for(device)  # skips without the GPU decoder
    make_store(lengths=(40, 30, 50)).save(tmp_path)
    path = tmp_path / "store.safetensors"
    code = CUT_WHILE_SAMPLING.format(tests=str(Path(__file__).parent), folder=str(tmp_path),
                                     path=str(path), device=device, one=one)  # fmt: skip
    # A SIGBUS (a fault of the map) would end the process with -7.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "store.safetensors: the file ends inside the bytes of key 'cam', episode" in done.stdout
    assert "truncated or rewritten in place after it was loaded" in done.stdout


def test_the_native_extent_read_names_the_first_extent_past_the_end(tmp_path):
    from robocache.data.store.rows import StoreFile, caller_reader

    data = bytes(range(256)) * 4
    (tmp_path / "f.bin").write_bytes(data)
    file = StoreFile(tmp_path / "f.bin")
    begins = torch.tensor([10, 14, 100, 1010])  # the first two follow one another
    lengths = torch.tensor([4, 6, 0, 20])
    at = torch.tensor([0, 4, 10, 10])
    out = torch.zeros(30, dtype=torch.uint8)
    cut = caller_reader().read_extents(file.fd, begins[:3], lengths[:3], out, at[:3])
    assert cut == -1 and bytes(out[:10].tolist()) == data[10:20]
    assert caller_reader().read_extents(file.fd, begins, lengths, out, at) == 3  # 1010 + 20 > 1024
    with pytest.raises(ValueError, match=r"extent 1 \(6 bytes at 14 into 28\) does not fit"):
        caller_reader().read_extents(file.fd, begins[:2], lengths[:2], out, torch.tensor([0, 28]))
