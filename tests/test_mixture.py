"""Mixtures of stores: weights, key maps, missing keys, widths padded with a
mask, per-store normalisation, draws fixed by (seed, step, rank), and the
errors of bad entries. Each mixed window is checked against the window its
own store's sampler cuts for the same anchor."""

import math

import pytest
import torch

from robocache.data import EpisodeStore, Mixture, WindowSampler

MS = 10**6


def store(lengths, action_width, cameras, fps=10, seed=0, task="t"):
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for n in lengths:
        t = torch.arange(n) * (10**9 // fps)
        ep = {"act": (torch.randn(n, action_width, generator=g) * 3 + seed, t), "task": task}
        for cam in cameras:
            frames = torch.randint(0, 256, (n, 6, 8, 3), generator=g, dtype=torch.uint8)
            ep[cam] = (frames, t)
        episodes.append(ep)
    return EpisodeStore.from_episodes(episodes, progress=False)


def three_stores():
    """Three stores of different keys, rates, action widths and tasks."""
    a = store((12, 7, 20), 7, ["wrist", "top"], fps=10, seed=1, task="pick")
    b = store((30, 9), 4, ["front"], fps=5, seed=2, task="place")
    c = store((5, 5, 5, 5), 7, ["top"], fps=15, seed=3, task="push")
    return a, b, c


@pytest.fixture(scope="module")
def stores():
    return three_stores()


def mixture(stores, **kw):
    a, b, c = stores
    return Mixture(
        [(a, 0.5, {"act": "action"}), (b, 0.3, {"act": "action", "front": "top"}),
         (c, 0.2, {"act": "action"})],
        **kw,
    )  # fmt: skip


DELTAS = {"action": [0.0, 0.1, 0.2], "top": [-0.1, 0.0], "wrist": [0.0]}


def test_each_window_is_its_stores_window(stores):
    mix = mixture(stores, fill=-1.0)
    sampler = WindowSampler(mix, DELTAS, batch_size=48, seed=3)
    singles = [
        WindowSampler(s, {k: DELTAS[n] for k, n in zip(own, names)}, batch_size=1)
        for s, own, names in (
            (stores[0], ["act", "top", "wrist"], ["action", "top", "wrist"]),
            (stores[1], ["act", "front"], ["action", "top"]),
            (stores[2], ["act", "top"], ["action", "top"]),
        )
    ]
    batch = sampler.batch_at_step(5)
    assert batch["action"].shape == (48, 3, 7) and batch["action_mask"].shape == (48, 7)
    assert set(batch["dataset_index"].tolist()) == {0, 1, 2}
    for i in range(48):
        d = int(batch["dataset_index"][i])
        own = singles[d].batch_at([int(batch["index"][i])])
        width = 4 if d == 1 else 7
        assert torch.equal(batch["action"][i, :, :width], own["act"][0])
        assert bool((batch["action"][i, :, width:] == -1).all())
        assert batch["action_mask"][i].tolist() == [True] * width + [False] * (7 - width)
        top = own["front"] if d == 1 else own["top"]
        assert torch.equal(batch["top"][i], top[0])
        if d == 0:
            assert torch.equal(batch["wrist"][i], own["wrist"][0])
            assert not bool(batch["wrist_is_pad"][i].any())
        else:  # a key the store lacks: filled, all padding
            assert bool((batch["wrist"][i] == 0).all())  # fill is for float keys
            assert bool(batch["wrist_is_pad"][i].all())
        for name in ("episode_index", "frame_index", "timestamp"):
            assert batch[name][i] == own[name][0], name
        assert sampler.tasks[int(batch["task_index"][i])] == ["pick", "place", "push"][d]


def test_draws_follow_the_weights_and_are_fixed_by_seed_step_and_rank(stores):
    sampler = WindowSampler(mixture(stores), DELTAS, batch_size=64, seed=0)
    counts = torch.zeros(3)
    for step in range(150):
        stores_drawn, _ = sampler.draws(step)
        counts += torch.bincount(stores_drawn, minlength=3)
    expected = torch.tensor([0.5, 0.3, 0.2]) * counts.sum()
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.82, (counts, chi2)  # p = 0.001 with 2 degrees of freedom
    again = WindowSampler(mixture(stores), DELTAS, batch_size=64, seed=0)
    x, y = sampler.batch_at_step(7), again.batch_at_step(7)
    assert all(torch.equal(x[k], y[k]) for k in x)
    other = WindowSampler(mixture(stores), DELTAS, batch_size=64, seed=0, rank=1, world_size=2)
    assert not torch.equal(other.draws(7)[0], sampler.draws(7)[0])
    assert not torch.equal(sampler.draws(8)[0], sampler.draws(7)[0])


def test_balance_scales_weights_by_frames_and_epochs_are_steps(stores):
    a, b, c = stores
    mix = Mixture([(a, 1.0), (b, 1.0, {"front": "top"}), (c, 1.0)], balance=True, epoch_steps=3)
    frames = torch.tensor([39.0, 39.0, 20.0])
    assert torch.allclose(mix.weights, (frames / frames.sum()).double())
    sampler = WindowSampler(mix, {"top": [0.0]}, batch_size=4)
    assert len(sampler) == 3 and len(list(sampler)) == 3
    sampler.set_epoch(1)
    first = next(iter(sampler))
    assert torch.equal(first["index"], sampler.batch_at_step(3)["index"])
    default = WindowSampler(Mixture([(a, 1.0), (c, 1.0)]), {"top": [0.0]}, batch_size=8)
    assert len(default) == math.ceil((39 + 20) / 8)


def test_each_store_is_normalised_with_its_own_statistics(stores):
    mix = mixture(stores)
    sampler = WindowSampler(mix, {"action": [0.0]}, batch_size=64, normalize={"action": "mean_std"})
    batch = sampler.batch_at_step(0)
    for d, (s, width) in enumerate(zip(stores, (7, 4, 7))):
        rows = batch["dataset_index"] == d
        own = WindowSampler(s, {"act": [0.0]}, batch_size=1, normalize={"act": "mean_std"})
        expected = own.batch_at(batch["index"][rows])["act"]
        assert torch.equal(batch["action"][rows][..., :width], expected)
    pooled = mix.pooled_stats("top")
    tops = (stores[0]["top"], stores[1]["front"], stores[2]["top"])
    both = torch.cat([s.values for s in tops]).double()
    assert torch.allclose(pooled["mean"], both.mean(0)) and torch.allclose(
        pooled["std"], both.std(0, unbiased=False)
    )
    with pytest.raises(ValueError, match="'action' has samples of shapes"):
        mix.pooled_stats("action")


def test_bad_entries_and_mixes_are_clear_errors(stores):
    a, b, c = stores
    for entries, match in [
        ([(a, -1.0)], "weight must be a finite number >= 0"),
        ([(a, float("nan"))], "weight must be a finite number >= 0"),
        ([(a, 0.0), (b, 0)], "the weights sum to 0"),
        ([(a, True)], "weight must be a finite number >= 0"),
        ([(a,)], r"must be \(store, weight\)"),
        ([], "non-empty list"),
        ([(a, 1.0, {"nope": "x"})], r"maps \['nope'\], which the store lacks"),
        ([(a, 1.0, {"wrist": "top"})], "gives the name 'top' to both"),
        ([("store", 1.0)], "must be an EpisodeStore"),
    ]:
        with pytest.raises((ValueError, TypeError), match=match):
            Mixture(entries)
    with pytest.raises(ValueError, match="epoch_steps must be an int >= 1"):
        Mixture([(a, 1.0)], epoch_steps=0)
    big = store((6,), 7, ["top"], seed=4)
    big.streams["top"].values = torch.zeros(6, 12, 8, 3, dtype=torch.uint8)
    with pytest.raises(
        ValueError, match=r"'top' is \(6, 8, 3\) in one store and \(12, 8, 3\) in another"
    ):
        WindowSampler(Mixture([(a, 1.0), (big, 1.0)]), {"top": [-0.1, 0.0]})
    with pytest.raises(ValueError, match="no store of the mixture has"):
        WindowSampler(Mixture([(a, 1.0)]), {"gripper": [0.0]})
    with pytest.raises(ValueError, match="shuffle=False and drop_last=True do not apply"):
        WindowSampler(Mixture([(a, 1.0)]), {"top": [0.0]}, shuffle=False)


def test_a_mixture_of_placements_and_encodings(stores, tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    a, _, c = stores
    EpisodeStore.from_episodes(
        [{"top": (c["top"].values[:5], c["top"].times[:5])}], frames="png", progress=False
    ).save(tmp_path)
    mapped_png = EpisodeStore.load(tmp_path)
    mix = Mixture([(a, 0.5), (mapped_png, 0.5)])
    batch = WindowSampler(mix, {"top": [0.0]}, batch_size=16, images="float").batch_at_step(2)
    rows = batch["dataset_index"] == 1
    own = WindowSampler(mapped_png, {"top": [0.0]}, images="float").batch_at(batch["index"][rows])
    assert batch["top"].dtype == torch.float32 and torch.equal(batch["top"][rows], own["top"])


def test_the_mixture_example_trains_on_lerobot_and_rlds(tmp_path):
    pytest.importorskip("av", reason="the lerobot extra: pip install robocache[lerobot]")
    pytest.importorskip("pyarrow", reason="the lerobot extra: pip install robocache[lerobot]")
    pytest.importorskip("tfrecord", reason="the rlds extra: pip install robocache[rlds]")
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    import os
    import subprocess
    import sys

    from fixtures.images import jpeg
    from fixtures.lerobot import write_lerobot
    from fixtures.rlds import write_rlds

    write_lerobot(tmp_path / "lerobot", lengths=(12, 9))
    write_rlds(tmp_path / "rlds", lengths=(6, 8, 5), encode=jpeg, smooth=True, seed=0)
    example = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "train_mixture.py"
    )
    command = [sys.executable, example, str(tmp_path / "lerobot"), str(tmp_path / "rlds"),
               "--steps", "4", "--batch-size", "8", "--size", "16", "--device", "cpu"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "step 4: loss" in result.stdout and "Mixture(2 stores" in result.stdout
