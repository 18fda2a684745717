"""robocache.data.EpisodeStore: packing, statistics, save/load, devices."""

import numpy as np
import pytest
import torch
from conftest import requires_cuda
from torch.testing import assert_close

from robocache.data import EpisodeStore

MS = 1_000_000


def episodes(E=5, seed=None):
    """Multi-rate episodes: joints at ~100 Hz, a camera at ~30 Hz that starts
    late (and is missing from episode 2), force at ~1 kHz as numpy arrays."""
    out = []
    for e in range(E):
        n = int(torch.randint(1, 60, ()))
        joints_t = torch.cumsum(torch.randint(8 * MS, 12 * MS, (n,)), 0)
        m = max(1, n // 3)
        cam_t = 40 * MS + torch.cumsum(torch.randint(30 * MS, 36 * MS, (m,)), 0)
        k = 10 * n
        force_t = np.cumsum(np.random.randint(MS // 2, 3 * MS // 2, size=k)).astype(np.int64)
        ep = {
            "observation.state": (torch.randn(n, 7), joints_t),
            "force": (np.random.randn(k, 6).astype(np.float64), force_t),
            "task": ["pick", "place", "pick"][e % 3],
        }
        if e != 2:
            ep["observation.images.top"] = (
                torch.randint(0, 256, (m, 32, 48, 3), dtype=torch.uint8),
                cam_t,
            )
        out.append(ep)
    return out


def test_packs_every_stream_back_to_back():
    eps = episodes()
    store = EpisodeStore.from_episodes(eps, fps=30, progress=False)
    assert store.num_episodes == 5 and store.fps == 30.0
    for key in ("observation.state", "force", "observation.images.top"):
        s = store[key]
        counts = [len(ep[key][1]) if key in ep else 0 for ep in eps]
        assert s.offsets.tolist() == np.concatenate([[0], np.cumsum(counts)]).tolist()
        for e, ep in enumerate(eps):
            a, z = s.offsets[e], s.offsets[e + 1]
            if key not in ep:
                assert a == z
                continue
            assert torch.equal(s.values[a:z], torch.as_tensor(ep[key][0]))
            assert torch.equal(s.times[a:z], torch.as_tensor(ep[key][1]))
    assert store.tasks == ["pick", "place"]
    assert store.episodes["task_index"].tolist() == [0, 1, 0, 0, 1]
    assert store.episodes["episode_index"].tolist() == list(range(5))
    assert store.episodes["length"].tolist() == [
        max(len(v[1]) for k, v in ep.items() if k != "task") for ep in eps
    ]


def test_a_stream_that_appears_late_has_no_samples_before():
    eps = [
        {"a": (torch.ones(3, 1), torch.arange(3))},
        {"a": (torch.ones(2, 1), torch.arange(2)), "b": (torch.zeros(4), torch.arange(4))},
    ]
    store = EpisodeStore.from_episodes(eps, progress=False)
    assert store["b"].offsets.tolist() == [0, 0, 4]
    assert store["a"].offsets.tolist() == [0, 3, 5]


def test_float_seconds_become_nanoseconds():
    t = torch.tensor([0.0, 1 / 30, 2 / 30], dtype=torch.float32)
    store = EpisodeStore.from_episodes([{"x": (torch.zeros(3), t)}], progress=False)
    assert store["x"].times.dtype == torch.int64
    assert store["x"].times.tolist() == [round(float(v) * 1e9) for v in t.double()]


def test_statistics_match_the_packed_values():
    store = EpisodeStore.from_episodes(episodes(), progress=False, quantiles=(0.01, 0.99))
    for key in ("observation.state", "force", "observation.images.top"):
        s = store[key]
        x = s.values.double()
        assert_close(s.stats["mean"], x.mean(0))
        assert_close(s.stats["std"], x.std(0, correction=0))
        assert torch.equal(s.stats["min"], x.amin(0)) and torch.equal(s.stats["max"], x.amax(0))
    x = store["force"].values.double()
    assert_close(store["force"].stats["q01"], torch.quantile(x, 0.01, dim=0))
    assert "q99" not in store["observation.images.top"].stats  # over 4096 values a sample


def test_metadata_entries_and_errors():
    t = torch.arange(3)
    store = EpisodeStore.from_episodes(
        [{"x": (torch.zeros(3), t), "episode_index": 7, "length": 9, "task": "a"}], progress=False
    )
    assert store.episodes["episode_index"].tolist() == [7] and store.episodes[
        "length"
    ].tolist() == [9]
    build = lambda eps: EpisodeStore.from_episodes(eps, progress=False)  # noqa: E731
    with pytest.raises(
        ValueError, match=r"episode 1, stream 'x': times must be non-decreasing; sample 2"
    ):
        build([{"x": (torch.zeros(3), t)}, {"x": (torch.zeros(3), torch.tensor([0, 5, 4]))}])
    with pytest.raises(ValueError, match=r"stream 'x'.*same N; got values \(3,\) and times \(2,\)"):
        build([{"x": (torch.zeros(3), t[:2])}])
    with pytest.raises(ValueError, match=r"episode 1, stream 'x': dtype torch.float64"):
        build([{"x": (torch.zeros(3), t)}, {"x": (torch.zeros(3, dtype=torch.float64), t)}])
    with pytest.raises(ValueError, match="no episodes were given"):
        build([])
    with pytest.raises(TypeError, match="episode 0 must be a dict"):
        build([(torch.zeros(3), t)])
    with pytest.raises(TypeError, match="task must be a str"):
        build([{"x": (torch.zeros(3), t), "task": 3}])
    with pytest.raises(TypeError, match="int64 nanoseconds or float seconds"):
        build([{"x": (torch.zeros(3), t.int())}])
    with pytest.raises(KeyError, match=r"no stream 'y'; the streams are \['x'\]"):
        build([{"x": (torch.zeros(3), t)}])["y"]


@pytest.mark.parametrize("mmap", [True, False])
def test_save_and_load_round_trip(tmp_path, mmap):
    store = EpisodeStore.from_episodes(episodes(), fps=15, progress=False, quantiles=(0.5,))
    store.save(tmp_path / "cache")
    loaded = EpisodeStore.load(tmp_path / "cache", mmap=mmap)
    assert (
        loaded.tasks == store.tasks
        and loaded.fps == 15.0
        and list(loaded.keys()) == list(store.keys())
    )
    for key in store.keys():
        a, b = store[key], loaded[key]
        for x, y in ((a.values, b.values), (a.times, b.times), (a.offsets, b.offsets)):
            assert torch.equal(x, y)
        assert a.stats.keys() == b.stats.keys()
        for name in a.stats:
            assert torch.equal(a.stats[name], b.stats[name])
    for name in store.episodes:
        assert torch.equal(store.episodes[name], loaded.episodes[name])
    assert loaded.nbytes == store.nbytes


def test_info_is_saved_and_must_be_json(tmp_path):
    info = {"env_args": {"env_name": "Lift", "kwargs": [1, 2.5, None, True]}}
    store = EpisodeStore.from_episodes(episodes(), progress=False, info=info)
    store.save(tmp_path / "cache")
    assert EpisodeStore.load(tmp_path / "cache").info == info
    assert EpisodeStore.from_episodes(episodes(), progress=False).info == {}
    store.info["bad"] = torch.zeros(1)
    with pytest.raises(ValueError, match="info must hold JSON values"):
        store.save(tmp_path / "other")


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no store.safetensors in"):
        EpisodeStore.load(tmp_path)
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(2)}, str(tmp_path / "store.safetensors"))
    with pytest.raises(ValueError, match="is not an EpisodeStore of version 1"):
        EpisodeStore.load(tmp_path)


def test_repr_and_nbytes(capsys):
    store = EpisodeStore.from_episodes(episodes(), progress=True)
    assert "packing episodes" in capsys.readouterr().err  # the progress bar
    text = repr(store)
    assert "5 episodes" in text and "observation.images.top" in text and "uint8" in text
    expected = sum(
        t.numel() * t.element_size()
        for s in store.streams.values()
        for t in (s.values, s.times, s.offsets, *s.stats.values())
    ) + sum(t.numel() * 8 for t in store.episodes.values())
    assert store.nbytes == expected


@requires_cuda
def test_device_and_pinned_copies():
    store = EpisodeStore.from_episodes(episodes(), progress=False)
    on_gpu = store.to("cuda")
    assert on_gpu.device.type == "cuda" and torch.equal(
        on_gpu["force"].values.cpu(), store["force"].values
    )
    pinned = store.pin_memory()
    assert pinned["force"].values.is_pinned() and pinned.device.type == "cpu"


def test_built_on_a_device_equals_built_then_moved(device):
    eps = episodes()
    store = EpisodeStore.from_episodes(eps, progress=False, quantiles=(0.1,))
    built = EpisodeStore.from_episodes(eps, progress=False, quantiles=(0.1,), device=device)
    assert built.device.type == device and built.fps == store.fps
    assert built.tasks == store.tasks and set(built.keys()) == set(store.keys())
    for name, tensor in store.episodes.items():
        assert built.episodes[name].device.type == device
        assert torch.equal(built.episodes[name].cpu(), tensor)
    for key, s in store.streams.items():
        b = built[key]
        for t in (b.values, b.times, b.offsets, *b.stats.values()):
            assert t.device.type == device
        assert torch.equal(b.values.cpu(), s.values)
        assert torch.equal(b.times.cpu(), s.times) and torch.equal(b.offsets.cpu(), s.offsets)
        assert b.stats.keys() == s.stats.keys()
        for name, value in s.stats.items():
            assert_close(b.stats[name].cpu(), value, rtol=1e-12, atol=1e-12)
    # A bad episode is still caught on the host, before anything moves.
    bad = [{"x": (torch.zeros(3), torch.tensor([0, 2, 1]))}]
    with pytest.raises(ValueError, match="non-decreasing"):
        EpisodeStore.from_episodes(bad, progress=False, device=device)


def test_an_iterator_that_reuses_its_buffers_loses_nothing():
    buffer, times = torch.zeros(4, 2), torch.arange(4)

    def reusing():
        for e in range(3):
            buffer.fill_(e)  # a decoder writing each episode into the same memory
            yield {"x": (buffer, times)}

    store = EpisodeStore.from_episodes(reusing(), progress=False)
    assert store["x"].values[:, 0].tolist() == [0.0] * 4 + [1.0] * 4 + [2.0] * 4


def test_keys_with_any_characters_round_trip(tmp_path):
    t = torch.arange(3)
    eps = [
        {
            "cam": (torch.zeros(3), t),
            "cam/stats": (torch.ones(3), t),
            "obs/state": (torch.full((3,), 2.0), t),
        }
    ]
    store = EpisodeStore.from_episodes(eps, progress=False)
    store.save(tmp_path)
    store.save(tmp_path)  # saving over an existing cache replaces it whole
    loaded = EpisodeStore.load(tmp_path)
    assert list(loaded.keys()) == ["cam", "cam/stats", "obs/state"]
    for key in store.keys():
        assert torch.equal(loaded[key].values, store[key].values)
        assert loaded[key].stats.keys() == store[key].stats.keys()


def test_quantile_names():
    from robocache.data.store import quantile_name

    assert [quantile_name(q) for q in (0.01, 0.1, 0.5, 0.99, 0.995, 1.0)] == [
        "q01",
        "q10",
        "q50",
        "q99",
        "q99_5",
        "q100",
    ]
    with pytest.raises(ValueError, match="asked for twice"):
        EpisodeStore.from_episodes(episodes(2), progress=False, quantiles=(0.5, 0.5))
