"""load_mcap on plain MCAP files (not ROS) written here with mcap's own
writers: JSON channels (mcap.writer) and protobuf channels
(mcap_protobuf.writer), multi-rate with jitter and dropped messages."""

import io
import json

import numpy as np
import pytest
import torch

pytest.importorskip("mcap", reason="the mcap extra: pip install robocache[mcap]")
pytest.importorskip("mcap_protobuf", reason="the mcap extra: pip install robocache[mcap]")

from google.protobuf import (  # noqa: E402
    descriptor_pb2,
    descriptor_pool,
    message_factory,
    timestamp_pb2,
)
from mcap.writer import Writer as JsonWriter  # noqa: E402
from mcap_protobuf.writer import Writer as ProtobufWriter  # noqa: E402
from PIL import Image  # noqa: E402

from robocache.data import (
    LoaderError,  # noqa: E402
    load_mcap,  # noqa: E402
)

T0 = 1_700_000_000 * 10**9
LOG_DELAY = 2_000_000  # each message is logged 2 ms after its timestamp


def clock(rate_hz, seconds, rng, pause_at=None):
    """Jittered times with about 5% of the messages dropped; from pause_at
    (seconds) on, 1 s later."""
    period = 10**9 // rate_hz
    n = int(rate_hz * seconds)
    t = T0 + np.arange(n) * period + rng.integers(-period // 10, period // 10, n)
    t = np.sort(t[rng.random(n) > 0.05]).astype(np.int64)
    if pause_at is not None:
        t = t + np.where(t >= T0 + int(pause_at * 1e9), 10**9, 0)
    return t


def write_json_mcap(path, seconds=0.3, pause_at=None):
    """Joints at 500 Hz (a sec/nanosec stamp), force at 1 kHz (an int-ns stamp)."""
    rng = np.random.default_rng()
    written = {}
    with open(path, "wb") as f:
        writer = JsonWriter(f)
        writer.start()
        schema = writer.register_schema(
            name="Reading", encoding="jsonschema", data=json.dumps({"type": "object"}).encode()
        )
        joints = writer.register_channel("/joints", message_encoding="json", schema_id=schema)
        force = writer.register_channel("/force", message_encoding="json", schema_id=schema)
        messages = []
        t_joints = clock(500, seconds, rng, pause_at)
        positions = rng.standard_normal((len(t_joints), 7))
        for t, q in zip(t_joints, positions):
            stamp = {"sec": int(t // 10**9), "nanosec": int(t % 10**9)}
            body = {"timestamp": stamp, "position": q.tolist(), "name": "arm"}
            messages.append((int(t), joints, body))
        t_force = clock(1000, seconds, rng, pause_at)
        forces = rng.standard_normal((len(t_force), 3))
        for t, v in zip(t_force, forces):
            body = {"timestamp": int(t), "force": dict(zip("xyz", v.tolist()))}
            messages.append((int(t), force, body))
        for t, channel, body in sorted(messages, key=lambda m: m[0]):
            writer.add_message(
                channel_id=channel,
                log_time=t + LOG_DELAY,
                publish_time=t + LOG_DELAY,
                data=json.dumps(body).encode(),
            )
        writer.finish()
    written["/joints.position"] = (positions, t_joints)
    written["/force.force"] = (forces, t_force)
    return written


def stamped_messages(package, messages):
    """Protobuf message classes built from a descriptor here: `messages` is
    name -> [(field, kind)] with kind "doubles" (repeated), "bytes" or
    "string"; every message also has a google.protobuf.Timestamp
    `timestamp` (field 1). Returns name -> class."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"{package}.proto",
        package=package,
        syntax="proto3",
        dependency=["google/protobuf/timestamp.proto"],
    )
    F = descriptor_pb2.FieldDescriptorProto
    kinds = {
        "doubles": (F.TYPE_DOUBLE, F.LABEL_REPEATED),
        "bytes": (F.TYPE_BYTES, F.LABEL_OPTIONAL),
        "string": (F.TYPE_STRING, F.LABEL_OPTIONAL),
    }
    for name, fields in messages.items():
        message = proto.message_type.add(name=name)
        message.field.add(
            name="timestamp", number=1, type=F.TYPE_MESSAGE, type_name=".google.protobuf.Timestamp"
        )
        for number, (field, kind) in enumerate(fields, 2):
            type_, label = kinds[kind]
            message.field.add(name=field, number=number, type=type_, label=label)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(timestamp_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{package}.{name}"))
        for name in messages
    }


def protobuf_classes():
    """Joints and CompressedImage messages."""
    classes = stamped_messages(
        "robot",
        {
            "Joints": [("position", "doubles")],
            "CompressedImage": [("data", "bytes"), ("format", "string")],
        },
    )
    return classes["Joints"], classes["CompressedImage"]


def png(image):
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def write_protobuf_mcap(path, seconds=0.3):
    """Joints at 500 Hz and a PNG camera at 30 Hz, protobuf Timestamp stamps."""
    Joints, CompressedImage = protobuf_classes()
    rng = np.random.default_rng()
    t_joints, t_camera = clock(500, seconds, rng), clock(30, seconds, rng)
    positions = rng.standard_normal((len(t_joints), 6))
    images = rng.integers(0, 256, (len(t_camera), 12, 16, 3), dtype=np.uint8)
    messages = []

    def stamped(msg, t):
        msg.timestamp.seconds, msg.timestamp.nanos = int(t // 10**9), int(t % 10**9)
        return msg

    for t, q in zip(t_joints, positions):
        messages.append(("/joints", int(t), stamped(Joints(position=q.tolist()), t)))
    for t, im in zip(t_camera, images):
        msg = CompressedImage(data=png(im), format="png")
        messages.append(("/camera", int(t), stamped(msg, t)))
    with open(path, "wb") as f, ProtobufWriter(f) as writer:
        for topic, t, msg in sorted(messages, key=lambda m: m[1]):
            writer.write_message(topic, msg, log_time=t + LOG_DELAY, publish_time=t)
    return {"/joints.position": (positions, t_joints), "/camera.image": (images, t_camera)}


def test_json_channels_round_trip_exactly(tmp_path):
    written = write_json_mcap(tmp_path / "run.mcap")
    topics = {"/joints": "position", "/force": "force"}
    store = load_mcap(tmp_path / "run.mcap", topics, time_source="timestamp", progress=False)
    assert set(store.keys()) == set(written) and store.num_episodes == 1
    for key, (values, times) in written.items():
        assert torch.equal(store[key].values, torch.from_numpy(values)), key
        assert store[key].times.tolist() == times.tolist(), key
    logged = load_mcap(tmp_path / "run.mcap", {"/force": "force"}, progress=False)
    assert (
        logged["/force.force"].times.tolist() == (written["/force.force"][1] + LOG_DELAY).tolist()
    )


def test_protobuf_channels_round_trip_exactly(tmp_path):
    written = write_protobuf_mcap(tmp_path / "run.mcap")
    topics = {"/joints": "position", "/camera": "image"}
    store = load_mcap(tmp_path / "run.mcap", topics, time_source="timestamp", progress=False)
    for key, (values, times) in written.items():
        assert torch.equal(store[key].values, torch.from_numpy(values)), key
        assert store[key].times.tolist() == times.tolist(), key
    published = load_mcap(
        tmp_path / "run.mcap", {"/joints": "position"}, time_source="publish", progress=False
    )
    assert published["/joints.position"].times.tolist() == written["/joints.position"][1].tolist()


def test_files_are_episodes_and_pauses_split_them(tmp_path):
    first = write_json_mcap(tmp_path / "a.mcap")
    write_json_mcap(tmp_path / "b.mcap")
    topics = {"/joints": "position", "/force": "force"}
    both = load_mcap([tmp_path / "a.mcap", tmp_path / "b.mcap"], topics, progress=False)
    assert both.num_episodes == 2 and both.episodes["episode_index"].tolist() == [0, 1]
    assert both["/joints.position"].offsets[1] == len(first["/joints.position"][1])
    written = write_json_mcap(tmp_path / "paused.mcap", pause_at=0.15)
    split = load_mcap(
        tmp_path / "paused.mcap", topics, time_source="timestamp", split_gap_s=0.5, progress=False
    )
    assert split.num_episodes == 2
    for key, (values, times) in written.items():
        before = int((times < T0 + int(0.15e9)).sum())
        assert split[key].offsets.tolist() == [0, before, len(times)], key
        assert torch.equal(split[key].values, torch.from_numpy(values))


def test_a_marker_topic_starts_episodes(tmp_path):
    path = tmp_path / "marked.mcap"
    with open(path, "wb") as f:
        writer = JsonWriter(f)
        writer.start()
        schema = writer.register_schema(name="R", encoding="jsonschema", data=b"{}")
        joints = writer.register_channel("/joints", message_encoding="json", schema_id=schema)
        marker = writer.register_channel("/episode", message_encoding="json", schema_id=schema)
        for k in range(10):
            if k in (0, 4, 7):  # an episode starts with frame k
                writer.add_message(marker, log_time=10 * k, data=b"{}", publish_time=10 * k)
            body = json.dumps({"position": [float(k)]}).encode()
            writer.add_message(joints, log_time=10 * k, data=body, publish_time=10 * k)
        writer.finish()
    store = load_mcap(path, {"/joints": "position"}, marker_topic="/episode", progress=False)
    assert store.num_episodes == 3  # the mark at the first message makes no empty episode
    assert store["/joints.position"].offsets.tolist() == [0, 4, 7, 10]
    assert store["/joints.position"].values.flatten().tolist() == [float(k) for k in range(10)]


def test_bad_files_name_the_file_topic_and_field(tmp_path):
    write_json_mcap(tmp_path / "run.mcap")
    path = tmp_path / "run.mcap"
    with pytest.raises(
        LoaderError, match=r"no topic '/gripper'; the topics are \['/force', '/joints'\]"
    ):
        load_mcap(path, {"/gripper": "position"}, progress=False)
    with pytest.raises(
        LoaderError,
        match=r"topic '/joints'.*no field 'velocity'.*\['name', 'position', 'timestamp'\]",
    ):
        load_mcap(path, {"/joints": "velocity"}, progress=False)
    with pytest.raises(LoaderError, match=r"topic '/joints'.*not numeric"):
        load_mcap(path, {"/joints": "name"}, progress=False)
    with pytest.raises(LoaderError, match=r"topic '/joints'.*seconds and nanoseconds"):
        load_mcap(path, {"/joints": "position"}, time_source="name", progress=False)
    data = path.read_bytes()
    (tmp_path / "cut.mcap").write_bytes(data[: len(data) // 2])
    with pytest.raises(LoaderError, match=r"cut.mcap"):
        load_mcap(tmp_path / "cut.mcap", {"/joints": "position"}, progress=False)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        store = load_mcap(
            [path, tmp_path / "cut.mcap"], {"/joints": "position"}, progress=False, skip_bad=True
        )
    assert store.num_episodes == 1


def test_times_that_go_backwards_and_other_encodings_are_errors(tmp_path):
    path = tmp_path / "odd.mcap"
    with open(path, "wb") as f:
        writer = JsonWriter(f)
        writer.start()
        schema = writer.register_schema(name="R", encoding="jsonschema", data=b"{}")
        joints = writer.register_channel("/joints", message_encoding="json", schema_id=schema)
        cbor = writer.register_channel("/cbor", message_encoding="cbor", schema_id=schema)
        for k, stamp in enumerate([30, 10, 20]):  # stamps out of order, logged in order
            body = {"timestamp": stamp, "position": [float(k)]}
            writer.add_message(joints, log_time=k, data=json.dumps(body).encode(), publish_time=k)
        writer.add_message(cbor, log_time=5, data=b"\xa0", publish_time=5)
        writer.finish()
    store = load_mcap(path, {"/joints": "position"}, progress=False)  # log times are in order
    assert store["/joints.position"].values.flatten().tolist() == [0.0, 1.0, 2.0]
    with pytest.raises(
        LoaderError, match=r"stream '/joints.position': times go backwards at message 1"
    ):
        load_mcap(path, {"/joints": "position"}, time_source="timestamp", progress=False)
    with pytest.raises(
        LoaderError, match=r"topic '/cbor'.*encoding 'cbor' is not json or protobuf"
    ):
        load_mcap(path, {"/cbor": None}, progress=False)
