"""The pipelines of benchmark/e2e.py, and the datasets they read.

- the LeRobot v3 dataset (two cameras, a state, a 7-dim action at 10 Hz),
  written by the tests' LeRobot fixture;
- the multi-rate robot logs in MCAP, one file an episode (the tests' MCAP
  fixture): ``/joints`` (7 positions at 500 Hz), ``/wrench`` (force and
  torque at 1 kHz), ``/camera`` (a JPEG at 30 Hz), each clock jittered by up
  to a tenth of its period. At each camera frame (the anchors) the policy
  sees the frame before and the frame itself, the last two joint readings
  and the last two wrench readings (the state, 2 x 13), and the joints 0.1 s
  to 1.6 s ahead (the action chunk);
- the peers: a per-sample LeRobot-like Dataset decoding video per sample,
  the lerobot package's own LeRobotDataset, and in-RAM windows (a numpy
  searchsorted a stream for the multi-rate logs), each behind a DataLoader.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from benchmark.writers import writers
from robocache.data import load_lerobot, load_mcap

FPS = 10  # the LeRobot dataset's rate

CAMERAS = ["observation.images.cam0", "observation.images.cam1"]
DELTAS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-1 / FPS, 0.0],
    **{cam: [-1 / FPS, 0.0] for cam in CAMERAS},
}


class PerSampleLeRobot(torch.utils.data.Dataset):
    """LeRobotDataset's per-sample path, restated: tables in memory, each
    camera's frames decoded for every sample (PyAV: open, seek to the
    keyframe before the first frame, decode forward), float32 CHW."""

    def __init__(self, root):
        import pyarrow.parquet as pq

        info = json.loads((Path(root) / "meta/info.json").read_text())
        table = pq.read_table(Path(root) / "data/chunk-000/file-000.parquet")
        self.state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
        self.action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
        self.episode = table.column("episode_index").to_numpy()
        episodes = pq.read_table(next(Path(root).glob("meta/episodes/chunk-*/*.parquet")))
        self.start = np.asarray(episodes.column("dataset_from_index").to_pylist())
        self.end = np.asarray(episodes.column("dataset_to_index").to_pylist())
        self.video_start = {
            cam: episodes.column(f"videos/{cam}/from_timestamp").to_pylist() for cam in CAMERAS
        }
        self.videos = {
            cam: str(
                Path(root) / info["video_path"].format(video_key=cam, chunk_index=0, file_index=0)
            )
            for cam in CAMERAS
        }

    def __len__(self):
        return len(self.episode)

    def _rows(self, i, deltas):
        e = self.episode[i]
        rows = np.array([i + round(d * FPS) for d in deltas])
        pad = (rows < self.start[e]) | (rows >= self.end[e])
        return np.clip(rows, self.start[e], self.end[e] - 1), torch.from_numpy(pad)

    def _decode(self, path, times):
        frames = {}
        import av

        with av.open(path) as container:
            stream = container.streams.video[0]
            container.seek(int(min(times) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                for t in times:
                    if t not in frames and abs(frame.time - t) < 1e-4:
                        frames[t] = frame.to_ndarray(format="rgb24")
                if len(frames) == len(set(times)) or frame.time > max(times) + 1e-4:
                    break
        images = torch.from_numpy(np.stack([frames[t] for t in times]))
        return images.permute(0, 3, 1, 2).float().div(255)

    def __getitem__(self, i):
        item = {}
        for key, source in (("action", self.action), ("observation.state", self.state)):
            rows, pad = self._rows(i, DELTAS[key])
            item[key], item[f"{key}_is_pad"] = torch.from_numpy(source[rows]), pad
        e = self.episode[i]
        for cam in CAMERAS:
            rows, pad = self._rows(i, DELTAS[cam])
            times = [self.video_start[cam][e] + (r - self.start[e]) / FPS for r in rows]
            item[cam], item[f"{cam}_is_pad"] = self._decode(self.videos[cam], times), pad
        return item


class RealLeRobot(torch.utils.data.Dataset):
    """The lerobot package's own LeRobotDataset on `root`: the same windows,
    decoded by its pyav backend; each item cut to the keys PerSampleLeRobot
    gives (the policy's), since the rest (the task string among them) does
    not batch onto the GPU."""

    def __init__(self, root):
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        self.dataset = LeRobotDataset(
            "local/e2e", root=root, delta_timestamps=DELTAS, video_backend="pyav"
        )
        self.keys = [*DELTAS, *(f"{key}_is_pad" for key in DELTAS)]

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        item = self.dataset[i]
        return {key: item[key] for key in self.keys}


def why_lerobot_does_not_import():
    """None where lerobot's LeRobotDataset imports, else the error's last
    line. Tried in a child process: importing it here would add its modules
    (some 200 MB) to the host memory of every pipeline measured after."""
    child = subprocess.run(
        [sys.executable, "-c", "import lerobot.datasets.lerobot_dataset"],
        capture_output=True,
        text=True,
    )
    return None if child.returncode == 0 else (child.stderr.strip().splitlines() or ["?"])[-1]


def build_store(args, root, say):
    """Writes the dataset into `root` unless it is there, and loads it:
    (store, seconds the load took)."""
    if args.dataset == "lerobot":
        if not (root / "meta/info.json").exists():
            say(f"writing the LeRobot dataset {root} ...")
            writers("lerobot").write_lerobot(
                root,
                lengths=(args.frames,) * args.episodes,
                codec="libsvtav1" if args.codec == "av1" else "libx264",
                size=(args.size, args.size),
                cameras=("cam0", "cam1"),
                state_dim=14,
                action_dim=7,
            )
        load = lambda: load_lerobot(root, progress=False)  # noqa: E731
    else:
        paths = sorted(root.glob("*.mcap"))
        if len(paths) != args.episodes:
            say(f"writing {args.episodes} MCAP logs in {root} ...")
            paths = writers("mcap").write_robot_logs(
                root, args.episodes, args.frames / FPS, args.size, LOG_RATES
            )
        load = lambda: load_mcap(paths, LOG_TOPICS, progress=False)  # noqa: E731
    say("loading it into a store ...")
    start = time.perf_counter()
    store = load()
    return store, time.perf_counter() - start


def loader_batches(dataset, workers, batch_size, device, uint8_cameras=(), adapt=None):
    """Batches of `dataset` behind a DataLoader, moved to `device`; the
    `uint8_cameras` keys (B, S, H, W, C) uint8 made (B, S, C, H, W) float
    there, then `adapt` applied."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        drop_last=True,
    )
    while True:
        for batch in loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            for cam in uint8_cameras:
                batch[cam] = batch[cam].permute(0, 1, 4, 2, 3).float().div_(255)
            yield adapt(batch) if adapt else batch


# -- the multi-rate robot logs ------------------------------------------------------

CAMERA, JOINTS, FORCE, TORQUE = (
    "/camera.image",
    "/joints.position",
    "/wrench.force",
    "/wrench.torque",
)
LOG_TOPICS = {"/camera": "image", "/joints": "position", "/wrench": ["force", "torque"]}
LOG_RATES = {"/camera": 30, "/joints": 500, "/wrench": 1000}
STATE = [-0.002, 0.0]  # the last two joint readings (500 Hz)
WRENCH = [-0.001, 0.0]  # the last two wrench readings (1 kHz)
ACTION = [0.1 * k for k in range(1, 17)]  # the joints 0.1 s .. 1.6 s ahead
LOG_DELTAS = {
    CAMERA: [-1 / 30, 0.0],
    JOINTS: STATE + ACTION,
    FORCE: WRENCH,
    TORQUE: WRENCH,
}
LOG_POLICY_CAMERAS = ["observation.images.cam0"]
LOG_STATE_DIM = 7 + 3 + 3


def log_policy_batch(batch):
    """The sampler's (or the peer's) windows as the policies' keys: one
    camera, the state (joints, force, torque: 2 x 13) and the action chunk."""
    joints, pad = batch[JOINTS], batch[f"{JOINTS}_is_pad"]
    k = len(STATE)
    state = torch.cat([joints[:, :k], batch[FORCE], batch[TORQUE]], dim=-1)
    return {
        LOG_POLICY_CAMERAS[0]: batch[CAMERA],
        "observation.state": state.float(),
        "action": joints[:, k:].float(),
        "action_is_pad": pad[:, k:],
    }


class PerSampleMultiRate(torch.utils.data.Dataset):
    """The in-RAM peer: per anchor (a camera frame), each stream's window by
    numpy searchsorted on its times (the nearest sample, a tie going to the
    later one, as sample_windows does; padding past the episode's samples),
    from the store's host arrays."""

    EDGE_NS = 100_000  # LeRobot's 1e-4 s

    def __init__(self, store):
        self.values = {k: store[k].values.numpy() for k in LOG_DELTAS}
        self.times = {k: store[k].times.numpy() for k in LOG_DELTAS}
        self.offsets = {k: store[k].offsets.tolist() for k in LOG_DELTAS}
        anchors = store[CAMERA].offsets
        self.episode = torch.repeat_interleave(
            torch.arange(store.num_episodes), anchors.diff()
        ).tolist()

    def __len__(self):
        return len(self.episode)

    def __getitem__(self, i):
        e = self.episode[i]
        t = self.times[CAMERA][i]
        item = {}
        for key, deltas in LOG_DELTAS.items():
            lo, hi = self.offsets[key][e], self.offsets[key][e + 1]
            times = self.times[key][lo:hi]
            query = t + np.round(np.asarray(deltas) * 1e9).astype(np.int64)
            right = np.clip(np.searchsorted(times, query), 1, len(times) - 1)
            nearer_left = query - times[right - 1] < times[right] - query  # a tie: the later
            rows = np.where(nearer_left, right - 1, right)
            pad = (query < times[0] - self.EDGE_NS) | (query > times[-1] + self.EDGE_NS)
            item[key] = torch.from_numpy(self.values[key][lo + rows])
            item[f"{key}_is_pad"] = torch.from_numpy(pad)
        return item
