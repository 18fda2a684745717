"""load_robomimic on HDF5 files written by h5py as robomimic writes them, read back exactly."""

import pytest
import torch

h5py = pytest.importorskip("h5py", reason="the robomimic extra: pip install robocache[robomimic]")

from fixtures.clocks import FPS, frame_ns  # noqa: E402
from fixtures.robomimic import ENV_ARGS, write_robomimic  # noqa: E402

from robocache.data import EpisodeStore, LoaderError, load_robomimic  # noqa: E402


def test_robomimic_round_trip_is_exact(tmp_path):
    path = tmp_path / "demos.hdf5"
    demos = write_robomimic(path)
    store = load_robomimic(path, fps=FPS, progress=False)
    assert set(store.keys()) == set(demos["demo_0"])
    assert store.episodes["episode_index"].tolist() == [0, 1, 10]
    for e, demo in enumerate(demos.values()):
        for key, value in demo.items():
            s = store[key]
            a, z = s.offsets[e], s.offsets[e + 1]
            assert torch.equal(s.values[a:z], torch.from_numpy(value)), key
            assert s.times[a:z].tolist() == frame_ns(len(value))
    assert store.info == {"env_args": ENV_ARGS}


def test_robomimic_env_args_survive_save_and_shards(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    store = load_robomimic(path, fps=FPS, progress=False)
    store.save(tmp_path / "cache")
    assert EpisodeStore.load(tmp_path / "cache").info == {"env_args": ENV_ARGS}
    assert EpisodeStore.load(tmp_path / "cache", shard=(1, 2)).info == {"env_args": ENV_ARGS}
    assert store.to("cpu").info == {"env_args": ENV_ARGS}


def test_robomimic_env_args_that_are_not_json_stay_a_string(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    with h5py.File(path, "a") as f:
        f["data"].attrs["env_args"] = "not json {"
    assert load_robomimic(path, fps=FPS, progress=False).info == {"env_args": "not json {"}
    with h5py.File(path, "a") as f:
        del f["data"].attrs["env_args"]
    assert load_robomimic(path, fps=FPS, progress=False).info == {}


def test_robomimic_filter_key_and_keys(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    store = load_robomimic(path, fps=FPS, keys=["actions"], filter_key="train", progress=False)
    assert list(store.keys()) == ["actions"] and store.episodes["episode_index"].tolist() == [0, 10]
    with pytest.raises(LoaderError, match=r"no mask/valid; the masks are \['train'\]"):
        load_robomimic(path, fps=FPS, filter_key="valid", progress=False)


def test_robomimic_bad_files(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    with pytest.raises(LoaderError, match=r"demos.hdf5\), demo_0: no key 'obs/eef_pos'"):
        load_robomimic(path, fps=FPS, keys=["obs/eef_pos"], progress=False)
    with h5py.File(path, "a") as f:
        f["data/demo_1"].attrs["num_samples"] = 4
    with pytest.raises(LoaderError, match=r"demo_1, key 'actions': 1 rows, but num_samples is 4"):
        load_robomimic(path, fps=FPS, progress=False)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        store = load_robomimic(path, fps=FPS, progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 10]
    truncated = tmp_path / "truncated.hdf5"
    truncated.write_bytes(path.read_bytes()[:2000])
    with pytest.raises(LoaderError, match=r"truncated.hdf5\): cannot open the file"):
        load_robomimic(truncated, fps=FPS, progress=False)
    with pytest.raises(ValueError, match="fps must be a positive number"):
        load_robomimic(path, fps=0, progress=False, keys=["rewards"], filter_key="train")
