"""Where a store's keys live (EpisodeStore.place, load(placement=...)), and
that sampling gives the same windows wherever they live."""

import os

import pytest
import torch
from conftest import HAS_CUDA, requires_cuda

from robocache.data import EpisodeStore, WindowSampler

MS = 1_000_000


def make_store(lengths=(7, 1, 12, 4), seed=0):
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for n in lengths:
        t = torch.arange(n) * 100 * MS
        fast = torch.arange(3 * n) * 33 * MS
        episodes.append(
            {
                "action": (torch.randn(n, 3, generator=g, dtype=torch.float64), t),
                "state": (torch.randn(3 * n, 2, generator=g), fast),
                "observation.images.top": (
                    torch.randint(0, 256, (n, 4, 5, 3), generator=g, dtype=torch.uint8),
                    t,
                ),
            }
        )
    return EpisodeStore.from_episodes(episodes, fps=10, progress=False)


DELTAS = {
    "action": [0.0, 0.1, 0.25],
    "state": [-0.05, 0.0],
    "observation.images.top": [-0.1, 0.0],
}
MODES = {"action": "linear", "state": "mean", "observation.images.top": "nearest"}


def batches(store, device=None, **kw):
    sampler = WindowSampler(
        store, DELTAS, modes=MODES, batch_size=6, shuffle=False, device=device, key_age=True, **kw
    )
    return [sampler.batch_at(torch.arange(i, min(i + 6, 24))) for i in range(0, 24, 6)]


def assert_same(got, expected):
    for a, b in zip(got, expected):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key].cpu(), b[key].cpu()), key


def test_patterns_place_keys_first_match_winning(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    assert set(mapped.placement.values()) == {"mapped"}
    placed = mapped.place({"observation.images.*": "mapped", "act*": "cpu", "*": "cpu"})
    assert placed.placement == {
        "action": "cpu",
        "state": "cpu",
        "observation.images.top": "mapped",
    }
    assert placed.mapped == {"observation.images.top"}
    assert "values mapped" in repr(placed) and "values cpu" in repr(placed)
    assert_same(batches(placed), batches(store))


def test_load_takes_a_placement(tmp_path):
    store = make_store()
    store.save(tmp_path)
    loaded = EpisodeStore.load(tmp_path, placement={"state": "cpu"})
    assert loaded.placement["state"] == "cpu" and loaded.placement["action"] == "mapped"
    assert_same(batches(loaded), batches(store))
    with pytest.raises(ValueError, match="give device or placement, not both"):
        EpisodeStore.load(tmp_path, device="cpu", placement="cpu")


def test_placement_errors_name_the_key_and_the_way_out():
    store = make_store()
    with pytest.raises(ValueError, match=r"the pattern 'cam\*' matches no key; the keys are"):
        store.place({"cam*": "cpu"})
    with pytest.raises(ValueError, match=r"placement\['\*'\] must be one of"):
        store.place({"*": "gpu"})
    with pytest.raises(ValueError, match=r"'action' cannot be 'mapped': .* Save the store"):
        store.place({"action": "mapped"})
    with pytest.raises(TypeError, match="placement must be 'auto', one of"):
        store.place(["cpu"])


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_gpu_placements_without_a_gpu_name_the_alternative():
    store = make_store()
    with pytest.raises(RuntimeError, match=r"cannot be 'pinned': .* Use 'cpu', or 'mapped'"):
        store.place({"observation.images.*": "pinned"})
    with pytest.raises(RuntimeError, match=r"placement='auto' places keys on a GPU"):
        store.place("auto")


def test_a_mapped_store_is_sampled_without_reading_the_whole_file(tmp_path):
    """A 256 MB stream mapped from its file: a few batches read only their
    rows (the resident set grows by far less than the file)."""
    frames = 1024
    big = torch.randint(0, 256, (frames, 512, 512), dtype=torch.uint8)  # 256 MiB
    t = torch.arange(frames) * 100 * MS
    store = EpisodeStore.from_episodes(
        [{"big": (big[:512], t[:512])}, {"big": (big[512:], t[:512])}], progress=False, stats=False
    )
    del big
    store.save(tmp_path)
    del store
    before = _rss()
    mapped = EpisodeStore.load(tmp_path, verify=False)  # verify would read every byte
    sampler = WindowSampler(mapped, {"big": [0.0, 0.1]}, batch_size=4, seed=0)
    for _, batch in zip(range(3), sampler):
        assert batch["big"].shape == (4, 2, 512, 512)
    grown = _rss() - before
    assert grown < 64 << 20, f"the resident set grew by {grown >> 20} MiB"


def _rss():
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    pytest.skip("no /proc/<pid>/status here")


@requires_cuda
@pytest.mark.parametrize(
    "placement",
    [
        "cuda",
        {"observation.images.*": "pinned", "*": "cuda"},
        "pinned",
        {"observation.images.*": "mapped", "*": "cuda"},
    ],
)
def test_every_placement_samples_the_same_windows_on_the_gpu(tmp_path, placement):
    store = make_store()
    store.save(tmp_path)
    placed = EpisodeStore.load(tmp_path, placement=placement)
    assert_same(batches(placed, device="cuda"), batches(store))


@requires_cuda
def test_auto_keeps_the_index_and_small_streams_on_the_gpu():
    store = make_store()

    def nbytes(*tensors):
        return sum(t.numel() * t.element_size() for t in tensors)

    index = sum(nbytes(s.times, s.offsets, *s.stats.values()) for s in store.streams.values())
    small = nbytes(store["action"].values, store["state"].values)
    placed = store.place("auto", budget=index + small)
    assert placed.placement == {
        "action": "cuda",
        "state": "cuda",
        "observation.images.top": "pinned",
    }
    assert placed.place("auto", budget=index).placement["action"] == "pinned"
    with pytest.raises(ValueError, match=r"budget of 10 bytes cannot hold .* bytes"):
        store.place("auto", budget=10)
