"""A mixture packed into one store (Mixture(pack=...)): the same batches as
each store cut by its own sampler, for every option that acts per store
(normalisation, fill, widths, missing keys, image forms, ages,
augmentation), on the CPU and, where there is one, on the GPU, where
pack=None packs and replays each batch from a CUDA graph."""

import pytest
import torch
from conftest import DEVICES, requires_cuda
from test_mixture import DELTAS, three_stores

from robocache.data import Augment, EpisodeStore, Mixture, WindowSampler
from robocache.data.sampler.draws import Draws, step_base


@pytest.fixture(scope="module")
def stores():
    return three_stores()


def mixture(stores, device, pack, **kw):
    a, b, c = (s.to(device) for s in stores)
    return Mixture(
        [(a, 0.5, {"act": "action"}), (b, 0.3, {"act": "action", "front": "top"}),
         (c, 0.2, {"act": "action"})],
        pack=pack, **kw,
    )  # fmt: skip


OPTIONS = {
    "plain": ({}, {}),
    "fill": ({"fill": -1.0}, {}),
    "normalised": ({"fill": 2.0}, {"normalize": {"action": "mean_std"}}),
    "masked normalisation": ({}, {"normalize": {"action": ("min_max", [True] * 6 + [False])}}),
    "float frames and ages": ({"fill": -1.0}, {"images": "float_chw", "key_age": True}),
    "augmented": (
        {},
        {"augment": {"top": Augment(crop_size=5, crop_scale=(0.5, 1.0), brightness=0.2)}},
    ),
    "augmented, float and filled": (
        {"fill": -1.0},
        {
            "augment": {"wrist": Augment(crop_size=4, crop_scale=(0.5, 1.0), contrast=0.3)},
            "images": "float_chw",
        },
    ),
    "anchored": ({}, {"anchor": "top", "drop_n_last_frames": 1}),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", list(OPTIONS))
def test_packed_batches_equal_each_stores_own(stores, device, case):
    mix_kw, kw = OPTIONS[case]
    apart = WindowSampler(mixture(stores, device, False, **mix_kw), DELTAS, batch_size=48, **kw)
    packed = WindowSampler(mixture(stores, device, True, **mix_kw), DELTAS, batch_size=48, **kw)
    assert not apart.packed and packed.packed
    for step in (0, 5):
        x, y = apart.batch_at_step(step), packed.batch_at_step(step)
        assert sorted(x) == sorted(y)
        assert len(set(x["dataset_index"].tolist())) == 3
        for key in x:
            torch.testing.assert_close(y[key], x[key], rtol=1e-6, atol=1e-6, msg=key)
        if case == "augmented":
            assert x["top"].shape == (48, 2, 5, 5, 3)


def test_draws_are_the_same_on_the_host_and_the_device_and_follow_the_weights():
    draws = Draws(torch.tensor([0.5, 0.0, 0.3, 0.2]), [10, 5, 7, 3], "cpu")
    base = step_base(7, 3, 0)
    store_of, position = draws(base, 60000)
    # chi-square, 2 degrees of freedom (the zero-weight store never drawn): p > 0.001
    expected = torch.tensor([0.5, 0.3, 0.2]) * 60000
    observed = torch.bincount(store_of, minlength=4)[[0, 2, 3]].double()
    assert (store_of != 1).all() and ((observed - expected) ** 2 / expected).sum() < 13.8
    within = position - draws.starts[store_of]
    for i, n in ((0, 10), (2, 7), (3, 3)):
        got = within[store_of == i]
        assert got.min() == 0 and got.max() == n - 1
    if torch.cuda.is_available():
        on_gpu = Draws(torch.tensor([0.5, 0.0, 0.3, 0.2]), [10, 5, 7, 3], "cuda")
        s, p = on_gpu(torch.tensor([base], device="cuda"), 60000)
        assert torch.equal(s.cpu(), store_of) and torch.equal(p.cpu(), position)
    with pytest.raises(ValueError, match="store 1 has weight 0.5 but no anchors"):
        Draws(torch.tensor([0.5, 0.5]), [4, 0], "cpu")


def test_pack_true_where_a_key_is_not_on_the_device_is_an_error(stores, tmp_path):
    a, b, c = stores
    b.save(tmp_path / "b")
    mapped = type(b).load(tmp_path / "b", mmap=True)
    mix = Mixture([(a, 0.5, {"act": "action"}), (mapped, 0.5, {"act": "action", "front": "top"})],
                  pack=True)  # fmt: skip
    with pytest.raises(ValueError, match=r"pack=True\) needs every store's asked keys"):
        WindowSampler(mix, {"action": [0.0]}, batch_size=4)
    with pytest.raises(ValueError, match="pack must be None, True or False"):
        Mixture([(a, 1.0)], pack="yes")


@requires_cuda
def test_on_the_gpu_pack_none_packs_and_replays_graphs(stores):
    auto = WindowSampler(mixture(stores, "cuda", None), DELTAS, batch_size=32)
    apart = WindowSampler(mixture(stores, "cuda", False), DELTAS, batch_size=32)
    assert auto.packed and auto.graphs is not None
    for step in range(4):
        x, y = auto.batch_at_step(step), apart.batch_at_step(step)
        for key in x:
            torch.testing.assert_close(x[key], y[key], rtol=1e-6, atol=1e-6, msg=key)
    batches = list(auto)  # replayed from the graphs, fed by the cursor
    assert len(batches) == len(auto) and batches[0]["action"].is_cuda
    torch.testing.assert_close(batches[1]["action"], apart.batch_at_step(1)["action"])


def test_a_normalisation_mask_leaves_its_dimensions_as_they_are(stores):
    a = stores[0]
    deltas = {"act": [0.0, 0.1]}
    mask = [True, False, True, True, True, True, False]
    plain = WindowSampler(a, deltas, batch_size=8, shuffle=False).batch_at(torch.arange(8))
    masked = WindowSampler(a, deltas, batch_size=8, normalize={"act": ("mean_std", mask)}).batch_at(
        torch.arange(8)
    )
    whole = WindowSampler(a, deltas, batch_size=8, normalize={"act": "mean_std"}).batch_at(
        torch.arange(8)
    )
    keep = torch.tensor(mask)
    assert torch.equal(masked["act"][..., ~keep], plain["act"][..., ~keep])
    torch.testing.assert_close(masked["act"][..., keep], whole["act"][..., keep])
    for bad in ([True] * 6, [1] * 7, "mask"):
        with pytest.raises(ValueError, match="the mask must be 7 bools"):
            WindowSampler(a, deltas, normalize={"act": ("mean_std", bad)})


def test_frames_of_different_sizes_augmented_to_one_are_cut_apart():
    g = torch.Generator().manual_seed(0)

    def frames(h, w):
        t = torch.arange(6) * 10**8
        x = torch.randint(0, 256, (6, h, w, 3), generator=g, dtype=torch.uint8)
        return EpisodeStore.from_episodes([{"top": (x, t)}] * 2, progress=False)

    small, large = frames(6, 8), frames(9, 12)
    aug = {"top": Augment(crop_size=4, crop_scale=(0.5, 1.0))}
    for pack in (None, False):
        sampler = WindowSampler(
            Mixture([(small, 0.5), (large, 0.5)], pack=pack), {"top": [0.0]}, batch_size=8,
            augment=aug,
        )  # fmt: skip
        assert not sampler.packed and sampler.batch_at_step(1)["top"].shape == (8, 1, 4, 4, 3)
    with pytest.raises(
        ValueError, match=r"'top' has samples of shapes \[\(6, 8, 3\), \(9, 12, 3\)\]"
    ):
        WindowSampler(Mixture([(small, 0.5), (large, 0.5)], pack=True), {"top": [0.0]}, augment=aug)


def test_a_mask_on_a_scalar_key():
    t = torch.arange(5) * 10**8
    s = EpisodeStore.from_episodes([{"g": (torch.randn(5), t)}] * 2, progress=False)
    for pack in (False, True):
        mix = Mixture([(s, 0.5), (s, 0.5)], pack=pack)
        batch = WindowSampler(
            mix, {"g": [0.0]}, batch_size=4, normalize={"g": ("mean_std", [False])}
        ).batch_at_step(0)
        raw = WindowSampler(mix, {"g": [0.0]}, batch_size=4).batch_at_step(0)
        assert torch.equal(batch["g"], raw["g"])
