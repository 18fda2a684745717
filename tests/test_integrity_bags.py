"""load_bag on corrupt bags: every bit flip or cut either raises a
LoaderError naming the bag, or loads the values the bag was written with,
wherever the bag carries checksums to tell. ROS 2 bags in mcap storage carry
MCAP's CRCs where their writer fills them (rosbag2's does; rosbags' writer
leaves them at 0, so these bags are rewritten with mcap's writer, which fills
them as rosbag2 does). sqlite3 storage and ROS 1 bags carry none: a flipped
value there loads as another value, and the last test here pins that."""

import warnings

import numpy as np
import pytest
import torch

pytest.importorskip("rosbags", reason="the bags extra: pip install robocache[bags]")
pytest.importorskip("mcap", reason="the mcap extra: pip install robocache[mcap]")

from fixtures.bags import MS, T0, TOPICS, TS, header, rewrite_with_crcs, write_bag  # noqa: E402
from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from rosbags.rosbag2 import StoragePlugin  # noqa: E402

import robocache.data.loaders.bags as bags  # noqa: E402
from robocache.data import LoaderError, load_bag  # noqa: E402


def load(path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a bag with its CRCs loads without a warning
        return load_bag(path, TOPICS, progress=False, **kwargs)


def bag_with_crcs(path, **options):
    written = write_bag(path, StoragePlugin.MCAP, seconds=0.2, seed=0)
    rewrite_with_crcs(path, **options)
    return written


def flip(path, byte, bit=0):
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "options", [{"chunk_size": 4096}, {"enable_data_crcs": True}], ids=["chunks", "data-crc"]
)
def test_bit_flips_in_an_mcap_bag_raise_or_change_nothing(tmp_path, options):
    bag_with_crcs(tmp_path / "run", **options)
    original = load(tmp_path / "run")
    results = []
    for copy, file, byte, bit in flipped_copies(tmp_path / "run", 40, seed=3):
        try:
            store = load(copy)
        except LoaderError as e:
            results.append("raised" if str(copy) in str(e) else f"{file} {byte}: unnamed: {e}")
            continue
        except Exception as e:  # a raw library error, or a warning made an error
            results.append(f"{file} byte {byte} bit {bit}: {type(e).__name__}: {e}")
            continue
        same = same_store(original, store)
        results.append("same" if same else f"{file} byte {byte} bit {bit}: changed")
    assert set(results) <= {"raised", "same"}, [r for r in results if r not in ("raised", "same")]
    assert results.count("raised") >= 20


def test_a_flipped_value_in_an_mcap_bag_is_a_crc_error(tmp_path):
    written, _ = bag_with_crcs(tmp_path / "run", compression=_uncompressed())
    path = tmp_path / "run" / "run.mcap"
    value = np.float64(written["/joint_states.position"][3, 2]).tobytes()
    flip(path, path.read_bytes().index(value))  # its last mantissa bit: another float
    with pytest.raises(LoaderError, match=r"run\.mcap\).*CRC of a chunk does not match"):
        load(tmp_path / "run")


def _uncompressed():
    from mcap.writer import CompressionType

    return CompressionType.NONE


def test_a_flip_in_the_summary_is_a_summary_crc_error(tmp_path):
    bag_with_crcs(tmp_path / "run")
    path = tmp_path / "run" / "run.mcap"
    flip(path, path.read_bytes().rindex(b"/joint_states") + 2)  # the summary's channel
    with pytest.raises(LoaderError, match=r"run\.mcap\).*CRC of the summary section"):
        load(tmp_path / "run")


@pytest.mark.parametrize("keep", [0, 9, 0.5, 0.97, -1])
def test_cut_mcap_bags_are_loader_errors(tmp_path, keep):
    bag_with_crcs(tmp_path / "run")
    path = tmp_path / "run" / "run.mcap"
    truncate(path, path.stat().st_size - 1 if keep == -1 else keep)
    with pytest.raises(LoaderError, match=r"run"):
        load(tmp_path / "run")


def test_a_cut_bag_is_skipped_with_skip_bad(tmp_path):
    bag_with_crcs(tmp_path / "good")
    bag_with_crcs(tmp_path / "cut")
    truncate(tmp_path / "cut" / "cut.mcap", 0.5)
    with pytest.warns(UserWarning, match=r"(?s)skipped 1 bad file.*cut.*end with an MCAP footer"):
        store = load_bag(
            [tmp_path / "good", tmp_path / "cut"], TOPICS, progress=False, skip_bad=True
        )
    assert store.num_episodes == 1


def test_bags_without_crcs_warn(tmp_path):
    """rosbags' writer leaves every CRC at 0: nothing there can be checked,
    and the loader says so, once for all the bags of a call."""
    write_bag(tmp_path / "a", StoragePlugin.MCAP, seconds=0.1)
    write_bag(tmp_path / "b", StoragePlugin.MCAP, seconds=0.1)
    with pytest.warns(UserWarning, match=r"2 file\(s\) carry no CRC") as caught:
        load_bag([tmp_path / "a", tmp_path / "b"], TOPICS, progress=False)
    assert sum("carry no CRC" in str(w.message) for w in caught) == 1


def test_without_the_mcap_package_the_loader_says_crcs_are_unchecked(tmp_path, monkeypatch):
    bag_with_crcs(tmp_path / "a")
    bag_with_crcs(tmp_path / "b")
    monkeypatch.setattr(bags, "_has_mcap", lambda: False)
    with pytest.warns(
        UserWarning,
        match=r"CRCs of 2 mcap-storage bag\(s\) were not checked:\n  .*a: the mcap package is not",
    ):
        load_bag([tmp_path / "a", tmp_path / "b"], TOPICS, progress=False)


def test_cut_sqlite3_and_ros1_bags_are_loader_errors(tmp_path):
    write_bag(tmp_path / "run", StoragePlugin.SQLITE3, seconds=0.2, seed=0)
    truncate(tmp_path / "run" / "run.db3", 0.5)
    with pytest.raises(LoaderError, match=r"load_bag\(.*run\)"):
        load(tmp_path / "run")
    from rosbags.rosbag1 import Writer as Ros1Writer
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS1_NOETIC)
    Header, Time = ts.types["std_msgs/msg/Header"], ts.types["builtin_interfaces/msg/Time"]
    JointState = ts.types["sensor_msgs/msg/JointState"]
    with Ros1Writer(tmp_path / "run.bag") as writer:
        conn = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=ts)
        for k in range(50):
            t = T0 + k * 2 * MS
            stamp = Time(sec=t // 10**9, nanosec=t % 10**9)
            msg = JointState(
                header=Header(seq=k, stamp=stamp, frame_id="base"),
                name=["a"],
                position=np.full(1, float(k)),
                velocity=np.zeros(1),
                effort=np.zeros(1),
            )
            writer.write(conn, t, ts.serialize_ros1(msg, "sensor_msgs/msg/JointState"))
    truncate(tmp_path / "run.bag", 0.5)
    with pytest.raises(LoaderError, match=r"run\.bag"):
        load_bag(tmp_path / "run.bag", {"/joint_states": "position"}, progress=False)


def test_sqlite3_bags_carry_no_checksum_a_flipped_value_loads_changed(tmp_path):
    """What cannot be detected: a bit flipped in a value of a sqlite3 bag
    (no checksum: sqlite checks only the structure of its pages) loads as
    another value, silently. This pins the limit the docs state."""
    written, _ = write_bag(tmp_path / "run", StoragePlugin.SQLITE3, seconds=0.2, seed=0)
    path = tmp_path / "run" / "run.db3"
    value = written["/joint_states.position"][3, 2]
    flip(path, path.read_bytes().index(np.float64(value).tobytes()))
    store = load(tmp_path / "run")
    loaded = store["/joint_states.position"].values[3, 2]
    assert loaded != value and torch.isclose(loaded, torch.tensor(value, dtype=torch.float64))


def test_bags_compressed_file_by_file_say_their_crcs_are_unchecked(tmp_path):
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode

    JointState = TS.types["sensor_msgs/msg/JointState"]
    writer = Writer(tmp_path / "z", version=8, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.FILE, CompressionFormat.ZSTD)
    with writer:
        conn = writer.add_connection("/joint_states", "sensor_msgs/msg/JointState", typestore=TS)
        for k in range(5):
            msg = JointState(
                header=header(T0 + k * MS),
                name=["a"],
                position=np.full(1, float(k)),
                velocity=np.zeros(1),
                effort=np.zeros(1),
            )
            writer.write(conn, T0 + k * MS, TS.serialize_cdr(msg, "sensor_msgs/msg/JointState"))
    with pytest.warns(UserWarning, match=r"z: its \.mcap files are compressed whole"):
        store = load_bag(tmp_path / "z", {"/joint_states": "position"}, progress=False)
    assert store["/joint_states.position"].values.flatten().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
