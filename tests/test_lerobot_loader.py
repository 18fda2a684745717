"""load_lerobot on LeRobot v3 datasets written here with pyarrow and PyAV,
following the format (meta/info.json, meta/episodes, meta/tasks, data and
video files holding many episodes each)."""

import io
import json
import os

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from helpers import scheduling, scheduling_kept
from PIL import Image

from robocache.data import LoaderError, WindowSampler, load_lerobot

FPS = 10
SIZE = (64, 64)  # (H, W); SVT-AV1 wants frames of at least 64 x 64


def encode(path, frames, codec):
    """As LeRobot encodes: yuv420p, a keyframe every 2 frames, crf 30. The
    caller's CPU scheduling is kept (SVT-AV1, run as root, makes it real-time:
    see helpers.scheduling_kept)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with scheduling_kept(), av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(codec, rate=FPS, options={"g": "2", "crf": "30"})
        stream.height, stream.width = frames.shape[1:3]
        stream.pix_fmt = "yuv420p"
        for image in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def write_lerobot(
    root,
    lengths=(5, 1, 8),
    codec="libsvtav1",
    images_as="video",
    size=SIZE,
    cameras=("top",),
    state_dim=4,
    action_dim=2,
):
    """A v3 dataset: one data file, and per camera one video file holding
    every episode; with images_as="png", the frames are PNG image structs in
    the data file instead (use_videos=False). Every camera gets the same
    frames (the first camera's are returned)."""
    rng = np.random.default_rng()
    n = sum(lengths)
    state = rng.standard_normal((n, state_dim)).astype(np.float32)
    action = rng.standard_normal((n, action_dim)).astype(np.float32)
    episode = np.repeat(np.arange(len(lengths)), lengths)
    frame = np.concatenate([np.arange(k) for k in lengths])
    timestamp = (frame / FPS).astype(np.float32)
    tasks = ["pick the cube", "open the drawer"]
    task = episode % 2
    columns = {
        "observation.state": pa.array(list(state), type=pa.list_(pa.float32(), state_dim)),
        "action": pa.array(list(action), type=pa.list_(pa.float32(), action_dim)),
        "timestamp": timestamp,
        "frame_index": frame,
        "episode_index": episode,
        "index": np.arange(n),
        "task_index": task,
    }
    # Smooth images (they survive lossy coding), different in every frame.
    H, W = size
    ramp = np.linspace(0, 1, W)[None, :, None]
    images = np.stack(
        [(40 + 15 * (i % 12) + 60 * ramp * np.ones((H, 1, 3))).astype(np.uint8) for i in range(n)]
    )
    keys = [f"observation.images.{c}" for c in cameras]
    for key in keys:
        if images_as == "png":
            columns[key] = pa.array(
                [{"bytes": png(image), "path": None} for image in images],
                type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]),
            )
        else:
            encode(root / f"videos/{key}/chunk-000/file-000.mp4", images, codec)
    (root / "data/chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(columns), root / "data/chunk-000/file-000.parquet")
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rows = {
        "episode_index": list(range(len(lengths))),
        "tasks": [[tasks[e % 2]] for e in range(len(lengths))],
        "length": list(lengths),
        "data/chunk_index": [0] * len(lengths),
        "data/file_index": [0] * len(lengths),
        "dataset_from_index": [int(s) for s in starts],
        "dataset_to_index": [int(s + k) for s, k in zip(starts, lengths)],
    }
    features = {
        "observation.state": {"dtype": "float32", "shape": [state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [action_dim], "names": None},
    }
    for key in keys:
        features[key] = {
            "dtype": "image" if images_as == "png" else "video",
            "shape": [H, W, 3],
            "names": ["height", "width", "channel"],
        }
        if images_as == "png":
            continue
        features[key]["info"] = {
            "video.codec": "av1" if codec == "libsvtav1" else "h264",
            "video.fps": FPS,
        }
        rows[f"videos/{key}/chunk_index"] = [0] * len(lengths)
        rows[f"videos/{key}/file_index"] = [0] * len(lengths)
        rows[f"videos/{key}/from_timestamp"] = [float(s / FPS) for s in starts]
        rows[f"videos/{key}/to_timestamp"] = [float((s + k) / FPS) for s, k in zip(starts, lengths)]
    (root / "meta/episodes/chunk-000").mkdir(parents=True)
    pq.write_table(pa.table(rows), root / "meta/episodes/chunk-000/file-000.parquet")
    pq.write_table(pa.table({"task": tasks, "task_index": [0, 1]}), root / "meta/tasks.parquet")
    for name, dtype in (
        ("timestamp", "float32"),
        ("frame_index", "int64"),
        ("episode_index", "int64"),
        ("index", "int64"),
        ("task_index", "int64"),
    ):
        features[name] = {"dtype": dtype, "shape": [1], "names": None}
    info = {
        "codebase_version": "v3.0",
        "fps": FPS,
        "total_episodes": len(lengths),
        "total_tasks": len(tasks),
        "total_frames": n,
        "chunks_size": 1000,
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": None
        if images_as == "png"
        else "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
    }
    (root / "meta/info.json").write_text(json.dumps(info))
    return {
        "state": state,
        "action": action,
        "timestamp": timestamp,
        "images": images,
        "lengths": lengths,
        "tasks": tasks,
    }


def png(image):
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def decode_all(path):
    with av.open(str(path)) as container:
        return [(f.time, f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]


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

    class Recorder:
        @staticmethod
        def from_episodes(episodes, **kwargs):
            for k, _ in enumerate(episodes, 1):
                ahead.append(len(started) - k)

    monkeypatch.setattr(lerobot_loader, "_read_ahead", counting_read_ahead)
    monkeypatch.setattr(lerobot_loader, "EpisodeStore", Recorder)
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
