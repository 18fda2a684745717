"""robocache.data.WindowSampler: LeRobot parity, epochs, padding, gaps,
interval means, normalisation, devices."""

import math

import pytest
import torch
from conftest import requires_cuda
from torch.testing import assert_close

from robocache import reference
from robocache.data import EpisodeStore, WindowSampler

MS = 1_000_000


def lerobot_like(lengths, fps=10, cam_shape=(3, 4, 5)):
    """Episodes as LeRobot stores them: one frame clock, float32 timestamps
    frame_index / fps from each episode's start."""
    eps = []
    for e, n in enumerate(lengths):
        t = torch.arange(n, dtype=torch.float32) / fps
        eps.append(
            {
                "observation.state": (torch.randn(n, 14), t),
                "action": (torch.randn(n, 7), t),
                "observation.images.top": (
                    torch.randint(0, 256, (n, *cam_shape), dtype=torch.uint8),
                    t,
                ),
                "task": f"task {e % 2}",
                "episode_index": 100 + e,
            }
        )
    return eps


def lerobot_window(store, key, index, deltas, fps):
    """LeRobot's rule, restated: each delta is round(delta * fps) frames from
    the anchor, clamped to the episode; pad where the clamp acted."""
    s = store[key]
    ends = s.offsets[1:]
    values, pads = [], []
    for i in index.tolist():
        e = int(torch.searchsorted(ends, torch.tensor(i), right=True))
        start, end = int(s.offsets[e]), int(s.offsets[e + 1])
        rows = [i + round(d * fps) for d in deltas]
        pads.append([not start <= r < end for r in rows])
        values.append(s.values[[min(max(r, start), end - 1) for r in rows]])
    return torch.stack(values), torch.tensor(pads)


def test_lerobot_parity_including_first_last_and_single_frame_episodes():
    fps = 10
    store = EpisodeStore.from_episodes(lerobot_like([1, 6, 15, 2], fps), fps=fps, progress=False)
    deltas = {
        "action": [k / fps for k in range(16)],
        "observation.state": [-0.1, 0.0],
        "observation.images.top": [-0.2, -0.1, 0.0],
    }
    sampler = WindowSampler(store, deltas, batch_size=7, shuffle=False, images="float")
    seen = []
    for batch in sampler:
        index = batch["index"]
        seen += index.tolist()
        for key, d in deltas.items():
            values, pad = lerobot_window(store, key, index, d, fps)
            if key == "observation.images.top":
                values = values.float() / 255
            assert torch.equal(batch[key], values), key
            assert torch.equal(batch[f"{key}_is_pad"], pad), key
        offsets = store["action"].offsets
        episode = torch.searchsorted(offsets[1:], index, right=True)
        assert torch.equal(batch["episode_index"], 100 + episode)
        assert torch.equal(batch["frame_index"], index - offsets[episode])
        assert torch.equal(batch["timestamp"], (batch["frame_index"].float() / fps))
        assert torch.equal(batch["task_index"], episode % 2)
    assert seen == list(range(24))  # every frame anchors once, first and last included


def test_epochs_are_permutations_fixed_by_seed_and_epoch():
    store = EpisodeStore.from_episodes(lerobot_like([5, 9, 4]), progress=False)
    sampler = WindowSampler(store, {"action": [0.0]}, batch_size=4, seed=3)

    def epoch(e):
        sampler.set_epoch(e)
        return torch.cat([b["index"] for b in sampler]).tolist()

    first = epoch(0)
    assert sorted(first) == list(range(18)) and len(sampler) == 5
    assert epoch(0) == first and epoch(1) != first
    other = WindowSampler(store, {"action": [0.0]}, batch_size=4, seed=4)
    assert torch.cat([b["index"] for b in other]).tolist() != first


def test_drop_last_and_drop_n_last_frames():
    store = EpisodeStore.from_episodes(lerobot_like([5, 9, 4]), progress=False)
    sampler = WindowSampler(
        store, {"action": [0.0]}, batch_size=4, drop_last=True, drop_n_last_frames=2, shuffle=False
    )
    assert sampler.num_anchors == 3 + 7 + 2 and len(sampler) == 3
    index = torch.cat([b["index"] for b in sampler]).tolist()
    assert index == [0, 1, 2, 5, 6, 7, 8, 9, 10, 11, 14, 15]
    with pytest.raises(ValueError, match="batch_size 64 exceeds the 18 anchors"):
        WindowSampler(store, {"action": [0.0]}, batch_size=64, drop_last=True)


def test_multi_rate_keys_follow_their_own_clocks():
    # joints at 100 Hz, a camera at 30 Hz starting 50 ms late.
    joints_t = torch.arange(200) * 10 * MS
    cam_t = 50 * MS + (torch.arange(55) * 1e9 / 30).round().long()
    eps = [
        {
            "joints": (torch.randn(200, 6, dtype=torch.float64), joints_t),
            "cam": (torch.randint(0, 255, (55, 2, 2), dtype=torch.uint8), cam_t),
        }
    ]
    store = EpisodeStore.from_episodes(eps * 2, progress=False)
    deltas = {"joints": [-0.015, 0.0, 0.0125], "cam": [-1 / 30, 0.0]}
    sampler = WindowSampler(store, deltas, modes={"joints": "linear"}, batch_size=50)
    batch = next(iter(sampler))
    assert sampler.anchor == "joints"
    index = batch["index"]
    episode = torch.searchsorted(store["joints"].offsets[1:], index, right=True)
    for key, mode in (("joints", "linear"), ("cam", "nearest")):
        q = store["joints"].times[index].unsqueeze(1) + torch.tensor(
            [round(d * 1e9) for d in deltas[key]]
        )
        s = store[key]
        values, pad, _ = reference.sample_windows(
            s.values, s.times, s.offsets, episode, q, mode, edge_tolerance=100_000
        )
        assert_close(batch[key], values, rtol=1e-12, atol=1e-12)
        assert torch.equal(batch[f"{key}_is_pad"], pad)


def test_a_drop_out_is_padding_with_a_tolerance_and_has_an_age():
    t = torch.cat([torch.arange(10), torch.arange(60, 70)]) * 10 * MS  # 0.5 s missing
    eps = [{"state": (torch.arange(20.0).unsqueeze(1), t)}]
    store = EpisodeStore.from_episodes(eps, progress=False)
    sampler = WindowSampler(
        store,
        {"state": [0.0, 0.2]},
        tolerance_s={"state": 0.015},
        key_age=True,
        shuffle=False,
        batch_size=20,
    )
    batch = next(iter(sampler))
    # Anchor frame 5 (50 ms) + 0.2 s = 250 ms: inside the gap, 160 ms after frame 9.
    assert batch["state_is_pad"][5].tolist() == [False, True]
    assert_close(batch["state_age"][5], torch.tensor([0.0, 0.16]))
    # Anchor frame 9 (90 ms) + 0.2 s = 290 ms lies 200 ms past frame 9 and 310 ms
    # before frame 10: padding too; without a tolerance it would hold frame 9.
    plain = WindowSampler(store, {"state": [0.0, 0.2]}, shuffle=False, batch_size=20)
    assert not next(iter(plain))["state_is_pad"][9].any()
    assert batch["state_is_pad"][9].tolist() == [False, True]


def test_interval_mean_downsamples_force_without_aliasing():
    t = torch.arange(3000) * MS  # 1 kHz
    force = torch.randn(3000, 6, dtype=torch.float64)
    anchor_t = torch.arange(0, 3000, 100) * MS  # 10 Hz
    eps = [{"force": (force, t), "frame": (torch.zeros(30, 1), anchor_t)}]
    store = EpisodeStore.from_episodes(eps, progress=False)
    deltas = [-0.2, -0.1, 0.0]
    sampler = WindowSampler(
        store,
        {"force": deltas},
        modes={"force": "mean"},
        anchor="frame",
        shuffle=False,
        batch_size=30,
    )
    batch = next(iter(sampler))
    for b in range(5, 30):
        for j, d in enumerate(deltas):
            end = b * 100 + round(d * 1000)  # the sample at the query time
            assert_close(
                batch["force"][b, j], force[end - 99 : end + 1].mean(0), rtol=1e-14, atol=1e-14
            )
    assert batch["force_is_pad"][0].tolist() == [True, True, False]  # before the first sample


def test_normalisation_on_the_device():
    store = EpisodeStore.from_episodes(lerobot_like([8, 9]), progress=False)
    raw = WindowSampler(store, {"action": [0.0, 0.1]}, shuffle=False, batch_size=17)
    norm = WindowSampler(
        store,
        {"action": [0.0, 0.1]},
        shuffle=False,
        batch_size=17,
        normalize={"action": "mean_std"},
    )
    minmax = WindowSampler(
        store, {"action": [0.0, 0.1]}, shuffle=False, batch_size=17, normalize={"action": "min_max"}
    )
    x, stats = next(iter(raw))["action"], store["action"].stats
    assert_close(next(iter(norm))["action"], ((x - stats["mean"]) / (stats["std"] + 1e-8)).float())
    y = next(iter(minmax))["action"]
    assert_close(y, (2 * (x - stats["min"]) / (stats["max"] - stats["min"] + 1e-8) - 1).float())
    assert y.min() >= -1 - 1e-6 and y.max() <= 1 + 1e-6


def test_errors():
    store = EpisodeStore.from_episodes(lerobot_like([3]), progress=False)
    with pytest.raises(KeyError, match="no stream 'gripper'"):
        WindowSampler(store, {"gripper": [0.0]})
    with pytest.raises(ValueError, match=r"modes names keys not in delta_timestamps: \['state'\]"):
        WindowSampler(store, {"action": [0.0]}, modes={"state": "linear"})
    with pytest.raises(ValueError, match="must be a finite number of seconds"):
        WindowSampler(store, {"action": [math.nan]})
    with pytest.raises(ValueError, match="normalize\\['action'\\] must be 'mean_std' or 'min_max'"):
        WindowSampler(store, {"action": [0.0]}, normalize={"action": "z"})
    with pytest.raises(ValueError, match="mode 'mean' for 'action' needs interval_s"):
        WindowSampler(store, {"action": [0.0]}, modes={"action": "mean"})
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        WindowSampler(store, {"action": [0.0]}, batch_size=0)
    with pytest.raises(
        ValueError, match="modes\\['action'\\] must be one of 'nearest', 'previous'"
    ):
        WindowSampler(store, {"action": [0.0]}, modes={"action": "cubic"})
    with pytest.raises(ValueError, match=r"modes\['observation.state'\] must be .* got 'cubic'"):
        WindowSampler(
            store,
            {"action": [0.0], "observation.state": [0.0]},
            modes={"observation.state": "cubic"},
        )
    with pytest.raises(ValueError, match=r"tolerance_s\['action'\] must be >= 0"):
        WindowSampler(store, {"action": [0.0]}, tolerance_s={"action": -0.1})
    with pytest.raises(ValueError, match=r"interval_s\['action'\] must be >= 0"):
        WindowSampler(store, {"action": [0.0]}, modes={"action": "mean"}, interval_s={"action": -1})
    # An anchor that is no frame of the store (on the CPU the operator reads index).
    sampler = WindowSampler(store, {"action": [0.0]}, anchor="action")
    with pytest.raises(ValueError, match=r"index\[1\] = 3 is not a row of any episode"):
        sampler.batch_at([0, 3])
    with pytest.raises(ValueError, match=r"index\[0\] = -1 is not a row"):
        sampler.batch_at([-1])
    with pytest.raises(
        ValueError, match=r"cuda_graph=True needs the store and the batches on a CUDA"
    ):
        WindowSampler(store, {"action": [0.0]}, cuda_graph=True)
    with pytest.raises(ValueError, match="graph_buffers must be an int >= 1; got 0"):
        WindowSampler(store, {"action": [0.0]}, graph_buffers=0)
    with pytest.raises(ValueError, match="cuda_graph must be True or False"):
        WindowSampler(store, {"action": [0.0]}, cuda_graph="yes")


@requires_cuda
@pytest.mark.parametrize("pinned", [False, True])
def test_batches_on_the_gpu_match_the_cpu(pinned):
    store = EpisodeStore.from_episodes(lerobot_like([1, 6, 15, 2]), progress=False)
    deltas = {"action": [k / 10 for k in range(16)], "observation.images.top": [-0.1, 0.0]}
    gpu_store = store.pin_memory() if pinned else store.to("cuda")
    on_gpu = WindowSampler(gpu_store, deltas, shuffle=False, batch_size=8, device="cuda")
    on_cpu = WindowSampler(store, deltas, shuffle=False, batch_size=8)
    for a, b in zip(on_gpu, on_cpu):
        for key in b:
            assert a[key].device.type == "cuda"
            assert torch.equal(a[key].cpu(), b[key]), key


def test_normalised_images_as_float_use_the_stored_statistics():
    store = EpisodeStore.from_episodes(lerobot_like([6, 7]), progress=False)
    keys = {"observation.images.top": [0.0]}
    as_uint8 = WindowSampler(
        store, keys, shuffle=False, batch_size=13, normalize={"observation.images.top": "mean_std"}
    )
    as_float = WindowSampler(
        store,
        keys,
        shuffle=False,
        batch_size=13,
        normalize={"observation.images.top": "mean_std"},
        images="float",
    )
    assert_close(
        next(iter(as_float))["observation.images.top"],
        next(iter(as_uint8))["observation.images.top"],
    )


def test_timestamps_are_seconds_into_the_episode():
    start = 1_700_000_000 * 10**9  # unix-epoch nanoseconds, as ROS logs have them
    t = start + torch.arange(20) * 50 * MS
    store = EpisodeStore.from_episodes([{"x": (torch.zeros(20, 1), t)}], progress=False)
    batch = WindowSampler(store, {"x": [0.0]}, shuffle=False, batch_size=20).batch_at(
        torch.arange(20)
    )
    assert_close(batch["timestamp"], torch.arange(20) * 0.05)


def test_a_blending_mode_on_integer_values_fails_at_construction():
    store = EpisodeStore.from_episodes(lerobot_like([3]), progress=False)
    with pytest.raises(
        ValueError, match=r"mode 'linear' for 'observation.images.top' needs floating values"
    ):
        WindowSampler(
            store, {"observation.images.top": [0.0]}, modes={"observation.images.top": "linear"}
        )


def test_images_as_lerobot_returns_them():
    store = EpisodeStore.from_episodes(lerobot_like([6, 7], cam_shape=(5, 4, 3)), progress=False)
    keys = {"observation.images.top": [-0.1, 0.0]}
    raw = next(iter(WindowSampler(store, keys, shuffle=False, batch_size=13)))[
        "observation.images.top"
    ]
    chw = next(iter(WindowSampler(store, keys, shuffle=False, batch_size=13, images="float_chw")))
    assert chw["observation.images.top"].shape == (13, 2, 3, 5, 4)
    assert torch.equal(chw["observation.images.top"], raw.permute(0, 1, 4, 2, 3).float() / 255)


@requires_cuda
def test_cuda_graph_batches_equal_plain_batches_and_never_change_while_held():
    store = EpisodeStore.from_episodes(lerobot_like([1, 6, 15, 2]), progress=False).to("cuda")
    deltas = {"action": [k / 10 for k in range(16)], "observation.images.top": [-0.1, 0.0]}
    kw = dict(batch_size=5, seed=3, modes={"action": "linear"}, images="float_chw")
    plain = WindowSampler(store, deltas, cuda_graph=False, **kw)
    graphed = WindowSampler(store, deltas, cuda_graph=True, **kw)
    for epoch in range(2):  # an epoch's last batch is smaller: graphs of its own
        plain.set_epoch(epoch)
        graphed.set_epoch(epoch)
        count = 0
        for expected, got in zip(plain, graphed):
            assert expected.keys() == got.keys()
            for key in expected:
                assert torch.equal(expected[key], got[key]), (epoch, count, key)
            count += 1
        assert count == len(graphed) == 5
    # A batch kept never changes, however many are drawn after it: the ring
    # of graphs grows while batches are held (a variable, a view) ...
    index = [torch.tensor([3, 1, 4, 1, 5], device="cuda") + k for k in range(8)]
    expected = [plain.batch_at(i)["action"] for i in index]
    kept = [graphed.batch_at(i) for i in index[:4]]
    view = kept[0]["action"][:, :2]
    for i, want in zip(index[4:], expected[4:]):
        assert torch.equal(graphed.batch_at(i)["action"], want)
    for batch, want in zip(kept, expected):
        assert torch.equal(batch["action"], want)
    assert torch.equal(view, expected[0][:, :2])
    slots = graphed.graphs[("index", 5)]
    assert slots > 4
    # ... and batches let go let their graphs replay again, with no new one.
    del kept, batch, view
    for i, want in zip(index, expected):
        assert torch.equal(graphed.batch_at(i)["action"], want)
    assert graphed.graphs[("index", 5)] == slots
