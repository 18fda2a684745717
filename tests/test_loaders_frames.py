"""The frame options of the loaders whose frames arrive as arrays (robomimic,
zarr, CALVIN): ``frames=``, ``jpeg_quality=`` and ``resize=`` reach
``from_episodes``. PNG is lossless, so a PNG store's windows equal the raw
store's; the fixtures' frames are noise, which JPEG does not keep well, so
a JPEG store is checked for its codec and size."""

import pytest
import torch

from robocache.data import WindowSampler

pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")


def _robomimic(tmp_path, **kw):
    pytest.importorskip("h5py", reason="the robomimic extra: pip install robocache[robomimic]")
    from fixtures.robomimic import write_robomimic

    from robocache.data import load_robomimic

    path = tmp_path / "demos.hdf5"
    if not path.exists():
        write_robomimic(path)
    return load_robomimic(path, fps=20, progress=False, **kw), "obs/agentview_image"


def _zarr(tmp_path, **kw):
    pytest.importorskip("zarr", reason="the zarr extra: pip install robocache[zarr]")
    from fixtures.zarr import write_replay_buffer

    from robocache.data import load_zarr

    path = tmp_path / "buffer.zarr"
    if not path.exists():
        write_replay_buffer(path)
    return load_zarr(path, fps=10, progress=False, **kw), "img"


def _calvin(tmp_path, **kw):
    from fixtures.calvin import write_calvin

    from robocache.data import load_calvin

    root = tmp_path / "calvin"
    if not root.exists():
        write_calvin(root)
    return load_calvin(root, progress=False, **kw), "rgb_static"


@pytest.mark.parametrize("load", [_robomimic, _zarr, _calvin])
def test_frame_options_reach_the_store(tmp_path, load):
    raw, key = load(tmp_path)
    png, _ = load(tmp_path, frames="png")
    assert raw[key].encoding is None and png[key].encoding.codec == "png"
    deltas = {key: [0.0, 0.1]}
    n = raw[key].num_samples
    a = WindowSampler(raw, deltas, batch_size=n, shuffle=False).batch_at(range(n))
    b = WindowSampler(png, deltas, batch_size=n, shuffle=False).batch_at(range(n))
    assert torch.equal(a[key], b[key]) and torch.equal(a[f"{key}_is_pad"], b[f"{key}_is_pad"])
    jpeg, _ = load(tmp_path, frames={key: "jpeg"}, jpeg_quality=75, resize=(8, 12))
    assert jpeg[key].encoding.codec == "jpeg" and jpeg[key].sample_shape == (8, 12, 3)
    with pytest.raises(ValueError, match="frames must be one of"):
        load(tmp_path, frames="gif")
