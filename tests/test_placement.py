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


def _tensors_of(stream):
    return {
        "values": stream.values,
        "times": stream.times,
        "offsets": stream.offsets,
    } | stream.stats


def _file_bytes_held(stream):
    return stream.values.untyped_storage().nbytes()


def test_cpu_places_and_unmapped_loads_hold_only_their_own_bytes(tmp_path):
    """``"cpu"`` (and ``load(mmap=False)``) reads values into memory: a
    shard's tensors hold its own rows, not views of the whole file."""
    store = make_store()
    store.save(tmp_path)
    key = "observation.images.top"
    placed = EpisodeStore.load(tmp_path).place({key: "cpu"})
    assert placed.placement[key] == "cpu" and key not in placed.mapped
    assert _file_bytes_held(placed[key]) == placed[key].values.nbytes
    whole = os.path.getsize(tmp_path / "store.safetensors")
    for rank in range(2):
        shard = EpisodeStore.load(tmp_path, mmap=False, shard=(rank, 2))
        assert set(shard.placement.values()) == {"cpu"} and not shard.mapped
        assert _file_bytes_held(shard[key]) == shard[key].values.nbytes < whole
        mapped_shard = EpisodeStore.load(tmp_path, shard=(rank, 2))
        assert_same([shard.episodes], [mapped_shard.episodes])
        for k, s in shard.streams.items():
            assert_same([_tensors_of(s)], [_tensors_of(mapped_shard[k])])


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
    # Bitwise against the store on the GPU (the CPU's kernels may round a
    # blend differently in the last bit).
    assert_same(batches(placed, device="cuda"), batches(store.to("cuda")))


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


@requires_cuda
@pytest.mark.parametrize("mode", ["nearest", "previous", "linear", "mean"])
@pytest.mark.parametrize("dtype", [torch.uint8, torch.float32, torch.bfloat16])
def test_the_kernels_read_pinned_values_as_they_read_device_values(mode, dtype):
    if dtype == torch.uint8 and mode in ("linear", "mean"):
        pytest.skip("blending modes need floating values")
    import robocache

    g = torch.Generator().manual_seed(3)
    values = (torch.rand(40, 3, 5, generator=g) * 200).to(dtype)
    times = torch.cumsum(torch.randint(1, 9, (40,), generator=g), 0) * MS
    offsets = torch.tensor([0, 11, 11, 25, 40])
    episode = torch.tensor([0, 2, 3, 1, 3])
    query = times[[3, 14, 30, 0, 39]].view(5, 1) + torch.tensor([-5, 0, 2, 7]) * MS
    cuda = [t.cuda() for t in (values, times, offsets, episode, query)]
    pinned = [values.pin_memory(), *cuda[1:]]
    kw = dict(interval=4 * MS) if mode == "mean" else {}
    want = robocache.sample_windows(*cuda, mode, **kw)
    got = robocache.sample_windows(*pinned, mode, **kw)
    for a, b in zip(got, want):
        assert a.device.type == "cuda" and torch.equal(a, b)
    deltas = [torch.tensor([-3, 0, 5], device="cuda") * MS]
    anchors = (offsets.cuda(), times.cuda(), torch.tensor([3, 14, 30, 0, 39], device="cuda"))
    for v in (cuda[0], pinned[0]):
        out = robocache.anchor_windows(
            [v],
            [cuda[1]],
            [cuda[2]],
            deltas,
            *anchors,
            mode,
            **({"intervals": 4 * MS} if mode == "mean" else {}),
        )
        if v is cuda[0]:
            want_anchor = out
        else:
            assert all(torch.equal(a, b) for a, b in zip(out[0], want_anchor[0]))


@requires_cuda
def test_pageable_host_values_with_a_gpu_index_are_refused():
    import robocache

    values = torch.zeros(4, 2)  # not pinned
    times, offsets = torch.arange(4, device="cuda"), torch.tensor([0, 4], device="cuda")
    with pytest.raises(
        ValueError, match=r"values must be on cuda:0 .* got values on cpu \(not pinned\)"
    ):
        robocache.sample_windows(
            values, times, offsets, torch.tensor([0], device="cuda"), times.view(1, 4)
        )


@requires_cuda
def test_pinned_batches_are_drawn_without_a_host_sync_and_replay_from_graphs(tmp_path):
    store = make_store()
    store.save(tmp_path)
    placed = EpisodeStore.load(tmp_path, placement={"observation.images.*": "pinned", "*": "cuda"})
    sampler = WindowSampler(placed, DELTAS, modes=MODES, batch_size=6, seed=2)
    assert sampler.graphs is not None and sampler.prefetch == 0
    eager = WindowSampler(placed, DELTAS, modes=MODES, batch_size=6, seed=2, cuda_graph=False)
    expected = [{k: v.clone() for k, v in b.items()} for b in eager]
    next(iter(sampler))  # the graphs are captured outside the sync check
    torch.cuda.set_sync_debug_mode("error")
    try:
        got = [{k: v.clone() for k, v in b.items()} for b in sampler]
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert_same(got, expected)
