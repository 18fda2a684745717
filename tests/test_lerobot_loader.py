"""load_lerobot on LeRobot v3 datasets written here with pyarrow and PyAV,
following the format (meta/info.json, meta/episodes, meta/tasks, data and
video files holding many episodes each)."""

import json
import os

import numpy as np
import pytest
import torch

pytest.importorskip("av", reason="the lerobot extra: pip install robocache[lerobot]")
pytest.importorskip("pyarrow", reason="the lerobot extra: pip install robocache[lerobot]")

import av  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from fixtures.lerobot import FPS, SIZE, decode_all, encode, write_lerobot  # noqa: E402
from fixtures.scheduling import scheduling  # noqa: E402
from frame_checks import assert_near, every_frame  # noqa: E402

from robocache.data import LoaderError, WindowSampler, load_lerobot  # noqa: E402

CAMERA = "observation.images.top"


@pytest.mark.parametrize("codec", ["libsvtav1", "libx264"])
def test_round_trip(tmp_path, codec):
    written = write_lerobot(tmp_path, codec=codec)
    store = load_lerobot(tmp_path, progress=False)
    lengths = written["lengths"]
    assert set(store.keys()) == {"observation.state", "action", "observation.images.top"}
    assert store.fps == FPS and store.tasks == ["pick the cube", "open the drawer"]
    assert store.episodes["task_index"].tolist() == [0, 1, 0]
    ends = np.cumsum((0,) + lengths).tolist()
    for key, name in (("observation.state", "state"), ("action", "action")):
        assert torch.equal(store[key].values, torch.from_numpy(written[name]))
        assert store[key].offsets.tolist() == ends
        assert store[key].times.tolist() == [
            round(float(t) * 1e9) for t in written["timestamp"].astype(np.float64)
        ]
    # Video: exactly the frames a plain decode of the file gives, on their own clock.
    video = store["observation.images.top"]
    decoded = decode_all(tmp_path / "videos/observation.images.top/chunk-000/file-000.mp4")
    assert video.offsets.tolist() == ends
    assert torch.equal(video.values, torch.from_numpy(np.stack([image for _, image in decoded])))
    for e, start in enumerate(ends[:-1]):
        t = video.times[ends[e] : ends[e + 1]]
        assert t.tolist() == [
            round((decoded[start + k][0] - start / FPS) * 1e9) for k in range(lengths[e])
        ]
    # The video is lossy, but close to what was written.
    assert (video.values.float() - torch.from_numpy(written["images"]).float()).abs().mean() < 3


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling policies")
def test_encoding_av1_keeps_the_callers_cpu_scheduling(tmp_path):
    """SVT-AV1 run as root makes its caller real-time (SCHED_FIFO); the
    writer restores the policy, so that nothing forked after it (DataLoader
    workers, torchrun ranks) inherits it."""
    before = scheduling()
    frames = np.full((3, *SIZE, 3), 128, np.uint8)
    encode(tmp_path / "a.mp4", frames, "libsvtav1")
    assert scheduling() == before
    with av.open(str(tmp_path / "a.mp4")) as container:
        assert sum(1 for _ in container.decode(video=0)) == 3


def test_image_features_round_trip_exactly(tmp_path):
    written = write_lerobot(tmp_path, images_as="png")
    store = load_lerobot(tmp_path, progress=False)
    images = store["observation.images.top"]
    assert torch.equal(images.values, torch.from_numpy(written["images"]))  # PNG is lossless
    assert torch.equal(images.times, store["action"].times)  # the table's clock
    assert images.offsets.tolist() == store["action"].offsets.tolist()
    # A frame that is not an image is an error naming episode, key and frame.
    path = tmp_path / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    cells = table.column("observation.images.top").to_pylist()
    cells[6]["bytes"] = b"not a png"
    column = table.schema.get_field_index("observation.images.top")
    pq.write_table(
        table.set_column(
            column, "observation.images.top", pa.array(cells, table.schema[column].type)
        ),
        path,
    )
    with pytest.raises(
        LoaderError, match=r"episode 2, key 'observation.images.top', frame 0: cannot decode"
    ):
        load_lerobot(tmp_path, progress=False)


def test_video_frames_kept_as_jpeg(tmp_path):
    write_lerobot(tmp_path, codec="libx264")
    raw = load_lerobot(tmp_path, progress=False)
    jpeg = load_lerobot(tmp_path, frames="jpeg", progress=False)
    stream = jpeg[CAMERA]
    assert stream.encoding.codec == "jpeg" and stream.sample_shape == (*SIZE, 3)
    assert torch.equal(stream.times, raw[CAMERA].times)
    assert torch.equal(stream.offsets, raw[CAMERA].offsets)
    assert_near(every_frame(jpeg, CAMERA), raw[CAMERA].values)
    for key in ("observation.state", "action"):
        assert jpeg[key].encoding is None and torch.equal(jpeg[key].values, raw[key].values)
    resized_raw = load_lerobot(tmp_path, resize=(32, 48), progress=False)
    resized = load_lerobot(tmp_path, frames="jpeg", resize=(32, 48), progress=False)
    assert resized[CAMERA].encoding.codec == "jpeg" and resized[CAMERA].sample_shape == (32, 48, 3)
    assert resized_raw[CAMERA].sample_shape == (32, 48, 3)
    assert_near(every_frame(resized, CAMERA), resized_raw[CAMERA].values)


def test_png_image_features_keep_their_bytes(tmp_path):
    write_lerobot(tmp_path, images_as="png")
    path = tmp_path / "data/chunk-000/file-000.parquet"
    cells = pq.read_table(path).column(CAMERA).to_pylist()
    raw = load_lerobot(tmp_path, progress=False)
    kept = load_lerobot(tmp_path, frames="png", progress=False)
    stream = kept[CAMERA]
    assert stream.encoding.codec == "png"
    assert bytes(stream.values.numpy()) == b"".join(cell["bytes"] for cell in cells)
    assert torch.equal(every_frame(kept, CAMERA), raw[CAMERA].values)
    assert torch.equal(stream.stats["mean"], raw[CAMERA].stats["mean"])
    as_jpeg = load_lerobot(tmp_path, frames={CAMERA: "jpeg"}, progress=False)
    assert as_jpeg[CAMERA].encoding.codec == "jpeg"
    assert_near(every_frame(as_jpeg, CAMERA), raw[CAMERA].values)
    resized_raw = load_lerobot(tmp_path, resize=(32, 32), progress=False)
    resized = load_lerobot(tmp_path, frames="png", resize=(32, 32), progress=False)
    assert resized[CAMERA].sample_shape == (32, 32, 3)
    assert torch.equal(every_frame(resized, CAMERA), resized_raw[CAMERA].values)  # PNG: exact
    # A PNG cut short is kept (its header reads) and found where from_episodes decodes it.
    cells[6]["bytes"] = cells[6]["bytes"][:-30]
    table = pq.read_table(path)
    column = table.schema.get_field_index(CAMERA)
    pq.write_table(
        table.set_column(column, CAMERA, pa.array(cells, table.schema[column].type)), path
    )
    with pytest.raises(
        LoaderError, match=rf"episode 2: .*stream '{CAMERA}', frame 0: the png frame does not"
    ):
        load_lerobot(tmp_path, frames="png", progress=False)


def test_episodes_are_read_at_most_threads_ahead(tmp_path, monkeypatch):
    """Host memory is bounded: episodes are decoded at most `threads` ahead
    of the one being packed, however many the dataset holds."""
    import robocache.data.loaders.lerobot as lerobot_loader

    write_lerobot(tmp_path, lengths=(2,) * 12)
    started, ahead = [], []
    read_ahead = lerobot_loader._read_ahead

    def counting_read_ahead(rows, start, depth):
        def counted(row):  # reads the tables and submits the decodes
            started.append(row["episode_index"])
            return start(row)

        return read_ahead(rows, counted, depth)

    def recording_store(where, episodes, **kwargs):  # packs nothing, counts how far ahead
        for k, _ in enumerate(episodes, 1):
            ahead.append(len(started) - k)

    monkeypatch.setattr(lerobot_loader, "_read_ahead", counting_read_ahead)
    monkeypatch.setattr(lerobot_loader, "packed_store", recording_store)
    load_lerobot(tmp_path, threads=3, progress=False)
    assert len(ahead) == 12 and len(started) == 12
    assert max(ahead) == 3  # it does read ahead, and never further


def test_sampler_parity_on_loaded_data(tmp_path):
    write_lerobot(tmp_path)
    store = load_lerobot(tmp_path, progress=False)
    deltas = [-0.1, 0.0, 0.1, 0.2]
    sampler = WindowSampler(
        store,
        {"action": deltas, "observation.images.top": [-0.1, 0.0]},
        shuffle=False,
        batch_size=14,
    )
    batch = next(iter(sampler))
    offsets = store["action"].offsets
    for b in range(14):
        e = int(torch.searchsorted(offsets[1:], torch.tensor(b), right=True))
        start, end = int(offsets[e]), int(offsets[e + 1])
        rows = [b + round(d * FPS) for d in deltas]
        clamped = [min(max(r, start), end - 1) for r in rows]
        assert torch.equal(batch["action"][b], store["action"].values[clamped])
        assert batch["action_is_pad"][b].tolist() == [not start <= r < end for r in rows]
        video_rows = [min(max(b + r, start), end - 1) for r in (-1, 0)]
        assert torch.equal(
            batch["observation.images.top"][b], store["observation.images.top"].values[video_rows]
        )


def test_bad_datasets(tmp_path):
    write_lerobot(tmp_path)
    with pytest.raises(LoaderError, match=r"no feature 'observation.wrist'"):
        load_lerobot(tmp_path, keys=["observation.wrist"], progress=False)
    # A video shorter than its table: cut the file's last episode short.
    rows = pq.read_table(tmp_path / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    rows[2]["length"] = 9
    rows[2]["dataset_to_index"] += 1
    pq.write_table(
        pa.Table.from_pylist(rows), tmp_path / "meta/episodes/chunk-000/file-000.parquet"
    )
    with pytest.raises(LoaderError, match=r"episode 2.*the data file holds 8 of its 9 rows"):
        load_lerobot(tmp_path, progress=False)
    with pytest.raises(
        LoaderError,
        match=r"episode 2, key 'observation.images.top'.*8 frames of the segment, the table 9",
    ):
        load_lerobot(tmp_path, keys=["observation.images.top"], progress=False)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        store = load_lerobot(tmp_path, progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]
    (tmp_path / "meta/info.json").write_text(json.dumps({"codebase_version": "v2.1"}))
    with pytest.raises(LoaderError, match="codebase_version 'v2.1' is not v3"):
        load_lerobot(tmp_path, progress=False)


def test_train_from_lerobot_example_runs_and_caches(tmp_path):
    import os
    import subprocess
    import sys

    write_lerobot(tmp_path / "dataset")
    example = os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "examples",
        "train_from_lerobot.py",
    )
    command = [
        sys.executable,
        example,
        str(tmp_path / "dataset"),
        "--cache",
        str(tmp_path / "cache"),
        "--steps",
        "3",
        "--batch-size",
        "4",
        "--device",
        "cpu",
    ]
    for _ in range(2):  # the second run maps the cache
        result = subprocess.run(command, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        assert "step 3: loss" in result.stdout
    assert (tmp_path / "cache" / "store.safetensors").exists()
