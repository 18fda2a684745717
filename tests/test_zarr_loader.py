"""load_zarr on Diffusion Policy replay buffers written by zarr, read back exactly."""

import numpy as np
import pytest
import torch

zarr = pytest.importorskip("zarr", reason="the zarr extra: pip install robocache[zarr]")

from fixtures.clocks import FPS, frame_ns  # noqa: E402
from fixtures.zarr import write_replay_buffer  # noqa: E402

from robocache.data import LoaderError, load_robomimic, load_zarr  # noqa: E402


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
    pytest.importorskip("h5py", reason="the robomimic extra: pip install robocache[robomimic]")
    from fixtures.robomimic import write_robomimic

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
