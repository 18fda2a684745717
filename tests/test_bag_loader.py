"""load_bag on ROS 2 bags (sqlite3 and mcap storage) written here with
rosbags' writer: joints at 500 Hz, a camera at 30 Hz and force/torque at
1 kHz, with jitter and dropped messages."""

import numpy as np
import pytest
import torch
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

from robocache.data import LoaderError, load_bag

TS = get_typestore(Stores.ROS2_HUMBLE)
T0 = 1_700_000_000 * 10**9
MS = 1_000_000


def header(t, frame="base"):
    return TS.types["std_msgs/msg/Header"](
        stamp=TS.types["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
        frame_id=frame,
    )


def clock(rate_hz, seconds, rng, pause=False):
    n = int(rate_hz * seconds)
    t = np.arange(n) * (10**9 // rate_hz) + rng.integers(
        -(10**9 // rate_hz) // 10, (10**9 // rate_hz) // 10, n
    )
    keep = rng.random(n) > 0.05  # dropped messages
    t = np.sort(t[keep]).astype(np.int64)
    return t + np.where(pause & (t > seconds * 5e8), 10**9, 0)


def write_bag(path, storage, seconds=0.4, pause=False, marks=()):
    """With pause, the second half of the recording comes 1 s later; marks
    (ns after the start) are PointStamped messages on /episode_start."""
    rng = np.random.default_rng()
    written = {
        "/joint_states.position": [],
        "/wrench.wrench.force": [],
        "/wrench.wrench.torque": [],
        "/camera/image.image": [],
    }
    stamps = {k: [] for k in written}
    JointState, Wrench, Vector3 = (
        TS.types["sensor_msgs/msg/JointState"],
        TS.types["geometry_msgs/msg/Wrench"],
        TS.types["geometry_msgs/msg/Vector3"],
    )
    WrenchStamped, Image = (
        TS.types["geometry_msgs/msg/WrenchStamped"],
        TS.types["sensor_msgs/msg/Image"],
    )
    messages = []
    for t in clock(500, seconds, rng, pause):
        q = rng.standard_normal(7)
        messages.append(
            (
                "/joint_states",
                "sensor_msgs/msg/JointState",
                T0 + int(t),
                JointState(
                    header=header(T0 + int(t)),
                    name=[f"j{i}" for i in range(7)],
                    position=q,
                    velocity=np.zeros(7),
                    effort=np.zeros(7),
                ),
            )
        )
        written["/joint_states.position"].append(q)
        stamps["/joint_states.position"].append(T0 + int(t))
    for t in clock(1000, seconds, rng, pause):
        f, tq = rng.standard_normal(3), rng.standard_normal(3)
        messages.append(
            (
                "/wrench",
                "geometry_msgs/msg/WrenchStamped",
                T0 + int(t),
                WrenchStamped(
                    header=header(T0 + int(t)),
                    wrench=Wrench(force=Vector3(*f), torque=Vector3(*tq)),
                ),
            )
        )
        written["/wrench.wrench.force"].append(f)
        written["/wrench.wrench.torque"].append(tq)
        stamps["/wrench.wrench.force"].append(T0 + int(t))
        stamps["/wrench.wrench.torque"].append(T0 + int(t))
    for t in clock(30, seconds, rng, pause):
        img = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)
        messages.append(
            (
                "/camera/image",
                "sensor_msgs/msg/Image",
                T0 + int(t),
                Image(
                    header=header(T0 + int(t)),
                    height=6,
                    width=8,
                    encoding="rgb8",
                    is_bigendian=0,
                    step=24,
                    data=img.reshape(-1),
                ),
            )
        )
        written["/camera/image.image"].append(img)
        stamps["/camera/image.image"].append(T0 + int(t))
    PointStamped, Point = (
        TS.types["geometry_msgs/msg/PointStamped"],
        TS.types["geometry_msgs/msg/Point"],
    )
    for t in marks:
        mark = PointStamped(header=header(T0 + int(t)), point=Point(x=0.0, y=0.0, z=0.0))
        messages.append(("/episode_start", "geometry_msgs/msg/PointStamped", T0 + int(t), mark))
    log_delay = 3 * MS  # logged a little after acquisition
    messages.sort(key=lambda m: m[2])
    with Writer(path, version=8, storage_plugin=storage) as writer:
        conns = {}
        for topic, msgtype, t, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=TS)
            writer.write(conns[topic], t + log_delay, TS.serialize_cdr(msg, msgtype))
    return {k: np.stack(v) for k, v in written.items()}, {k: np.array(v) for k, v in stamps.items()}


TOPICS = {
    "/joint_states": "position",
    "/wrench": ["wrench.force", "wrench.torque"],
    "/camera/image": "image",
}


@pytest.mark.parametrize("storage", [StoragePlugin.SQLITE3, StoragePlugin.MCAP])
def test_bag_round_trip_is_exact(tmp_path, storage):
    written, stamps = write_bag(tmp_path / "run1", storage)
    store = load_bag(tmp_path / "run1", TOPICS, progress=False)
    assert set(store.keys()) == set(written)
    for key in written:
        assert torch.equal(store[key].values, torch.from_numpy(written[key])), key
        assert store[key].times.tolist() == stamps[key].tolist(), key
    logged = load_bag(
        tmp_path / "run1", {"/joint_states": "position"}, time_source="log", progress=False
    )
    assert (
        logged["/joint_states.position"].times.tolist()
        == (stamps["/joint_states.position"] + 3 * MS).tolist()
    )


def test_files_are_episodes_and_gaps_split_them(tmp_path):
    write_bag(tmp_path / "a", StoragePlugin.SQLITE3)
    write_bag(tmp_path / "b", StoragePlugin.SQLITE3)
    store = load_bag([tmp_path / "a", tmp_path / "b"], TOPICS, progress=False)
    assert store.num_episodes == 2
    written, stamps = write_bag(tmp_path / "paused", StoragePlugin.MCAP, pause=True)
    split = load_bag(tmp_path / "paused", TOPICS, split_gap_s=0.5, progress=False)
    assert split.num_episodes == 2
    for key, t in stamps.items():
        first = int((t < T0 + 6 * 10**8).sum())  # before the 1 s pause
        assert split[key].offsets.tolist() == [0, first, len(t)], key
        assert torch.equal(split[key].values, torch.from_numpy(written[key]))


def test_a_marker_topic_starts_episodes(tmp_path):
    written, stamps = write_bag(tmp_path / "run", StoragePlugin.MCAP, marks=(100 * MS, 250 * MS))
    store = load_bag(tmp_path / "run", TOPICS, marker_topic="/episode_start", progress=False)
    assert store.num_episodes == 3
    for key, t in stamps.items():
        cuts = [int((t < T0 + m).sum()) for m in (100 * MS, 250 * MS)]
        assert store[key].offsets.tolist() == [0, *cuts, len(t)], key
        assert torch.equal(store[key].values, torch.from_numpy(written[key]))
    with pytest.raises(LoaderError, match="no topic '/episode_end'"):
        load_bag(tmp_path / "run", TOPICS, marker_topic="/episode_end", progress=False)


def test_bad_bags(tmp_path):
    write_bag(tmp_path / "a", StoragePlugin.SQLITE3)
    with pytest.raises(LoaderError, match=r"no topic '/gripper'"):
        load_bag(tmp_path / "a", {"/gripper": "position"}, progress=False)
    with pytest.raises(LoaderError, match=r"topic '/wrench'.*no field 'forces'"):
        load_bag(tmp_path / "a", {"/wrench": "wrench.forces"}, progress=False)
    with pytest.raises(LoaderError, match="cannot read the bag"):
        load_bag(tmp_path / "missing", TOPICS, progress=False)


def test_header_times_that_go_backwards_are_an_error(tmp_path):
    JointState = TS.types["sensor_msgs/msg/JointState"]
    with Writer(tmp_path / "back", version=8) as writer:
        conn = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=TS)
        for k, stamp in enumerate((30, 20, 40)):
            msg = JointState(
                header=header(T0 + stamp * MS),
                name=["j"],
                position=np.zeros(1),
                velocity=np.zeros(1),
                effort=np.zeros(1),
            )
            writer.write(conn, T0 + k * MS, TS.serialize_cdr(msg, "sensor_msgs/msg/JointState"))
    with pytest.raises(
        LoaderError, match=r"stream '/joint_states.position': times go backwards at message 1"
    ):
        load_bag(tmp_path / "back", {"/joint_states": "position"}, progress=False)
    logged = load_bag(
        tmp_path / "back", {"/joint_states": "position"}, time_source="log", progress=False
    )
    assert logged["/joint_states.position"].times.tolist() == [T0, T0 + MS, T0 + 2 * MS]


def test_ros1_bags(tmp_path):
    from rosbags.rosbag1 import Writer as Ros1Writer

    ts = get_typestore(Stores.ROS1_NOETIC)
    JointState, Header, Time = (
        ts.types["sensor_msgs/msg/JointState"],
        ts.types["std_msgs/msg/Header"],
        ts.types["builtin_interfaces/msg/Time"],
    )
    rng = np.random.default_rng()
    positions, stamps = rng.standard_normal((6, 3)), [T0 + k * 2 * MS for k in range(6)]
    with Ros1Writer(tmp_path / "run.bag") as writer:
        conn = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        for k, (q, t) in enumerate(zip(positions, stamps)):
            msg = JointState(
                header=Header(
                    seq=k, stamp=Time(sec=t // 10**9, nanosec=t % 10**9), frame_id="base"
                ),
                name=["a", "b", "c"],
                position=q,
                velocity=np.zeros(3),
                effort=np.zeros(3),
            )
            writer.write(conn, t + MS, ts.serialize_ros1(msg, "sensor_msgs/msg/JointState"))
    store = load_bag(tmp_path / "run.bag", {"/joint_states": "position"}, progress=False)
    assert torch.equal(store["/joint_states.position"].values, torch.from_numpy(positions))
    assert store["/joint_states.position"].times.tolist() == stamps
