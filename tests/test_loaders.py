"""Loaders: fixtures written by each format's own library, read back exactly."""

import json

import h5py  # the test environment has every format's library (make test installs them)
import numpy as np
import pytest
import torch
import zarr

from robocache.data import EpisodeStore, LoaderError, load_calvin, load_robomimic, load_zarr

FPS = 20


def frame_ns(n):
    return [round(k * 1e9 / FPS) for k in range(n)]


# ---------------------------------------------------------------------------
# robomimic HDF5
# ---------------------------------------------------------------------------


ENV_ARGS = {
    "env_name": "Lift",
    "type": 1,
    "env_kwargs": {"control_freq": 20, "has_renderer": False},
}


def write_robomimic(path, lengths=(5, 1, 9)):
    """demo_0, demo_1, demo_10, demo_2, ... (so names sort apart from numbers)
    as robomimic writes them."""
    rng = np.random.default_rng()
    numbers = [0, 1, 10] + [k for k in range(2, len(lengths) + 2) if k != 10]
    demos = {}
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        data.attrs["env_args"] = json.dumps(ENV_ARGS)
        for i, n in zip(numbers, lengths):
            g = data.create_group(f"demo_{i}")
            g.attrs["num_samples"] = n
            demo = {
                "actions": rng.standard_normal((n, 7)).astype(np.float32),
                "rewards": rng.standard_normal(n),
                "dones": (rng.random(n) < 0.2).astype(np.int64),
                "obs/robot0_joint_pos": rng.standard_normal((n, 7)),
                "obs/agentview_image": rng.integers(0, 256, (n, 8, 6, 3), dtype=np.uint8),
                "next_obs/robot0_joint_pos": rng.standard_normal((n, 7)),
            }
            for key, value in demo.items():
                g.create_dataset(key, data=value)
            demos[f"demo_{i}"] = demo
        f.create_dataset("mask/train", data=np.array([b"demo_0", b"demo_10"]))
    return demos


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


# ---------------------------------------------------------------------------
# Diffusion Policy zarr replay buffers
# ---------------------------------------------------------------------------


def write_replay_buffer(path, lengths=(4, 1, 7), chunk_rows=3):
    rng = np.random.default_rng()
    N = sum(lengths)
    arrays = {
        "action": rng.standard_normal((N, 2)).astype(np.float32),
        "state": rng.standard_normal((N, 5)),
        "img": rng.integers(0, 256, (N, 4, 4, 3), dtype=np.uint8),
    }
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    for key, value in arrays.items():
        root.create_array(f"data/{key}", data=value, chunks=(chunk_rows,) + value.shape[1:])
    root.create_array("meta/episode_ends", data=np.cumsum(lengths).astype(np.int64))
    return arrays, lengths


def test_zarr_round_trip_is_exact(tmp_path):
    arrays, lengths = write_replay_buffer(tmp_path / "buffer.zarr")
    store = load_zarr(tmp_path / "buffer.zarr", fps=FPS, progress=False)
    assert set(store.keys()) == set(arrays)
    ends = np.cumsum((0,) + lengths)
    for key, value in arrays.items():
        s = store[key]
        assert s.offsets.tolist() == ends.tolist()
        assert torch.equal(s.values, torch.from_numpy(value))
        for e, n in enumerate(lengths):
            assert s.times[ends[e] : ends[e + 1]].tolist() == frame_ns(n)


def test_loaders_build_on_the_device_asked_for(tmp_path, device):
    write_replay_buffer(tmp_path / "buffer.zarr")
    write_robomimic(tmp_path / "demo.hdf5")
    for load, path in ((load_zarr, "buffer.zarr"), (load_robomimic, "demo.hdf5")):
        host = load(tmp_path / path, fps=FPS, progress=False)
        there = load(tmp_path / path, fps=FPS, progress=False, device=device)
        assert there.device.type == device
        for key in host.keys():
            assert torch.equal(there[key].values.cpu(), host[key].values)
            assert torch.equal(there[key].times.cpu(), host[key].times)


def test_zarr_bad_buffers(tmp_path):
    write_replay_buffer(tmp_path / "buffer.zarr")
    with pytest.raises(
        LoaderError, match=r"no data/gripper; the arrays are \['action', 'img', 'state'\]"
    ):
        load_zarr(tmp_path / "buffer.zarr", fps=FPS, keys=["gripper"], progress=False)
    root = zarr.open_group(str(tmp_path / "buffer.zarr"), mode="a")
    root["meta/episode_ends"][:] = np.array([4, 5, 20])
    with pytest.raises(LoaderError, match=r"key 'action': 12 rows, but episode_ends reaches 20"):
        load_zarr(tmp_path / "buffer.zarr", fps=FPS, progress=False)
    with pytest.raises(LoaderError, match="needs data/<key> arrays and meta/episode_ends"):
        zarr.open_group(str(tmp_path / "empty.zarr"), mode="w", zarr_format=2)
        load_zarr(tmp_path / "empty.zarr", fps=FPS, progress=False)


# ---------------------------------------------------------------------------
# CALVIN
# ---------------------------------------------------------------------------


def write_calvin(root, ranges=((0, 4), (5, 5), (6, 11))):
    """One npz per frame (numpy.savez, as CALVIN's files are), the ranges and
    the language annotations."""
    rng = np.random.default_rng()
    root.mkdir(parents=True)
    frames = {}
    for i in range(ranges[-1][1] + 1):
        frames[i] = {
            "rgb_static": rng.integers(0, 256, (6, 6, 3), dtype=np.uint8),
            "robot_obs": rng.standard_normal(15),
            "rel_actions": rng.standard_normal(7),
        }
        np.savez(root / f"episode_{i:07d}.npz", **frames[i])
    np.save(root / "ep_start_end_ids.npy", np.array(ranges))
    (root / "lang_annotations").mkdir()
    ann = {
        "info": {"indx": [(1, 3), (7, 10)]},
        "language": {"ann": ["open the drawer", "push the button"]},
    }
    np.save(root / "lang_annotations" / "auto_lang_ann.npy", ann, allow_pickle=True)
    return frames


def test_calvin_round_trip_is_exact(tmp_path):
    frames = write_calvin(tmp_path / "training")
    store = load_calvin(tmp_path, "training", progress=False)
    assert set(store.keys()) == {"rgb_static", "robot_obs", "rel_actions"}
    for e, (a, b) in enumerate(((0, 4), (5, 5), (6, 11))):
        for key in store.keys():
            s = store[key]
            lo, hi = s.offsets[e], s.offsets[e + 1]
            expected = np.stack([frames[i][key] for i in range(a, b + 1)])
            assert torch.equal(s.values[lo:hi], torch.from_numpy(expected))
            assert s.times[lo:hi].tolist() == [round(k * 1e9 / 30) for k in range(b - a + 1)]
    by_language = load_calvin(
        tmp_path / "training", episodes="language", keys=["rel_actions"], progress=False
    )
    assert by_language.tasks == ["open the drawer", "push the button"]
    assert by_language["rel_actions"].offsets.tolist() == [0, 3, 7]
    assert torch.equal(
        by_language["rel_actions"].values[3:],
        torch.from_numpy(np.stack([frames[i]["rel_actions"] for i in range(7, 11)])),
    )


def test_calvin_bad_splits(tmp_path):
    frames = write_calvin(tmp_path / "training")
    with pytest.raises(LoaderError, match=r"episode 0, episode_0000000.npz: no key 'scene_obs'"):
        load_calvin(tmp_path / "training", keys=["scene_obs"], progress=False)
    np.savez(
        tmp_path / "training" / "episode_0000007.npz", **{**frames[7], "robot_obs": np.zeros(14)}
    )
    with pytest.raises(
        LoaderError, match=r"episode 2, key 'robot_obs': the shape changes within the episode"
    ):
        load_calvin(tmp_path / "training", progress=False)
    (tmp_path / "training" / "episode_0000003.npz").write_bytes(b"PK\x03\x04truncated")
    with pytest.raises(LoaderError, match=r"episode 0: cannot read episode_0000003.npz"):
        load_calvin(tmp_path / "training", progress=False)
    with pytest.warns(UserWarning, match="skipped 2 bad episode"):
        store = load_calvin(tmp_path / "training", progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [1]
    with pytest.raises(LoaderError, match="no such directory"):
        load_calvin(tmp_path, "validation", progress=False)
