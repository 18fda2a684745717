"""The loaders against files a hostile user made: a key missing from one
demo, every file skipped, a frame kept encoded that does not decode, text
that is not UTF-8. Each is a LoaderError naming the file, the episode in it
and what was wrong, or with ``skip_bad`` a skipped episode, reported."""

import re

import pytest

from robocache.data import LoaderError

IMAGE = "observation/image"  # RLDS
SHARD0 = "demo-train.tfrecord-00000-of-00002"  # RLDS episodes 0 and 1
SHARD1 = "demo-train.tfrecord-00001-of-00002"  # RLDS episode 2
CAMERA = "observation.images.top"  # LeRobot
DATA_FILE = "data/chunk-000/file-000.parquet"


# -- robomimic ---------------------------------------------------------------


def write_robomimic_without(path, demo, key):
    """The robomimic fixture with ``key`` deleted from ``demo``."""
    h5py = pytest.importorskip("h5py", reason="the robomimic extra")
    from fixtures.robomimic import write_robomimic

    write_robomimic(path)
    with h5py.File(path, "a") as f:
        del f[f"data/{demo}/{key}"]


@pytest.mark.parametrize("demo", ["demo_0", "demo_1"])
def test_robomimic_a_key_missing_from_any_demo_is_an_error_naming_it(tmp_path, demo):
    from fixtures.clocks import FPS

    from robocache.data import load_robomimic

    path = tmp_path / "demos.hdf5"
    write_robomimic_without(path, demo, "obs/robot0_joint_pos")
    with pytest.raises(LoaderError, match=rf"{demo}: no key 'obs/robot0_joint_pos'"):
        load_robomimic(path, fps=FPS, progress=False)
    with pytest.warns(UserWarning, match=rf"skipped 1 bad episode.*\n  {demo}: .*no key"):
        store = load_robomimic(path, fps=FPS, progress=False, skip_bad=True)
    assert "obs/robot0_joint_pos" in store.keys()
    kept = [0, 1, 10]
    kept.remove(int(demo.split("_")[1]))
    assert store.episodes["episode_index"].tolist() == kept


def test_robomimic_every_demo_skipped_says_so(tmp_path):
    h5py = pytest.importorskip("h5py", reason="the robomimic extra")
    from fixtures.clocks import FPS
    from fixtures.robomimic import write_robomimic

    from robocache.data import load_robomimic

    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    with h5py.File(path, "a") as f:
        for demo in ("demo_0", "demo_1", "demo_10"):
            f[f"data/{demo}"].attrs["num_samples"] = 99
    with pytest.raises(
        LoaderError, match=r"skip_bad skipped every episode.*\n  demo_0: .*num_samples is 99"
    ):
        load_robomimic(path, fps=FPS, progress=False, skip_bad=True)


# -- bags and MCAP logs ----------------------------------------------------------


def test_bags_every_file_skipped_is_a_loader_error_naming_them(tmp_path):
    pytest.importorskip("rosbags", reason="the bags extra")
    pytest.importorskip("PIL", reason="the frames extra")
    from fixtures.bags import write_bag
    from rosbags.rosbag2 import StoragePlugin

    from robocache.data import load_bag

    bags = [tmp_path / "first", tmp_path / "second"]
    for bag in bags:
        write_bag(bag, StoragePlugin.SQLITE3, camera="jpeg", size=(48, 64), cut_frame=2)
    with pytest.raises(LoaderError) as raised:
        load_bag(bags, {"/camera/image": "image"}, frames="jpeg", skip_bad=True, progress=False)
    message = str(raised.value)
    assert re.match(r"load_bag: skip_bad skipped every file; nothing is left to load", message)
    assert re.search(r"\n  .*first: load_bag\(.*first\), topic '/camera/image'.*frame", message)
    assert re.search(r"\n  .*second: ", message)


def test_mcap_every_file_skipped_is_a_loader_error_naming_them(tmp_path):
    pytest.importorskip("mcap_protobuf", reason="the mcap extra")
    pytest.importorskip("PIL", reason="the frames extra")
    from fixtures.mcap import write_protobuf_mcap

    from robocache.data import load_mcap

    bad = tmp_path / "bad.mcap"
    write_protobuf_mcap(bad, camera_codecs=("jpeg",), size=(48, 64), cut_frame=3)
    with pytest.raises(LoaderError, match=r"skipped every file.*\n  .*bad\.mcap: .*'/camera'"):
        load_mcap([bad], {"/camera": "image"}, frames="jpeg", skip_bad=True, progress=False)


# -- RLDS --------------------------------------------------------------------


def write_rlds_with_a_cut_jpeg(root):
    """The RLDS fixture with JPEG frames; episode 2 (shard 1's episode 0)
    has its frame 1 cut short."""
    pytest.importorskip("tfrecord", reason="the rlds extra")
    from fixtures.images import jpeg
    from fixtures.rlds import write_rlds

    count = [0]

    def encode(image):
        blob = jpeg(image, subsampling=2, quality=90)
        count[0] += 1
        return blob[:-20] if count[0] == 6 else blob  # the 6th frame: episode 2's frame 1

    write_rlds(root, encode=encode, smooth=True, seed=0)


def test_rlds_a_cut_frame_kept_encoded_names_one_episode(tmp_path):
    from fixtures.rlds import FPS

    from robocache.data import load_rlds

    write_rlds_with_a_cut_jpeg(tmp_path)
    with pytest.raises(LoaderError) as raised:
        load_rlds(tmp_path, fps=FPS, frames="jpeg", progress=False)
    message = str(raised.value)
    assert re.search(
        rf"{SHARD1}, episode 0: stream '{IMAGE}', frame 1: the jpeg frame does not decode", message
    ), message
    assert message.count("episode") == 1, message


def test_rlds_skip_bad_skips_an_episode_whose_kept_frame_does_not_decode(tmp_path):
    from fixtures.rlds import FPS

    from robocache.data import load_rlds

    write_rlds_with_a_cut_jpeg(tmp_path)
    with pytest.warns(
        UserWarning,
        match=rf"skipped 1 bad episode.*\n  {SHARD1}, episode 0: .*key '{IMAGE}', frame 1: "
        "the jpeg frame does not decode",
    ):
        store = load_rlds(tmp_path, fps=FPS, frames="jpeg", progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]
    assert store[IMAGE].encoding.codec == "jpeg"


def test_rlds_every_episode_skipped_says_so(tmp_path):
    pytest.importorskip("tfrecord", reason="the rlds extra")
    from fixtures.rlds import FPS, write_rlds

    from robocache.data import load_rlds

    write_rlds(tmp_path, language=lambda e, n: ([b"\xff"] * n, "byte"))
    keys = ["action", "language_instruction"]
    with pytest.raises(
        LoaderError,
        match=rf"skipped every episode.*\n  {SHARD0}, episode 0: .*'language_instruction'",
    ):
        load_rlds(tmp_path, fps=FPS, keys=keys, progress=False, skip_bad=True)


def test_rlds_a_task_that_is_not_utf8_is_an_error_as_a_language_stream_is(tmp_path):
    pytest.importorskip("tfrecord", reason="the rlds extra")
    from fixtures.rlds import FPS, write_rlds

    from robocache.data import load_rlds

    def language(e, n):  # episode 2's instruction is not UTF-8
        return ([b"\xffpick"] * n, "byte") if e == 2 else [f"task {e}"] * n

    write_rlds(tmp_path, language=language)
    problem = rf"{SHARD1}, episode 0, key 'language_instruction': a string is not UTF-8"
    for keys in (None, ["action", "language_instruction"]):  # the task; the stream too
        with pytest.raises(LoaderError, match=problem):
            load_rlds(tmp_path, fps=FPS, keys=keys, progress=False)
    with pytest.warns(UserWarning, match=rf"skipped 1 bad episode.*\n  .*{problem}"):
        store = load_rlds(tmp_path, fps=FPS, progress=False, skip_bad=True)
    assert store.tasks == ["task 0", "task 1"]


# -- LeRobot -----------------------------------------------------------------


def write_lerobot_with_a_cut_png(root):
    """The LeRobot fixture with PNG image features; episode 2's frame 0 (row
    6 of the data file) cut short."""
    pytest.importorskip("av", reason="the lerobot extra")
    pa = pytest.importorskip("pyarrow", reason="the lerobot extra")
    import pyarrow.parquet as pq
    from fixtures.lerobot import write_lerobot

    write_lerobot(root, images_as="png")
    path = root / DATA_FILE
    table = pq.read_table(path)
    cells = table.column(CAMERA).to_pylist()
    cells[6]["bytes"] = cells[6]["bytes"][:-30]
    column = table.schema.get_field_index(CAMERA)
    pq.write_table(
        table.set_column(column, CAMERA, pa.array(cells, table.schema[column].type)), path
    )


def test_lerobot_a_cut_frame_kept_encoded_names_file_episode_and_frame(tmp_path):
    from robocache.data import load_lerobot

    write_lerobot_with_a_cut_png(tmp_path)
    with pytest.raises(LoaderError) as raised:
        load_lerobot(tmp_path, frames="png", progress=False)
    message = str(raised.value)
    assert re.search(
        rf"{DATA_FILE}, episode 2: stream '{CAMERA}', frame 0: the png frame does not decode",
        message,
    ), message
    assert message.count("episode") == 1, message


def test_lerobot_skip_bad_skips_an_episode_whose_kept_frame_does_not_decode(tmp_path):
    from robocache.data import load_lerobot

    write_lerobot_with_a_cut_png(tmp_path)
    with pytest.warns(
        UserWarning,
        match=rf"skipped 1 bad episode.*\n  episode 2: .*{DATA_FILE}, episode 2, key '{CAMERA}', "
        "frame 0: the png frame does not decode",
    ):
        store = load_lerobot(tmp_path, frames="png", progress=False, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]
    assert store[CAMERA].encoding.codec == "png"
