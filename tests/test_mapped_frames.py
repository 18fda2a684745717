"""Encoded frames of a mapped store read from its file with positional
reads, never through the map: on the host decoder (CPU) and the GPU
decoder's queue (CUDA, with the nvimgcodec extra). Batches equal those of
the store in memory, a ``save`` over the store leaves the process reading
its own file, and a file cut after loading is a LoaderError naming it, not
a SIGBUS."""

import dataclasses
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")

import torch  # noqa: E402
from conftest import requires_cuda  # noqa: E402
from fixtures.corrupt import flip_value  # noqa: E402
from fixtures.images import camera_frames  # noqa: E402

from robocache.data import EpisodeStore, LoaderError, WindowSampler  # noqa: E402
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


def episode_bytes(store, key, episode):
    """(begin, end): the bytes of ``episode``'s frames of ``key`` in its values."""
    stream = store[key]
    first, end = stream.offsets[episode], stream.offsets[episode + 1]
    return int(stream.byte_offsets[first]), int(stream.byte_offsets[end])


@pytest.mark.parametrize("cuda_graph", [None, False])
@pytest.mark.parametrize("read_ahead", [0, 2])
@pytest.mark.parametrize("device", DEVICES)
def test_a_corrupt_jpeg_episode_is_named_when_a_batch_first_reads_it(
    tmp_path, device, read_ahead, cuda_graph
):
    decoding_for(device)  # skips without the GPU decoder
    store = make_store()
    store.save(tmp_path)
    begin, end = episode_bytes(store, "cam", 3)
    flip_value(str(tmp_path / "store.safetensors"), "streams/0/values", (begin + end) // 2)
    loaded = EpisodeStore.load(tmp_path)  # opens: the frames' bytes are not read
    checks = loaded.mapped_rows["cam"].checks
    assert checks.state.tolist() == [0, 0, -1, 0, 0]  # episode 2 has no frames
    sampler = sampler_of(loaded, device, shuffle=False, read_ahead=read_ahead,
                         cuda_graph=cuda_graph)  # fmt: skip
    if device == "cuda" and read_ahead:  # the graphs' path, and the path without them
        assert (sampler.graphs is not None) == (cuda_graph is None)
    named = r"store.safetensors: stream 'cam': streams/0/values, episode 3 \(rows \d+:\d+\)"
    taken = []
    with pytest.raises(LoaderError, match=named):
        for batch in sampler:
            taken.append(batch["episode_index"].cpu())
    # The batches wholly before episode 3 came first, from episodes checked.
    assert taken and int(torch.cat(taken).max()) < 3
    assert checks.state[:2].tolist() == [-1, -1] and checks.state[3] == 0
    with pytest.raises(LoaderError, match=named):
        sampler.batch_at([store["cam"].offsets[3].item() + 1])
    first = sampler.batch_at([0, 1])["cam"]
    assert torch.equal(first.cpu(), sampler_of(store, device).batch_at([0, 1])["cam"].cpu())
    with pytest.raises(LoaderError, match=named):  # a copy checks what it copies
        loaded.save(tmp_path / "again")


@pytest.mark.parametrize("device", DEVICES)
def test_every_jpeg_episode_is_checked_once_by_the_first_epoch(tmp_path, device):
    decoding_for(device)
    store = make_store()
    store.save(tmp_path)
    loaded = EpisodeStore.load(tmp_path)
    checks = loaded.mapped_rows["cam"].checks
    assert not checks.done
    handed = []
    submit = checks.submit

    def counted(reader, episodes, token):
        pending = submit(reader, episodes, token)
        handed.extend([] if pending is None else pending[1].tolist())
        return pending

    checks.submit = counted
    expected = cloned(sampler_of(store, device))
    got = cloned(sampler_of(loaded, device))
    assert checks.done and (checks.state == -1).all()
    assert sorted(handed) == [0, 1, 3, 4]  # each episode with frames, once
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a["cam"], b["cam"])


def test_the_gpu_decoders_checks_hand_out_a_batch_once_its_episodes_pass(tmp_path):
    """FrameChecks, which the GPU decoder's queue reads beside, on the host."""
    from robocache.data.sampler.frame_checks import FrameChecks, checked_frames
    from robocache.data.sampler.order import EpochParts

    store = make_store()  # episodes of 12, 1, 0, 9 and 15 frames
    store.save(tmp_path)
    begin, end = episode_bytes(store, "cam", 3)
    flip_value(str(tmp_path / "store.safetensors"), "streams/0/values", (begin + end) // 2)
    loaded = EpisodeStore.load(tmp_path)
    frames = checked_frames(frame_keys(sampler_of(loaded, "cpu")))
    assert [f.plan.key for f in frames] == ["cam"]
    rows = loaded["cam"].times.numel()
    parts = EpochParts(torch.arange(rows), 4, -(-rows // 4))  # batch 3: rows 12:16
    checks = FrameChecks(frames, loaded["cam"].offsets, parts, depth=2)
    state = loaded.mapped_rows["cam"].checks.state
    try:
        for i in range(3):
            checks.wait(i)
        # Episodes 1 and 3, read by batches 3 and 4, are checked ahead.
        token = checks.token
        assert state.tolist() == [-1, token, -1, token, 0]
        with pytest.raises(LoaderError, match=r"stream 'cam': streams/0/values, episode 3 "):
            checks.wait(3)  # episodes 1 and 3
    finally:
        checks.close()
    assert state.tolist() == [-1, -1, -1, 0, 0]  # nothing left marked in flight


@pytest.mark.parametrize("one", [False, True], ids=["iteration", "batch_at"])
@pytest.mark.parametrize("device", DEVICES)
def test_a_read_the_os_refuses_names_the_file_key_and_frame(tmp_path, device, one):
    decoding_for(device)
    make_store().save(tmp_path / "store")
    sampler = sampler_of(EpisodeStore.load(tmp_path / "store"), device, read_ahead=0 if one else 2)
    key = frame_keys(sampler)[0]
    folder = os.open(tmp_path, os.O_RDONLY)  # read with pread: EISDIR
    try:
        # The key's file swapped for a folder, its checks off: the reads fail.
        key.mapped = dataclasses.replace(
            key.mapped, file=SimpleNamespace(fd=folder, path="the store"), checks=None
        )
        named = r"the store: reading the bytes of key 'cam', episode \d+, frame \d+ failed: .*"
        with pytest.raises(LoaderError, match=named + "(Is a directory|EISDIR)"):
            sampler.batch_at([0, 1]) if one else next(iter(sampler))
    finally:
        os.close(folder)


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
    # Named where the bytes are read, or where their episode is first checked.
    named = r"store.safetensors: the file ends inside the (bytes|values) of key 'cam', episode"
    assert re.search(named, done.stdout), done.stdout
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
