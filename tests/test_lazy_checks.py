"""A mapped store's values are checked against their per-episode CRC-32s the
first time they are read, not at load: the store opens after reading its
index, a corrupt episode is a LoaderError naming the file, the key and the
episode when a batch first reads it, and episodes no read reaches are never
read."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from conftest import requires_cuda
from fixtures.corrupt import flip_value

from robocache.data import EpisodeStore, LoaderError, WindowSampler

MS = 1_000_000


def make_store(lengths=(6, 4, 0, 7, 5)):
    g = torch.Generator().manual_seed(1)
    episodes = []
    for n in lengths:
        t = torch.arange(n) * 100 * MS
        episodes.append(
            {
                "cam": (torch.randint(0, 256, (n, 3, 4, 3), generator=g, dtype=torch.uint8), t),
                "joints": (torch.randn(n, 2, generator=g), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, progress=False)


@pytest.fixture
def saved(tmp_path):
    store = make_store()
    store.save(tmp_path)
    return store, tmp_path, str(tmp_path / "store.safetensors")


def sampler_of(store, device="cpu", read_ahead=2):
    return WindowSampler(
        store, {"cam": [-0.1, 0.0], "joints": [0.0]}, batch_size=3, shuffle=False,
        read_ahead=read_ahead, device=device,
    )  # fmt: skip


@pytest.mark.parametrize("read_ahead", [0, 2])
def test_a_corrupt_episode_is_named_when_a_batch_first_reads_it(saved, read_ahead):
    store, folder, path = saved
    flip_value(path, "streams/0/values", 11)  # cam, episode 3 (rows 10:17)
    loaded = EpisodeStore.load(folder)  # opens: its values are not read
    sampler = sampler_of(loaded, read_ahead=read_ahead)
    named = r"store.safetensors: stream 'cam': streams/0/values, episode 3 \(rows 10:17\)"
    taken = []
    with pytest.raises(LoaderError, match=named):
        for batch in sampler:
            taken.append(batch["episode_index"].clone())
    # Batches wholly before episode 3 came first: its anchors are rows 10 on,
    # and each window also reads its episode's edges.
    assert taken and int(torch.cat(taken).max()) < 3
    with pytest.raises(LoaderError, match=named):
        sampler.batch_at([11])
    assert sampler.batch_at([0, 1])["cam"].shape == (2, 2, 3, 4, 3)


def test_each_episode_is_checked_once_and_the_values_are_the_store_s(saved):
    store, folder, _ = saved
    loaded = EpisodeStore.load(folder)
    checks = loaded.mapped_rows["cam"].checks
    assert not checks.done and checks.state.tolist() == [0, 0, -1, 0, 0]  # episode 2 is empty
    first = [b["cam"].clone() for b in sampler_of(loaded)]
    assert checks.done and (checks.state == -1).all()
    again = [b["cam"].clone() for b in sampler_of(loaded)]
    memory = [b["cam"].clone() for b in sampler_of(store)]
    for a, b, c in zip(first, again, memory, strict=True):
        assert torch.equal(a, c) and torch.equal(b, c)


def test_a_broken_iteration_leaves_no_check_marked_in_flight(saved):
    store, folder, _ = saved
    loaded = EpisodeStore.load(folder)
    checks = loaded.mapped_rows["cam"].checks
    for _ in sampler_of(loaded, read_ahead=3):
        break
    assert set(np.unique(checks.state).tolist()) <= {0, -1}
    assert (checks.state == -1).any()  # the first batch's episodes


def test_a_shard_checks_only_its_own_episodes(saved):
    store, folder, path = saved
    flip_value(path, "streams/1/values", 1)  # joints, episode 0
    last = EpisodeStore.load(folder, shard=(1, 2))
    batches = list(sampler_of(last))
    assert batches and last.mapped_rows["joints"].checks.state[0] == 0
    with pytest.raises(LoaderError, match=r"'joints': streams/1/values, episode 0 "):
        list(sampler_of(EpisodeStore.load(folder, shard=(0, 2))))


def test_save_checks_the_mapped_values_it_copies(saved, tmp_path):
    store, folder, path = saved
    flip_value(path, "streams/1/values", 1)  # joints, episode 0
    loaded = EpisodeStore.load(folder)
    with pytest.raises(LoaderError, match=r"'joints': streams/1/values, episode 0 "):
        loaded.save(tmp_path / "copy")  # else written out with CRCs of the damage
    assert not (tmp_path / "copy" / "store.safetensors").exists()


@requires_cuda
def test_a_corrupt_episode_is_named_on_the_gpu_too(saved):
    store, folder, path = saved
    flip_value(path, "streams/0/values", 11)
    sampler = sampler_of(EpisodeStore.load(folder), device="cuda")
    with pytest.raises(LoaderError, match=r"episode 3 \(rows 10:17\)"):
        for _ in sampler:
            pass


def test_a_large_mapped_store_opens_without_reading_its_values(tmp_path):
    """400 MB of frames: load reads the index alone (far under 100 MB of
    resident memory more), in a fresh process."""
    frames, size = 1600, 250_000  # 400 MB of uint8 rows
    t = torch.arange(100) * 100 * MS
    episodes = (
        {"cam": (torch.full((100, size), e, dtype=torch.uint8), t)} for e in range(frames // 100)
    )
    EpisodeStore.from_episodes(episodes, progress=False).save(tmp_path)
    assert os.path.getsize(tmp_path / "store.safetensors") > 400_000_000
    script = textwrap.dedent(
        f"""
        import resource, time
        import robocache.data as data
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * resource.getpagesize()
        before = rss()
        started = time.perf_counter()
        store = data.EpisodeStore.load({str(tmp_path)!r})
        print((rss() - before) / 2**20, time.perf_counter() - started)
        """
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    grown_mib, _seconds = map(float, out.stdout.split())
    assert grown_mib < 50, out.stdout
