"""load_mcap on plain MCAP files (not ROS) written here with mcap's own
writers: JSON channels (mcap.writer) and protobuf channels
(mcap_protobuf.writer), multi-rate with jitter and dropped messages; and
their CompressedImage frames kept as JPEG (byte for byte where they arrive
as JPEG)."""

import json

import pytest
import torch

pytest.importorskip("mcap", reason="the mcap extra: pip install robocache[mcap]")
pytest.importorskip("mcap_protobuf", reason="the mcap extra: pip install robocache[mcap]")

from fixtures.mcap import (  # noqa: E402
    LOG_DELAY,
    T0,
    JsonWriter,
    write_json_mcap,
    write_protobuf_mcap,
)
from frame_checks import every_frame, pil_frames, psnr_db  # noqa: E402

from robocache.data import (  # noqa: E402
    LoaderError,
    load_mcap,
)


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
    with pytest.warns(UserWarning, match="skipped 1 bad file"):
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


def camera_bytes(path):
    """The bytes of each /camera message, in order, as mcap's reader gives them."""
    from mcap.reader import make_reader
    from mcap_protobuf.decoder import DecoderFactory

    with open(path, "rb") as f:
        reader = make_reader(f, decoder_factories=[DecoderFactory()])
        return [m.decoded_message.data for m in reader.iter_decoded_messages(topics=["/camera"])]


def test_jpeg_images_are_kept_byte_for_byte(tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    path = tmp_path / "run.mcap"
    write_protobuf_mcap(path, camera_codecs=("jpeg",), size=(24, 32), seed=0)
    blobs = camera_bytes(path)
    topics = {"/joints": "position", "/camera": "image"}
    store = load_mcap(path, topics, frames="jpeg", progress=False)
    camera = store["/camera.image"]
    assert camera.encoding.codec == "jpeg" and camera.sample_shape == (24, 32, 3)
    assert bytes(camera.values.numpy()) == b"".join(blobs)
    assert camera.byte_offsets.diff().tolist() == [len(b) for b in blobs]
    assert torch.equal(every_frame(store, "/camera.image"), pil_frames(blobs))
    assert store["/joints.position"].encoding is None
    raw = load_mcap(path, topics, progress=False)  # frames="raw": decoded, as before
    assert raw["/camera.image"].encoding is None
    assert torch.equal(raw["/camera.image"].values, pil_frames(blobs))
    assert raw["/camera.image"].stats["mean"].allclose(camera.stats["mean"])
    # Cut where a joint message was dropped: pieces of frames, and pieces without any.
    split = load_mcap(path, topics, frames="jpeg", split_gap_s=0.003, progress=False)
    counts = split["/camera.image"].offsets.diff()
    assert split.num_episodes > 2 and 0 in counts.tolist() and counts.max() > 1
    assert bytes(split["/camera.image"].values.numpy()) == b"".join(blobs)
    assert split["/camera.image"].times.tolist() == camera.times.tolist()
    assert split["/camera.image"].stats["mean"].allclose(camera.stats["mean"])


def test_resize_and_mixed_codecs_encode_again(tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    path = tmp_path / "run.mcap"
    write_protobuf_mcap(path, camera_codecs=("jpeg",), size=(48, 64))
    blobs = camera_bytes(path)
    topics = {"/camera": "image"}
    small = load_mcap(path, topics, frames="jpeg", resize=(24, 32), progress=False)
    camera = small["/camera.image"]
    assert camera.encoding.codec == "jpeg" and camera.sample_shape == (24, 32, 3)
    assert camera.num_samples == len(blobs)
    raw = load_mcap(path, topics, resize=(24, 32), progress=False)["/camera.image"].values
    assert psnr_db(every_frame(small, "/camera.image"), raw) >= 28
    path = tmp_path / "mixed.mcap"
    write_protobuf_mcap(path, camera_codecs=("jpeg", "png"), size=(48, 64))
    mixed = load_mcap(path, topics, frames="jpeg", progress=False)["/camera.image"]
    assert mixed.encoding.codec == "jpeg" and mixed.num_samples == len(camera_bytes(path))
    assert bytes(mixed.values.numpy()) != b"".join(camera_bytes(path))
    kept_png = load_mcap(path, topics, frames="png", progress=False)["/camera.image"]
    decoded = load_mcap(path, topics, progress=False)["/camera.image"].values
    assert kept_png.encoding.codec == "png"
    assert torch.equal(pil_frames(camera_bytes(path)), decoded)


def test_a_corrupt_jpeg_names_the_file_and_topic(tmp_path):
    pytest.importorskip("PIL", reason="the frames extra: pip install robocache[frames]")
    bad, good = tmp_path / "bad.mcap", tmp_path / "good.mcap"
    write_protobuf_mcap(bad, camera_codecs=("jpeg",), size=(48, 64), cut_frame=3)
    write_protobuf_mcap(good, camera_codecs=("jpeg",), size=(48, 64))
    topics = {"/camera": "image"}
    for frames in ("jpeg", "raw"):
        with pytest.raises(LoaderError, match=r"bad\.mcap.*'/camera"):
            load_mcap([good, bad], topics, frames=frames, progress=False)
    with pytest.warns(UserWarning, match=r"skipped 1 bad file.*\n.*bad\.mcap.*'/camera'"):
        store = load_mcap([bad, good], topics, frames="jpeg", skip_bad=True, progress=False)
    assert store.num_episodes == 1
    assert bytes(store["/camera.image"].values.numpy()) == b"".join(camera_bytes(good))


def test_the_codec_comes_from_the_bytes_and_agrees_with_the_format():
    from robocache.data.loaders._images import Compressed, codec_of

    jpeg_bytes, png_bytes = b"\xff\xd8\xff\xe0rest", b"\x89PNG\r\n\x1a\nrest"
    assert codec_of(Compressed(jpeg_bytes)) == "jpeg"
    assert codec_of(Compressed(png_bytes, "png")) == "png"
    assert codec_of(Compressed(jpeg_bytes, "rgb8; jpeg compressed bgr8")) == "jpeg"
    assert codec_of(Compressed(jpeg_bytes, "")) == "jpeg"
    assert codec_of(Compressed(jpeg_bytes, "png")) is None  # the field says otherwise
    assert (
        codec_of(Compressed(b"\x00\x00\x00\x00" + png_bytes, "16UC1; compressedDepth png")) is None
    )
    assert codec_of(Compressed(b"GIF89a")) is None
