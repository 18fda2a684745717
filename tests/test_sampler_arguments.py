"""WindowSampler and EpisodeStore arguments: the image rule, devices this
process cannot use, times in the wrong unit, and bad arguments, each with
an error that names the argument."""

import warnings

import numpy as np
import pytest
import torch
from conftest import HAS_CUDA

from robocache.data import EpisodeStore, WindowSampler

MS = 1_000_000


def store_of(**streams):
    """One 10 Hz episode of 12 frames a stream, key -> values."""
    t = torch.arange(12) * 100 * MS
    return EpisodeStore.from_episodes([{k: (v, t) for k, v in streams.items()}], progress=False)


def frames(*shape, dtype=torch.uint8):
    if dtype == torch.uint8:
        return torch.randint(0, 256, (12, *shape), dtype=dtype)
    return torch.rand(12, *shape, dtype=dtype)


def first(store, **kw):
    keys = {k: [0.0] for k in store.keys()}
    return WindowSampler(store, keys, batch_size=12, shuffle=False, **kw).batch_at(range(12))


# -- images ------------------------------------------------------------------------


def test_float_chw_puts_channels_first_whatever_the_frames_dtype():
    hwc, chw = frames(5, 6, 3), frames(3, 5, 6)
    floats = frames(5, 6, 3, dtype=torch.float32)
    store = store_of(hwc=hwc, chw=chw, floats=floats)
    batch = first(store, images="float_chw")
    assert torch.equal(batch["hwc"][:, 0], hwc.permute(0, 3, 1, 2).float() / 255)
    assert torch.equal(batch["chw"][:, 0], chw.float() / 255)  # already channels-first
    assert torch.equal(batch["floats"][:, 0], floats.permute(0, 3, 1, 2))  # values as stored
    as_float = first(store, images="float")
    assert torch.equal(as_float["hwc"][:, 0], hwc.float() / 255)
    assert torch.equal(as_float["floats"][:, 0], floats)


def test_keys_that_are_not_frames_are_left_as_stored():
    flags, state = frames(7), frames(4, dtype=torch.float32)
    batch = first(store_of(flags=flags, state=state), images="float_chw")
    assert batch["flags"].dtype == torch.uint8 and torch.equal(batch["flags"][:, 0], flags)
    assert torch.equal(batch["state"][:, 0], state)


def test_grey_frames_become_float_and_keep_their_layout():
    grey = frames(5, 6)
    batch = first(store_of(grey=grey), images="float_chw")
    assert torch.equal(batch["grey"][:, 0], grey.float() / 255)


def test_ambiguous_frames_raise_and_a_per_key_form_resolves_them():
    store = store_of(cam=frames(3, 8, 3), other=frames(5, 6, 3))
    with pytest.raises(ValueError, match=r"frames of 'cam' are \(3, 8, 3\), which could be"):
        first(store, images="float_chw")
    batch = first(store, images={"cam": "float", "other": "float_chw"})
    assert batch["cam"].shape == (12, 1, 3, 8, 3) and batch["cam"].dtype == torch.float32
    assert batch["other"].shape == (12, 1, 3, 5, 6)
    with pytest.raises(ValueError, match=r"images\['cam'\] must be 'uint8', 'float' or"):
        first(store, images={"cam": "chw"})
    with pytest.raises(ValueError, match=r"images names keys not in delta_timestamps"):
        WindowSampler(store, {"cam": [0.0]}, images={"other": "float"})
    with pytest.raises(ValueError, match=r"images must be 'uint8', 'float' or 'float_chw'"):
        first(store, images="rgb")


# -- devices -----------------------------------------------------------------------


@pytest.mark.skipif(HAS_CUDA, reason="a CUDA device is present")
def test_a_cuda_device_without_one_is_refused_where_it_is_asked_for(tmp_path):
    store = store_of(x=frames(2, dtype=torch.float32))
    with pytest.raises(RuntimeError, match=r"WindowSampler: device 'cuda' asked for, but torch"):
        WindowSampler(store, {"x": [0.0]}, device="cuda")
    with pytest.raises(RuntimeError, match=r"EpisodeStore.to: device 'cuda' asked for"):
        store.to("cuda")
    with pytest.raises(RuntimeError, match=r"EpisodeStore.from_episodes: device 'cuda:0'"):
        EpisodeStore.from_episodes([{"x": (torch.zeros(2), torch.arange(2))}], device="cuda:0")
    store.save(tmp_path)
    with pytest.raises(RuntimeError, match=r"EpisodeStore.load: device 'cuda' asked for"):
        EpisodeStore.load(tmp_path, device="cuda")
    with pytest.raises(RuntimeError, match=r"pinned .* memory serves a CUDA device"):
        store.pin_memory()


def test_a_device_that_is_not_one_is_refused():
    store = store_of(x=frames(2, dtype=torch.float32))
    with pytest.raises(ValueError, match=r"WindowSampler: device 'gpu0' is not a device"):
        WindowSampler(store, {"x": [0.0]}, device="gpu0")


# -- times in the wrong unit -------------------------------------------------------


def test_integer_milliseconds_with_an_fps_warn():
    t = torch.arange(20) * 100  # milliseconds, though int64 times are nanoseconds
    episode = {"action": (torch.zeros(20, 2), t), "state": (torch.zeros(20, 3), t)}
    with pytest.warns(UserWarning, match=r"fps=10 means samples about 1e\+08 ns apart"):
        EpisodeStore.from_episodes([episode], fps=10, progress=False)


def test_a_multi_rate_store_whose_clock_matches_fps_does_not_warn():
    camera = torch.arange(30) * 33_333_333  # 30 Hz
    force = torch.arange(1000) * MS  # 1 kHz: 33 times the frame rate
    episode = {"cam": (torch.zeros(30, 2), camera), "force": (torch.zeros(1000, 6), force)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EpisodeStore.from_episodes([episode], fps=30, progress=False)


def test_float32_seconds_warn_once_naming_the_precision():
    t = torch.arange(5, dtype=torch.float32) / 10
    episode = {"a": (torch.zeros(5), t), "b": (torch.zeros(5), t)}
    with pytest.warns(UserWarning) as record:
        store = EpisodeStore.from_episodes([episode] * 3, progress=False)
    messages = [str(w.message) for w in record if "float32 seconds" in str(w.message)]
    assert len(messages) == 1 and "(also streams ['b'])" in messages[0]
    assert store["a"].times[1].item() == 100_000_001


# -- bad arguments -----------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(delta_timestamps={"x": 0.1}), TypeError, r"delta_timestamps\['x'\] must be a seq"),
        (dict(delta_timestamps={"x": torch.tensor(0.1)}), TypeError, r"1-D sequence of seconds"),
        (dict(delta_timestamps={"x": [1e10]}), ValueError, r"\['x'\]\[0\]: 10000000000.0 sec"),
        (dict(modes={"x": None}), ValueError, r"modes\['x'\] must be one of 'nearest'"),
        (dict(modes={"x": " linear"}), ValueError, r"modes\['x'\] must be one of .*' linear'"),
        (dict(modes={"x": "linear,nearest"}), ValueError, r"modes\['x'\] must be one of"),
        (dict(edge_tolerance_s=1e12), ValueError, r"edge_tolerance_s: 1000000000000.0 seconds"),
        (dict(tolerance_s={"x": "1"}), TypeError, r"tolerance_s\['x'\] must be a number"),
        (dict(batch_size=True), ValueError, r"batch_size must be a positive int; got True"),
        (dict(batch_size=2.0), ValueError, r"batch_size must be a positive int; got 2.0"),
        (dict(seed=1.5), ValueError, r"seed must be an int; got 1.5"),
        (dict(shuffle="no"), ValueError, r"shuffle must be True or False; got 'no'"),
        (dict(drop_n_last_frames=1.5), ValueError, r"drop_n_last_frames must be an int >= 0"),
        (dict(modes=["x"]), TypeError, r"modes must be a dict key -> value"),
    ],
)
def test_bad_sampler_arguments_name_the_argument(kwargs, error, match):
    store = store_of(x=frames(2, dtype=torch.float32))
    kwargs = {"delta_timestamps": {"x": [0.0]}, **kwargs}
    with pytest.raises(error, match=match):
        WindowSampler(store, **kwargs)


@pytest.mark.parametrize(
    "index, match",
    [
        ([0.7], r"integer rows; got float64 values \[0.7\]"),
        (np.array([1.9]), r"integer rows; got float64 values \[1.9\]"),
        (torch.tensor([True, False]), r"integer rows; got a torch.bool tensor"),
        (torch.tensor([1.0]), r"integer rows; got a torch.float32 tensor"),
    ],
)
def test_batch_at_takes_integer_rows_only(index, match):
    sampler = WindowSampler(store_of(x=frames(2, dtype=torch.float32)), {"x": [0.0]})
    with pytest.raises(TypeError, match=match):
        sampler.batch_at(index)
    assert sampler.batch_at(np.array([3, 1]))["index"].tolist() == [3, 1]
    assert sampler.batch_at([]).get("index").numel() == 0


def test_iterating_inside_a_dataloader_worker_raises(monkeypatch):
    """A worker would draw every batch. (A DataLoader worker, as torch.utils.data
    tells it: forking real workers after CUDA has started aborts them.)"""
    sampler = WindowSampler(store_of(x=frames(2, dtype=torch.float32)), {"x": [0.0]})
    monkeypatch.setattr(torch.utils.data, "get_worker_info", lambda: object())
    with pytest.raises(RuntimeError, match="inside a DataLoader worker, where every worker"):
        next(iter(sampler))
    monkeypatch.undo()
    assert next(iter(sampler))["x"].shape[0] > 0


@pytest.mark.parametrize("entry, value", [("episode_index", "x"), ("length", -1), ("length", 2.5)])
def test_episode_metadata_must_be_ints(entry, value):
    episode = {"x": (torch.zeros(3), torch.arange(3)), entry: value}
    with pytest.raises(TypeError, match=rf"episode 0: {entry} must be an int >= 0; got"):
        EpisodeStore.from_episodes([episode], progress=False)
