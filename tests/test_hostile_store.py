"""A store and a sampler handed what a hostile user hands them: times near
the ends of int64, ingest options that name nothing, hand-built stores
with times out of order, frames whose height looks like a channel count,
placements keyed by non-strings, and keys that share one tensor."""

import pytest
import torch

from robocache.data import EpisodeStore, WindowSampler
from robocache.data.frames import resize
from robocache.data.store.packed import PackedStream

MS = 1_000_000


def small_store(start_ns=0, n=6):
    t = start_ns + torch.arange(n) * 100 * MS
    return EpisodeStore.from_episodes(
        [{"a": (torch.arange(n, dtype=torch.float32).unsqueeze(1), t)}], progress=False
    )


# -- anchor time + delta must stay within int64 nanoseconds ---------------------


@pytest.mark.parametrize("start_ns, delta_s", [(2**62, 9.2e9), (-(2**62), -9.2e9)])
def test_deltas_that_carry_anchor_times_past_int64_are_refused(start_ns, delta_s):
    store = small_store(start_ns)
    with pytest.raises(ValueError) as raised:
        WindowSampler(store, {"a": [0.0, delta_s]}, batch_size=2)
    message = str(raised.value)
    assert "delta_timestamps['a']" in message and f"{delta_s:.6g} s" in message
    assert str(start_ns) in message  # the store's time range


def test_large_deltas_that_stay_within_int64_still_sample():
    store = small_store(2**62)
    sampler = WindowSampler(store, {"a": [0.0, 1e9]}, batch_size=2, shuffle=False, key_age=True)
    batch = next(iter(sampler))
    assert batch["a_is_pad"][:, 1].all() and not batch["a_is_pad"][:, 0].any()
    assert torch.equal(batch["a"][:, 1, 0], torch.tensor([5.0, 5.0]))  # the last sample
    assert (batch["a_age"][:, 1] > 9e8).all()


# -- ingest options that name nothing, or do nothing -----------------------------


def grey_episode(n=3, size=(8, 10)):
    t = torch.arange(n) * 100 * MS
    frames = torch.randint(0, 256, (n, *size), dtype=torch.uint8, generator=torch.Generator())
    return {"cam": (frames, t), "a": (torch.randn(n, 2), t)}


def test_a_frames_dict_naming_no_stream_is_an_error():
    with pytest.raises(ValueError, match=r"frames names \['camm'\].*'cam'"):
        EpisodeStore.from_episodes([grey_episode()], frames={"camm": "jpeg"}, progress=False)


def test_resize_applies_to_grey_frames():
    episode = grey_episode()
    store = EpisodeStore.from_episodes([episode], resize=(4, 4), progress=False)
    assert store["cam"].sample_shape == (4, 4)
    assert torch.equal(store["cam"].values, resize(episode["cam"][0], (4, 4)))
    assert store["a"].sample_shape == (2,)  # not frames: left as they are


def test_resize_refuses_channel_first_frames():
    t = torch.arange(2) * 100 * MS
    chw = torch.zeros(2, 3, 8, 10, dtype=torch.uint8)
    with pytest.raises(ValueError, match=r"stream 'cam'.*\(3, 8, 10\) uint8"):
        EpisodeStore.from_episodes([{"cam": (chw, t)}], resize=(4, 4), progress=False)


# -- a hand-built store's times are checked -----------------------------------------


def test_a_hand_built_store_with_times_out_of_order_is_refused():
    times = torch.tensor([0, 10, 20, 5, 30, 25], dtype=torch.int64) * MS
    offsets = torch.tensor([0, 3, 6])  # episode 1's times fall back inside it
    stream = PackedStream(torch.zeros(6, 1), times, offsets)
    episodes = {
        "episode_index": torch.tensor([0, 1]),
        "length": torch.tensor([3, 3]),
        "task_index": torch.tensor([0, 0]),
    }
    with pytest.raises(ValueError, match=r"stream 'a'.*row 5 \(episode 1\)"):
        EpisodeStore({"a": stream}, episodes, [""])
    # Across episodes times may fall (each episode has its own clock).
    times = torch.tensor([10, 20, 30, 0, 5, 6], dtype=torch.int64) * MS
    store = EpisodeStore({"a": PackedStream(torch.zeros(6, 1), times, offsets)}, episodes, [""])
    assert store.num_episodes == 2


# -- encoded frames' layout is the one their encoding records -------------------


@pytest.mark.parametrize("codec", ["jpeg", "png"])
@pytest.mark.parametrize("height", [1, 3, 4])
def test_float_chw_of_encoded_frames_whose_height_looks_like_channels(codec, height):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    t = torch.arange(4) * 100 * MS
    frames = torch.randint(0, 256, (4, height, 6, 3), dtype=torch.uint8)
    store = EpisodeStore.from_episodes([{"cam": (frames, t)}], frames=codec, progress=False)
    assert store["cam"].encoding.shape == (height, 6, 3)
    index = torch.arange(4)
    as_float = WindowSampler(store, {"cam": [0.0]}, images="float").batch_at(index)
    as_chw = WindowSampler(store, {"cam": [0.0]}, images="float_chw").batch_at(index)
    assert as_chw["cam"].shape == (4, 1, 3, height, 6)
    assert torch.equal(as_chw["cam"], as_float["cam"].movedim(-1, -3))


# -- placement keys must be patterns ------------------------------------------------


def test_a_placement_keyed_by_a_non_string_names_it_and_the_keys():
    store = small_store()
    with pytest.raises(TypeError, match=r"got 5 \(int\); the keys are \['a'\]"):
        store.place({5: "cpu"})


# -- keys that share one tensor save and load --------------------------------------


def test_a_store_whose_keys_share_tensors_saves_and_loads_equal(tmp_path):
    base = small_store()["a"]
    shared = PackedStream(base.values, base.times, base.offsets, dict(base.stats))
    index = torch.tensor([0])
    episodes = {"episode_index": index, "length": torch.tensor([6]), "task_index": index}
    store = EpisodeStore({"a": base, "b": shared}, episodes, ["pick"])
    store.save(tmp_path)
    loaded = EpisodeStore.load(tmp_path)
    assert list(loaded.keys()) == ["a", "b"]
    for key in ("a", "b"):
        for name in ("values", "times", "offsets"):
            assert torch.equal(getattr(loaded[key], name), getattr(store[key], name)), name
        assert loaded[key].stats.keys() == store[key].stats.keys()
        for name, stat in store[key].stats.items():
            assert torch.equal(loaded[key].stats[name], stat), name
    for name, t in store.episodes.items():
        assert torch.equal(loaded.episodes[name], t), name
    assert loaded.tasks == ["pick"]
