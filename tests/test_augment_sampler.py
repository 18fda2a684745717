"""WindowSampler(augment=...): one draw per window from (seed, step, rank),
shared by the window's frames and (optionally) its cameras, equal to the op
applied to the plain batch; the Augment arguments' checks and draws."""

import math

import pytest
import torch
from conftest import DEVICES

import robocache
from robocache.data import Augment, EpisodeStore, Mixture, WindowSampler
from robocache.data.augment import augment_generator

DELTAS = {"top": [-0.1, 0.0], "wrist": [-0.1, 0.0], "act": [0.0]}
JITTER = dict(brightness=0.3, contrast=0.3, saturation=0.3, hue=0.05)


def store(still=False, episodes=3, n=12, seed=0):
    """Two cameras of 24 x 32 frames; ``still``: each episode's frames alike."""
    g = torch.Generator().manual_seed(seed)
    eps = []
    for _ in range(episodes):
        t = torch.arange(n) * 10**8
        x = torch.randint(0, 256, (1 if still else n, 3, 24, 32), generator=g).float()
        x = torch.nn.functional.avg_pool2d(x, 3, 1, 1).round().to(torch.uint8)
        x = x.permute(0, 2, 3, 1).expand(n, 24, 32, 3).contiguous()
        eps.append(
            {"top": (x, t), "wrist": (x.clone(), t), "act": (torch.randn(n, 2, generator=g), t)}
        )
    return EpisodeStore.from_episodes(eps, progress=False)


@pytest.mark.parametrize("device", DEVICES)
def test_frames_of_a_window_and_shared_cameras_are_augmented_alike(device):
    s = store(still=True).to(device)
    aug = Augment(crop_size=20, crop_scale=(0.3, 1.0), degrees=10, **JITTER)
    solo = Augment(crop_size=20, crop_scale=(0.3, 1.0), degrees=10, share_cameras=False, **JITTER)
    shared = WindowSampler(s, DELTAS, batch_size=16, augment={"top": aug, "wrist": aug})
    apart = WindowSampler(s, DELTAS, batch_size=16, augment={"top": aug, "wrist": solo})
    b, c = shared.batch_at(torch.arange(1, 17), step=4), apart.batch_at(torch.arange(1, 17), step=4)
    assert b["top"].shape == (16, 2, 20, 20, 3)
    assert torch.equal(b["top"][:, 0], b["top"][:, 1])  # a still episode: frames alike
    assert torch.equal(b["top"], b["wrist"])  # the same frames, the same draw
    assert not torch.equal(c["top"], c["wrist"])
    assert not torch.equal(b["top"][0, 0], b["top"][5, 0])  # windows draw apart


@pytest.mark.parametrize("device", DEVICES)
def test_a_batch_is_the_op_applied_to_the_plain_batch(device):
    s = store().to(device)
    aug = Augment(crop_size=(16, 24), crop_scale=(0.3, 1.0), degrees=15, **JITTER)
    plain = WindowSampler(s, DELTAS, batch_size=8, seed=5)
    augmented = WindowSampler(
        s, DELTAS, batch_size=8, seed=5, augment={"top": aug}, images={"top": "float_chw"}
    )
    index = torch.tensor([0, 3, 7, 12, 13, 20, 30, 35])
    got = augmented.batch_at(index, step=9)
    raw = plain.batch_at(index)
    params = aug.draw(8, 24, 32, augment_generator(5, 9, 0, "/shared")).to(device)
    expected = robocache.augment(raw["top"], params, (16, 24), output="float_chw")
    assert torch.equal(got["top"], expected) and got["top"].shape == (8, 2, 3, 16, 24)
    assert torch.equal(got["wrist"], raw["wrist"]) and torch.equal(got["act"], raw["act"])


def test_draws_are_fixed_by_seed_and_step():
    s = store()
    aug = {"top": Augment(crop_size=16, crop_scale=(0.3, 1.0), **JITTER)}
    a = WindowSampler(s, DELTAS, batch_size=8, seed=1, augment=aug)
    b = WindowSampler(s, DELTAS, batch_size=8, seed=1, augment=aug)
    index = torch.arange(8)
    assert torch.equal(a.batch_at(index, step=3)["top"], b.batch_at(index, step=3)["top"])
    assert not torch.equal(a.batch_at(index, step=3)["top"], a.batch_at(index, step=4)["top"])
    first = [batch["top"] for batch in a]
    again = [batch["top"] for batch in b]
    assert len(first) > 1 and all(torch.equal(x, y) for x, y in zip(first, again))
    # Calls without a step count up: the same draws in the same order.
    assert torch.equal(a.batch_at(index)["top"], b.batch_at(index)["top"])


def test_a_mixture_augments_each_stores_part():
    a, b = store(seed=1), store(seed=2, episodes=2)
    mix = Mixture([(a, 0.5), (b, 0.5, {"wrist": "top", "top": "wrist"})])
    aug = Augment(crop_size=16, crop_scale=(0.3, 1.0), **JITTER)
    sampler = WindowSampler(mix, DELTAS, batch_size=32, augment={"top": aug})
    batch = sampler.batch_at_step(2)
    assert batch["top"].shape == (32, 2, 16, 16, 3) and batch["wrist"].shape == (32, 2, 24, 32, 3)
    assert torch.equal(batch["top"], sampler.batch_at_step(2)["top"])


@pytest.mark.parametrize(
    "augment, message",
    [
        ({"cam": Augment()}, "augment names 'cam', which is not in delta_timestamps"),
        ({"top": "crop"}, r"augment\['top'\] must be a robocache.data.Augment"),
        ({"act": Augment()}, r"augment\['act'\]: augmentation takes uint8 \(H, W, C\) frames"),
        ({"top": Augment(crop_size=30)}, r"crop_size \(30, 30\) is larger than the frames"),
    ],
)
def test_bad_augment_options(augment, message):
    with pytest.raises((ValueError, TypeError), match=message):
        WindowSampler(store(), DELTAS, augment=augment)


def test_augment_and_normalize_together_are_refused():
    with pytest.raises(ValueError, match="normalise augmented frames in the policy"):
        WindowSampler(store(), DELTAS, augment={"top": Augment()}, normalize={"top": "mean_std"})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(crop_scale=(0.5, 1.2)), "crop_scale must be a range"),
        (dict(crop_scale=(0.0, 0.5)), "crop_scale must be above 0"),
        (dict(crop_ratio=(2.0, 1.0)), "crop_ratio must be a range"),
        (dict(brightness=-0.1), "brightness must be a number >= 0"),
        (dict(contrast=(-1, 2)), "contrast must be a range"),
        (dict(hue=0.6), "hue must be a range"),
        (dict(degrees=200), "degrees must be a range"),
        (dict(crop_size=0), "crop_size must be a positive int"),
        (dict(saturation="lots"), "saturation must be a number"),
        (dict(share_cameras=1), "share_cameras must be True or False"),
    ],
)
def test_bad_augment_arguments_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Augment(**kwargs)


@pytest.mark.parametrize("name", ["crop_ratio", "brightness", "contrast", "saturation"])
@pytest.mark.parametrize("value", [(1.0, math.inf), (math.nan, 2.0), (1.0, math.nan)])
def test_ranges_that_are_not_finite_are_refused_at_construction(name, value):
    with pytest.raises(
        ValueError, match=rf"Augment: {name} must be .*; got \({value[0]}, {value[1]}\)"
    ):
        Augment(**{name: value})


@pytest.mark.parametrize("name", ["crop_scale", "degrees", "hue", "brightness", "saturation"])
def test_a_nan_range_is_refused_at_construction(name):
    with pytest.raises(ValueError, match=rf"Augment: {name} must be .*; got nan"):
        Augment(**{name: math.nan})


def test_draws_follow_torchvisions_ranges():
    aug = Augment(
        crop_size=32, crop_scale=(0.2, 0.6), crop_ratio=(0.5, 2.0), degrees=(-5, 12), **JITTER
    )
    p = aug.draw(4000, 120, 160, augment_generator(0, 0, 0, "x")).double()
    top, left, h, w = p[:, 0], p[:, 1], p[:, 2], p[:, 3]
    assert (
        (top >= 0).all()
        and (left >= 0).all()
        and (top + h <= 120).all()
        and (left + w <= 160).all()
    )
    area = h * w / (120 * 160)
    assert area.min() > 0.19 and area.max() < 0.61  # whole pixels: a little past the range
    assert (w / h).min() > 0.45 and (w / h).max() < 2.1
    assert p[:, 4].min() >= -5 and p[:, 4].max() <= 12 and p[:, 4].std() > 3
    assert p[:, 5].min() >= 0.7 and p[:, 5].max() <= 1.3 and p[:, 8].abs().max() <= 0.05
    # Every order of the four ops turns up, about equally often.
    orders = torch.bincount(p[:, 9].long(), minlength=256)
    assert (orders > 0).sum() == 24 and orders.max() < 2 * 4000 / 24
    plain = Augment().draw(8, 120, 160, augment_generator(0, 0, 0, "x"))
    assert torch.isnan(plain[:, 5:9]).all() and (plain[:, 4] == 0).all()
    assert (plain[:, :4] == torch.tensor([0.0, 0.0, 120, 160])).all()


def test_a_crop_too_wide_for_its_ratios_falls_back_to_the_centre():
    aug = Augment(crop_size=8, crop_scale=(0.99, 1.0), crop_ratio=(4.0, 5.0))
    p = aug.draw(16, 100, 100, augment_generator(0, 0, 0, "x"))
    # No crop of 99 % of the area has a ratio of 4: the centre, cut to ratio 4.
    assert (p[:, :4] == torch.tensor([37.0, 0.0, 25, 100])).all(), p[0]
    assert not math.isnan(p[0, 9])
