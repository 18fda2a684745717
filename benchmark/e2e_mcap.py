"""The multi-rate variant of benchmark/e2e.py: robot logs in MCAP, one file
an episode, written here with mcap's protobuf writer:

- ``/joints`` (JointState-like): 7 positions at 500 Hz;
- ``/wrench``: force and torque (3 + 3) at 1 kHz;
- ``/camera``: a 96x96 JPEG (CompressedImage-like) at 30 Hz;

each clock jittered by up to a tenth of its period. The policy sees, at each
camera frame (the anchors), the frame before and the frame itself, the last
two joint readings and the last two wrench readings (the state, 2 x 13), and
the joints 0.1 s to 1.6 s ahead (the action chunk). robocache samples each
stream on its own clock; the in-RAM peer does what a user would write: per
sample, a numpy searchsorted on each stream's times.
"""

import io

import numpy as np
import torch
from PIL import Image

CAMERA, JOINTS, FORCE, TORQUE = (
    "/camera.image",
    "/joints.position",
    "/wrench.force",
    "/wrench.torque",
)
TOPICS = {"/camera": "image", "/joints": "position", "/wrench": ["force", "torque"]}
RATES = {"/camera": 30, "/joints": 500, "/wrench": 1000}
STATE = [-0.002, 0.0]  # the last two joint readings (500 Hz)
WRENCH = [-0.001, 0.0]  # the last two wrench readings (1 kHz)
ACTION = [0.1 * k for k in range(1, 17)]  # the joints 0.1 s .. 1.6 s ahead
DELTAS = {
    CAMERA: [-1 / 30, 0.0],
    JOINTS: STATE + ACTION,
    FORCE: WRENCH,
    TORQUE: WRENCH,
}
POLICY_CAMERAS = ["observation.images.cam0"]
STATE_DIM = 7 + 3 + 3
T0 = 1_700_000_000 * 10**9


def _messages():
    from test_mcap_loader import stamped_messages  # the tests' builder (tests/ is on sys.path)

    return stamped_messages(
        "e2e",
        {
            "Joints": [("position", "doubles")],
            "Wrench": [("force", "doubles"), ("torque", "doubles")],
            "CompressedImage": [("data", "bytes"), ("format", "string")],
        },
    )


def write_bags(root, episodes, seconds, size, seed=0):
    """`episodes` MCAP files of `seconds` each in `root`; returns their paths."""
    from mcap_protobuf.writer import Writer

    classes = _messages()
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for e in range(episodes):
        start = T0 + e * 10**12
        clocks = {}
        for topic, rate in RATES.items():
            period = 10**9 // rate
            n = int(rate * seconds)
            jitter = rng.integers(-period // 10, period // 10 + 1, n)
            clocks[topic] = start + np.arange(n) * period + jitter
        records = []
        for t in clocks["/joints"]:
            records.append(("/joints", t, classes["Joints"](position=rng.standard_normal(7))))
        for t in clocks["/wrench"]:
            force, torque = rng.standard_normal(3), rng.standard_normal(3)
            records.append(("/wrench", t, classes["Wrench"](force=force, torque=torque)))
        for t in clocks["/camera"]:
            buffer = io.BytesIO()
            image = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            Image.fromarray(image).save(buffer, format="JPEG", quality=90)
            records.append(
                ("/camera", t, classes["CompressedImage"](data=buffer.getvalue(), format="jpeg"))
            )
        path = root / f"episode_{e:04d}.mcap"
        with open(path, "wb") as f, Writer(f) as writer:
            for topic, t, message in sorted(records, key=lambda r: r[1]):
                message.timestamp.seconds, message.timestamp.nanos = divmod(int(t), 10**9)
                writer.write_message(topic, message, log_time=int(t), publish_time=int(t))
        paths.append(path)
    return paths


def policy_batch(batch):
    """The sampler's (or the peer's) windows as the policies' keys: one
    camera, the state (joints, force, torque: 2 x 13) and the action chunk."""
    joints, pad = batch[JOINTS], batch[f"{JOINTS}_is_pad"]
    k = len(STATE)
    state = torch.cat([joints[:, :k], batch[FORCE], batch[TORQUE]], dim=-1)
    return {
        POLICY_CAMERAS[0]: batch[CAMERA],
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
        self.values = {k: store[k].values.numpy() for k in DELTAS}
        self.times = {k: store[k].times.numpy() for k in DELTAS}
        self.offsets = {k: store[k].offsets.tolist() for k in DELTAS}
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
        for key, deltas in DELTAS.items():
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
