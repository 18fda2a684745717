"""load_calvin on CALVIN splits written by numpy as CALVIN's are, read back exactly."""

import numpy as np
import pytest
import torch
from fixtures.calvin import write_calvin

from robocache.data import LoaderError, load_calvin


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
