"""load_bag on ROS 2 bags (sqlite3 and mcap storage) written here with
rosbags' writer: joints at 500 Hz, a camera at 30 Hz and force/torque at
1 kHz, with jitter and dropped messages; and their camera frames kept as
JPEG (byte for byte where they arrive as a JPEG CompressedImage)."""

from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("rosbags", reason="the bags extra: pip install robocache[bags]")

from fixtures.bags import MS, T0, TOPICS, TS, header, write_bag  # noqa: E402
from frame_checks import every_frame, pil_frames, psnr_db  # noqa: E402
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


CAMERA = {"/camera/image": "image"}


def camera_bytes(bag):
    """The data of each /camera/image CompressedImage, in order, as rosbags reads them."""
    from rosbags.highlevel import AnyReader

    with AnyReader([Path(bag)], default_typestore=TS) as reader:
        connections = [c for c in reader.connections if c.topic == "/camera/image"]
        return [
            bytes(reader.deserialize(raw, c.msgtype).data)
            for c, _, raw in reader.messages(connections=connections)
        ]


@pytest.mark.parametrize("storage", [StoragePlugin.SQLITE3, StoragePlugin.MCAP])
def test_jpeg_compressed_images_are_kept_byte_for_byte(tmp_path, storage):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    written, stamps = write_bag(tmp_path / "run", storage, camera="jpeg", size=(24, 32))
    blobs = camera_bytes(tmp_path / "run")
    store = load_bag(tmp_path / "run", TOPICS, frames="jpeg", progress=False)
    camera = store["/camera/image.image"]
    assert camera.encoding.codec == "jpeg" and camera.sample_shape == (24, 32, 3)
    assert bytes(camera.values.numpy()) == b"".join(blobs)
    assert camera.times.tolist() == stamps["/camera/image.image"].tolist()
    assert torch.equal(every_frame(store, "/camera/image.image"), pil_frames(blobs))
    for key in ("/joint_states.position", "/wrench.wrench.force"):
        assert torch.equal(store[key].values, torch.from_numpy(written[key])), key
    raw = load_bag(tmp_path / "run", CAMERA, progress=False)  # frames="raw": decoded, as before
    assert raw["/camera/image.image"].encoding is None
    assert torch.equal(raw["/camera/image.image"].values, pil_frames(blobs))
    small = load_bag(tmp_path / "run", CAMERA, frames="jpeg", resize=(12, 16), progress=False)
    resized = small["/camera/image.image"]
    assert resized.encoding.codec == "jpeg" and resized.sample_shape == (12, 16, 3)
    assert resized.num_samples == len(blobs)


def test_raw_images_become_jpeg_near_the_frames(tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    written, _ = write_bag(tmp_path / "run", StoragePlugin.SQLITE3, size=(48, 64))
    frames = torch.from_numpy(written["/camera/image.image"])
    store = load_bag(tmp_path / "run", CAMERA, frames="jpeg", jpeg_quality=90, progress=False)
    camera = store["/camera/image.image"]
    assert camera.encoding.codec == "jpeg" and camera.sample_shape == (48, 64, 3)
    assert psnr_db(every_frame(store, "/camera/image.image"), frames) >= 28
    exact = load_bag(
        tmp_path / "run", CAMERA, frames={"/camera/image.image": "png"}, progress=False
    )
    assert exact["/camera/image.image"].encoding.codec == "png"
    assert torch.equal(every_frame(exact, "/camera/image.image"), frames)


def test_a_corrupt_jpeg_names_the_bag_and_topic(tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    write_bag(tmp_path / "bad", StoragePlugin.SQLITE3, camera="jpeg", size=(48, 64), cut_frame=2)
    write_bag(tmp_path / "good", StoragePlugin.SQLITE3, camera="jpeg", size=(48, 64))
    bags = [tmp_path / "good", tmp_path / "bad"]
    with pytest.raises(LoaderError, match=r"load_bag\(.*bad\).*'/camera/image.*frame 2.*jpeg"):
        load_bag(bags, CAMERA, frames="jpeg", progress=False)
    with pytest.raises(
        LoaderError, match=r"load_bag\(.*bad\), topic '/camera/image': cannot decode"
    ):
        load_bag(bags, CAMERA, progress=False)
    with pytest.warns(UserWarning, match=r"skipped 1 bad file.*\n.*bad.*'/camera/image'"):
        store = load_bag(bags, CAMERA, frames="jpeg", skip_bad=True, progress=False)
    assert bytes(store["/camera/image.image"].values.numpy()) == b"".join(camera_bytes(bags[0]))
