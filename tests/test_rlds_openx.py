"""What an Open-X user needs of load_rlds beyond the step streams: each
episode's episode_metadata, per-step language as a stream, and a dataset
folder of TFDS version folders. Shards written with the tfrecord package's
writer (tf.train.Example episodes) and a TFDS features.json."""

import re

import numpy as np
import pytest
import torch

pytest.importorskip("tfrecord", reason="the rlds extra: pip install robocache[rlds]")
pytest.importorskip("PIL", reason="the rlds extra: pip install robocache[rlds]")

from fixtures.rlds import FPS, tensor, text, write_rlds  # noqa: E402

from robocache.data import EpisodeStore, LoaderError, load_rlds  # noqa: E402

SHARD0 = "demo-train.tfrecord-00000-of-00002"  # episodes 0 and 1 (of lengths 3, 1)
SHARD1 = "demo-train.tfrecord-00001-of-00002"  # episode 2 (of length 5)


def open_x_metadata():
    """episode_metadata as Open-X datasets declare it: a source path (text),
    an id, a flag, and a small float tensor."""
    return {
        "file_path": (text(), lambda e: ([f"/raw/run_{e}/traj.h5".encode()], "byte")),
        "episode_id": (tensor([], "int64"), lambda e: ([100 + e], "int")),
        "has_language": (tensor([], "bool"), lambda e: ([e % 2], "int")),
        "gains": (tensor([2], "float32"), lambda e: ([0.5 * e, 1.25], "float")),
    }


EXPECTED_METADATA = {
    "file_path": ["/raw/run_0/traj.h5", "/raw/run_1/traj.h5", "/raw/run_2/traj.h5"],
    "episode_id": [100, 101, 102],
    "has_language": [False, True, False],
    "gains": [[0.0, 1.25], [0.5, 1.25], [1.0, 1.25]],
}


def test_episode_metadata_is_kept_per_episode_through_save_and_shards(tmp_path):
    write_rlds(tmp_path / "ds", metadata=open_x_metadata())
    store = load_rlds(tmp_path / "ds", fps=FPS, progress=False)
    assert store.info["episode_metadata"] == EXPECTED_METADATA
    assert type(store.info["episode_metadata"]["episode_id"][0]) is int
    store.save(tmp_path / "store")
    loaded = EpisodeStore.load(tmp_path / "store")
    assert loaded.info["episode_metadata"] == EXPECTED_METADATA
    # A shard keeps the whole store's info: its episode e is the store's first + e.
    for shard in (store.take_shard(1, 2), EpisodeStore.load(tmp_path / "store", shard=(1, 2))):
        first, end = shard.shard.ranges[1]
        assert shard.info["episode_metadata"] == EXPECTED_METADATA
        paths = shard.info["episode_metadata"]["file_path"][first:end]
        ids = shard.episodes["episode_index"].tolist()
        assert paths == [f"/raw/run_{i}/traj.h5" for i in ids] and len(ids) == end - first


def test_a_dataset_without_episode_metadata_has_none(tmp_path):
    write_rlds(tmp_path)
    assert "episode_metadata" not in load_rlds(tmp_path, fps=FPS, progress=False).info


def test_episode_metadata_of_skipped_episodes_is_left_out(tmp_path):
    metadata = open_x_metadata()
    leaf, _ = metadata["episode_id"]
    metadata["episode_id"] = (leaf, lambda e: ([7, 8] if e == 1 else [100 + e], "int"))
    write_rlds(tmp_path, metadata=metadata)
    message = rf"{SHARD0}, episode 1, key 'episode_metadata/episode_id': 2 values do not fill"
    with pytest.raises(LoaderError, match=message):
        load_rlds(tmp_path, fps=FPS, progress=False)
    with pytest.warns(UserWarning, match=message):
        store = load_rlds(tmp_path, fps=FPS, progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 2]
    kept = {k: [v[0], v[2]] for k, v in EXPECTED_METADATA.items()}
    assert store.info["episode_metadata"] == kept


GOOD = {
    "file_path": (text(), ([b"/raw/run/traj.h5"], "byte")),
    "episode_id": (tensor([], "int64"), ([7], "int")),
    "gains": (tensor([2], "float32"), ([0.5, 1.0], "float")),
}


@pytest.mark.parametrize(
    "name, bad, problem",
    [
        ("file_path", ([1.5], "float"), "features.json declares strings; the record holds floats"),
        ("episode_id", ([b"7"], "byte"), "features.json declares numbers; the record holds bytes"),
        ("file_path", ([b"/raw/\xff.h5"], "byte"), "a string is not UTF-8"),
        ("gains", ([0.5], "float"), r"1 values do not fill the shape \(2,\)"),
        ("episode_id", ([], "int"), r"0 values do not fill the shape \(\)"),
    ],
    ids=["numbers for a string", "bytes for a number", "not UTF-8", "too few", "none"],
)
def test_bad_episode_metadata_names_shard_episode_and_key(tmp_path, name, bad, problem):
    leaf, good = GOOD[name]
    write_rlds(tmp_path, metadata={name: (leaf, lambda e: bad if e == 2 else good)})
    with pytest.raises(
        LoaderError, match=rf"{SHARD1}, episode 0, key 'episode_metadata/{name}': {problem}"
    ):
        load_rlds(tmp_path, fps=FPS, progress=False)


def reach_then_lift(e, n):
    """Language that changes within an episode, one string shared across
    episodes, each episode's strings first seen in other than sorted order:
    episode 0 (3 steps) ["reach", "lift 0", "lift 0"], episode 1 (1 step)
    ["lift 1"], episode 2 (5 steps) ["reach", "reach", "lift 2", ...]."""
    return ["reach" if k < n // 2 else f"lift {e}" for k in range(n)]


def test_language_asked_for_is_a_per_step_index_stream(tmp_path):
    episodes = write_rlds(tmp_path / "ds", language=reach_then_lift)
    keys = ["action", "language_instruction"]
    store = load_rlds(tmp_path / "ds", fps=FPS, keys=keys, progress=False)
    strings = store.info["strings"]["language_instruction"]
    assert strings == ["reach", "lift 0", "lift 1", "lift 2"]
    stream = store["language_instruction"]
    assert stream.values.dtype == torch.int64 and stream.sample_shape == ()
    assert stream.values.tolist() == [0, 1, 1, 2, 0, 0, 3, 3, 3]
    assert [strings[i] for i in stream.values] == sum((ep["language"] for ep in episodes), [])
    assert torch.equal(stream.offsets, store["action"].offsets)
    assert torch.equal(stream.times, store["action"].times)
    assert store.tasks == ["reach", "lift 1"]  # each episode's first step, as before
    assert store.episodes["task_index"].tolist() == [0, 1, 0]
    store.save(tmp_path / "store")
    loaded = EpisodeStore.load(tmp_path / "store", shard=(1, 2))
    assert loaded.info["strings"] == {"language_instruction": strings}
    first, end = loaded.shard.ranges[1]
    written = sum((ep["language"] for ep in episodes[first:end]), [])
    assert [strings[i] for i in loaded["language_instruction"].values] == written


def test_language_not_asked_for_is_no_stream(tmp_path):
    write_rlds(tmp_path, language=reach_then_lift)
    store = load_rlds(tmp_path, fps=FPS, progress=False)
    assert "language_instruction" not in store.keys() and "strings" not in store.info


def test_strings_of_skipped_episodes_are_not_in_the_table(tmp_path):
    def language(e, n):  # episode 1's instruction is not UTF-8
        return ([b"\xff"] * n, "byte") if e == 1 else [f"task {e}"] * n

    write_rlds(tmp_path, language=language)
    keys = ["language_instruction"]
    with pytest.warns(UserWarning, match=rf"{SHARD0}, episode 1, .*a string is not UTF-8"):
        store = load_rlds(tmp_path, fps=FPS, keys=keys, progress=False, skip_bad=True)
    assert store.info["strings"]["language_instruction"] == ["task 0", "task 2"]
    assert store["language_instruction"].values.tolist() == [0, 0, 0, 1, 1, 1, 1, 1]


@pytest.mark.parametrize(
    "written, problem",
    [
        (([0.5] * 5, "float"), "features.json declares strings; the record holds floats"),
        (([1] * 5, "int"), "features.json declares strings; the record holds integers"),
        (([b"\xffpick"] * 5, "byte"), "a string is not UTF-8"),
        (([b"pick"] * 4, "byte"), "4 steps, other features have 5"),
    ],
    ids=["floats", "integers", "not UTF-8", "too few steps"],
)
def test_bad_language_names_shard_episode_and_key(tmp_path, written, problem):
    def language(e, n):
        return written if e == 2 else [f"task {e}"] * n

    write_rlds(tmp_path, language=language)
    with pytest.raises(
        LoaderError, match=rf"{SHARD1}, episode 0, key 'language_instruction': {problem}"
    ):
        load_rlds(tmp_path, fps=FPS, keys=["action", "language_instruction"], progress=False)


def test_a_dataset_folder_loads_its_newest_version(tmp_path):
    """Versions compare as numbers: 1.10.0 is newer than 1.9.0 (and than
    0.1.0), though not as strings; folders not named as versions are left."""
    write_rlds(tmp_path / "bridge" / "0.1.0", lengths=(1,))
    write_rlds(tmp_path / "bridge" / "1.9.0", lengths=(3, 1, 5))
    newest = write_rlds(tmp_path / "bridge" / "1.10.0", lengths=(2, 4), seed=3)
    (tmp_path / "bridge" / "downloads").mkdir()
    (tmp_path / "bridge" / "1.11.0.incomplete").mkdir()
    store = load_rlds(tmp_path / "bridge", fps=FPS, progress=False)
    assert store.episodes["length"].tolist() == [2, 4]
    expected = np.concatenate([ep["action"] for ep in newest])
    assert torch.equal(store["action"].values, torch.from_numpy(expected))
    direct = load_rlds(tmp_path / "bridge" / "1.9.0", fps=FPS, progress=False)
    assert direct.episodes["length"].tolist() == [3, 1, 5]


def test_a_newest_version_that_is_not_whole_is_an_error_naming_it(tmp_path):
    write_rlds(tmp_path / "bridge" / "1.0.0")
    (tmp_path / "bridge" / "1.1.0").mkdir()  # no features.json: the older one is not taken
    newest = str(tmp_path / "bridge" / "1.1.0")
    with pytest.raises(LoaderError, match=rf"load_rlds\({re.escape(newest)}\): cannot read"):
        load_rlds(tmp_path / "bridge", fps=FPS, progress=False)
