"""load_bag on ROS 2 bags (sqlite3 and mcap storage) written here with
rosbags' writer: joints at 500 Hz, a camera at 30 Hz and force/torque at
1 kHz, with jitter and dropped messages."""

import numpy as np
import pytest
import torch

pytest.importorskip("rosbags", reason="the bags extra: pip install robocache[bags]")

from fixtures.bags import MS, T0, TOPICS, TS, header, write_bag  # noqa: E402
from rosbags.rosbag2 import StoragePlugin, Writer  # noqa: E402
from rosbags.typesys import Stores, get_typestore  # noqa: E402

from robocache.data import LoaderError, load_bag  # noqa: E402


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
