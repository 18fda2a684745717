"""What a hostile user does to a sampler: DataLoaders around it, anchors no
store has, 2-D indices, copies and pickles, integers of numpy's types,
weights at the float range's top or 0, and episode indices past int64.
Each is a clear error naming the argument, or works."""

import copy
import pickle

import numpy as np
import pytest
import torch
from conftest import DEVICES, requires_cuda
from test_mixture import DELTAS, store, three_stores

from robocache.data import EpisodeStore, Mixture, WindowSampler


@pytest.fixture(scope="module")
def stores():
    return three_stores()


def mixture(stores, weights=(0.5, 0.3, 0.2), **kw):
    a, b, c = stores
    return Mixture(
        [(a, weights[0], {"act": "action"}), (b, weights[1], {"act": "action", "front": "top"}),
         (c, weights[2], {"act": "action"})],
        **kw,
    )  # fmt: skip


def same_batches(x, y):
    assert sorted(x) == sorted(y)
    for key in x:
        assert torch.equal(x[key], y[key]), key


# -- DataLoaders -------------------------------------------------------------------


def test_a_mixture_sampler_inside_a_dataloader_worker_raises(stores, monkeypatch):
    sampler = WindowSampler(mixture(stores), DELTAS, batch_size=8)
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with pytest.raises(RuntimeError, match="inside a DataLoader worker, where every worker"):
        next(iter(sampler))
    monkeypatch.undo()
    assert next(iter(sampler))["action"].shape[0] == 8


@pytest.mark.parametrize("num_workers", [0, 1])
@pytest.mark.parametrize("source", ["store", "mixture"])
def test_a_dataloader_indexing_the_sampler_says_to_iterate_it(stores, source, num_workers):
    if source == "store":
        sampler = WindowSampler(stores[0], {"act": [0.0]}, batch_size=4)
    else:
        sampler = WindowSampler(mixture(stores), DELTAS, batch_size=4)
    loader = torch.utils.data.DataLoader(sampler, batch_size=None, num_workers=num_workers)
    with pytest.raises(TypeError, match="Iterate the sampler itself in the training loop"):
        next(iter(loader))


# -- anchors -----------------------------------------------------------------------


def test_a_mixture_anchor_no_store_has_is_an_error_naming_it(stores):
    with pytest.raises(ValueError, match=r"anchor 'actoin' is no key of the mixture's stores"):
        WindowSampler(mixture(stores), DELTAS, anchor="actoin")


def test_a_mixture_anchor_some_stores_lack_warns_naming_them(stores):
    with pytest.warns(UserWarning, match=r"anchor 'wrist': the mixture's stores \[1, 2\] lack it"):
        sampler = WindowSampler(mixture(stores), DELTAS, batch_size=16, anchor="wrist")
    # store 0 anchors on its wrist frames, the others on their default stream
    assert [s.anchor for s in sampler._batches.samplers] == ["wrist", "act", "act"]


def test_a_mixture_anchor_every_store_has_does_not_warn(stores, recwarn):
    sampler = WindowSampler(mixture(stores), DELTAS, batch_size=16, anchor="top")
    assert not [w for w in recwarn if "anchor" in str(w.message)]
    assert [s.anchor for s in sampler._batches.samplers] == ["top", "front", "top"]


# -- batch_at's index --------------------------------------------------------------


@pytest.mark.parametrize(
    "index", [[[0, 1], [1, 2]], np.array([[0, 1], [1, 2]]), torch.tensor([[0, 1], [1, 2]])]
)
def test_batch_at_refuses_a_2d_index_naming_its_shape(stores, index):
    sampler = WindowSampler(stores[0], {"act": [0.0]}, batch_size=4)
    with pytest.raises(ValueError, match=r"batch_at: index must be \(B,\) rows.*shape \(2, 2\)"):
        sampler.batch_at(index)
    with pytest.raises(ValueError, match=r"batch_at: index must be a \(B,\) sequence"):
        sampler.batch_at([[0, 1], [2]])
    assert sampler.batch_at([0, 1, 1, 2])["index"].tolist() == [0, 1, 1, 2]


# -- copies and pickles ------------------------------------------------------------


def samplers(stores, device):
    on = [s.to(device) for s in stores]
    return {
        "store": (WindowSampler(on[0], {"act": [0.0, 0.1], "top": [0.0]}, batch_size=4), None),
        "mixture": (WindowSampler(mixture(on), DELTAS, batch_size=8), 3),
    }


def source_of(sampler):
    return sampler.store if sampler.mixture is None else sampler.mixture


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", ["store", "mixture"])
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "copy"])
def test_a_copied_or_pickled_sampler_is_made_again_at_its_epoch(stores, device, source, how):
    sampler, step = samplers(stores, device)[source]
    sampler.set_epoch(2)
    first = next(iter(sampler))  # CUDA graphs, streams and threads made, where it has them
    remake = {"pickle": lambda s: pickle.loads(pickle.dumps(s)), "deepcopy": copy.deepcopy}
    again = remake.get(how, copy.copy)(sampler)
    assert type(again) is WindowSampler and again is not sampler and again.epoch == 2
    same_batches(next(iter(again)), first)
    if step is None:
        same_batches(again.batch_at([3, 0]), sampler.batch_at([3, 0]))
    else:
        same_batches(again.batch_at_step(step), sampler.batch_at_step(step))
    again.set_epoch(5)
    assert sampler.epoch == 2
    # a shallow copy shares the store or mixture, a deep one (or a pickle) copies it
    assert (source_of(again) is source_of(sampler)) == (how == "copy")


@requires_cuda
def test_a_sampler_replaying_cuda_graphs_pickles(stores):
    sampler = WindowSampler(
        stores[0].to("cuda"), {"act": [0.0, 0.1]}, batch_size=4, cuda_graph=True
    )
    batches = [b["act"].clone() for b in sampler]
    again = pickle.loads(pickle.dumps(sampler))
    assert all(torch.equal(x, y["act"]) for x, y in zip(batches, again))


# -- integers ----------------------------------------------------------------------


@pytest.mark.parametrize("value", [True, -1, 1.0, "1"])
def test_drop_n_last_frames_errors_show_the_value_passed(stores, value):
    with pytest.raises(ValueError, match=rf"drop_n_last_frames must be an int >= 0; got {value!r}"):
        WindowSampler(stores[0], {"act": [0.0]}, drop_n_last_frames=value)


def test_numpy_integers_are_integers(stores):
    kw = dict(batch_size=4, shuffle=False)
    plain = WindowSampler(stores[0], {"act": [0.0]}, drop_n_last_frames=1, **kw)
    numpy = WindowSampler(
        stores[0], {"act": [0.0]}, drop_n_last_frames=np.int64(1), read_ahead=np.int64(1),
        prefetch=np.int32(0), rank=np.int64(0), world_size=np.int64(1),
        graph_buffers=np.int64(3), seed=np.int64(0), **kw,
    )  # fmt: skip
    assert numpy.num_anchors == plain.num_anchors == 39 - 3
    assert type(numpy.rank) is int and type(numpy.world_size) is int
    same_batches(next(iter(numpy)), next(iter(plain)))
    assert len(WindowSampler(mixture(stores, epoch_steps=np.int64(4)), DELTAS)) == 4


def test_drop_last_must_be_a_bool(stores):
    with pytest.raises(ValueError, match="drop_last must be True or False; got 0"):
        WindowSampler(stores[0], {"act": [0.0]}, drop_last=0)
    with pytest.raises(ValueError, match="drop_last must be True or False; got 0"):
        WindowSampler(mixture(stores), DELTAS, drop_last=0)


# -- weights -----------------------------------------------------------------------


@pytest.mark.parametrize("balance", [False, True])
def test_weights_whose_sum_overflows_are_normalised(stores, balance):
    mix = mixture(stores, weights=(1e308, 1e308, 0.0), balance=balance)
    frames = torch.tensor([39.0, 39.0]) if balance else torch.ones(2)
    assert torch.allclose(mix.weights[:2], (frames / frames.sum()).double())
    assert mix.weights[2] == 0
    batch = WindowSampler(mix, DELTAS, batch_size=64).batch_at_step(0)
    assert set(batch["dataset_index"].tolist()) == {0, 1}


@pytest.mark.parametrize("pack", [False, True])
def test_a_store_of_weight_0_is_never_drawn_nor_checked(stores, pack):
    a, b, c = stores
    empty = store((3, 2), 7, [], seed=5, task="idle")  # no anchors past 3 dropped frames
    lacking = store((4,), 7, [], seed=6, task="other")  # "act" only, mapped to no key asked
    mix = Mixture(
        [(a, 0.5, {"act": "action"}), (empty, 0.0, {"act": "action"}), (c, 0.5, {"act": "action"}),
         (lacking, 0.0)],
        pack=pack,
    )  # fmt: skip
    deltas = {"action": [0.0], "top": [0.0]}
    sampler = WindowSampler(mix, deltas, batch_size=64, drop_n_last_frames=3, seed=1)
    assert sampler.packed == pack
    batch = sampler.batch_at_step(2)
    assert set(batch["dataset_index"].tolist()) == {0, 2}
    stores_drawn, _ = sampler.draws(2)
    assert torch.equal(stores_drawn, batch["dataset_index"].cpu())
    for i in range(64):
        task = sampler.tasks[int(batch["task_index"][i])]
        assert task == ("pick" if int(batch["dataset_index"][i]) == 0 else "push")
    assert sampler.num_anchors == a["act"].num_samples + c["act"].num_samples - 3 * 7
    # The same draws as the mixture without them.
    without = Mixture([(a, 0.5, {"act": "action"}), (c, 0.5, {"act": "action"})], pack=pack)
    other = WindowSampler(without, deltas, batch_size=64, drop_n_last_frames=3, seed=1)
    twin = other.batch_at_step(2)
    assert torch.equal(twin["dataset_index"] * 2, batch["dataset_index"])
    for key in ("action", "top", "index", "episode_index", "frame_index"):
        assert torch.equal(twin[key], batch[key]), key


def test_a_key_only_stores_of_weight_0_have_is_an_error(stores):
    a, b, _ = stores
    mix = Mixture([(a, 0.0), (b, 1.0)])
    with pytest.raises(ValueError, match=r"names \['wrist'\], which only stores of weight 0"):
        WindowSampler(mix, {"front": [0.0], "wrist": [0.0]})


# -- episode indices ---------------------------------------------------------------


@pytest.mark.parametrize("entry", ["episode_index", "length"])
def test_an_episode_index_past_int64_names_it_and_its_range(entry):
    episode = {"x": (torch.zeros(3), torch.arange(3)), entry: 2**70}
    with pytest.raises(ValueError, match=rf"episode 0: {entry} must be in \[0, 2\*\*63 - 1\]"):
        EpisodeStore.from_episodes([episode], progress=False)
    episode[entry] = 2**63 - 1 if entry == "episode_index" else 3
    built = EpisodeStore.from_episodes([episode], progress=False)
    assert int(built.episodes[entry][0]) == episode[entry]
