"""load_rlds on corrupt datasets: every bit flip, cut or missing shard either
raises a LoaderError naming the shard (and episode), or loads the values the
dataset was written with. Shards are written with the tfrecord package's
writer, which fills each record's two masked CRC-32Cs (length and data);
dataset_info.json as TFDS writes it, with each shard's episode count."""

import json
import struct
import warnings

import numpy as np
import pytest

pytest.importorskip("tfrecord", reason="the rlds extra: pip install robocache[rlds]")
pytest.importorskip("PIL", reason="the rlds extra: pip install robocache[rlds]")

from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from fixtures.rlds import FPS, write_records, write_rlds  # noqa: E402

from robocache.data import LoaderError, load_rlds  # noqa: E402

SHARD0 = "demo-train.tfrecord-00000-of-00002"  # episodes 0 and 1 (of lengths 3, 1)
SHARD1 = "demo-train.tfrecord-00001-of-00002"  # episode 2 (of length 5)


def load(directory, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing skipped, nothing to say
        return load_rlds(directory, fps=FPS, progress=False, **kwargs)


def flip(path, byte, bit=0):
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def record_offsets(path):
    """Where each record of a TFRecord file starts."""
    data, at, out = path.read_bytes(), 0, []
    while at < len(data):
        out.append(at)
        at += 12 + struct.unpack("<Q", data[at : at + 8])[0] + 4
    return out


def test_bit_flips_raise_or_change_nothing(tmp_path):
    """Flips anywhere in the dataset: shards, features.json, dataset_info.json."""
    write_rlds(tmp_path / "ds", seed=0)
    original = load(tmp_path / "ds")
    results = []
    for copy, file, byte, bit in flipped_copies(tmp_path / "ds", 40, seed=4):
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


def test_a_flipped_value_is_a_data_crc_error_and_skip_bad_skips_its_episode(tmp_path):
    episodes = write_rlds(tmp_path / "ds", seed=0)
    path = tmp_path / "ds" / SHARD0
    value = np.float32(episodes[1]["action"][0, 1]).tobytes()  # episode 1's
    flip(path, path.read_bytes().index(value))  # another float, still a valid Example
    with pytest.raises(
        LoaderError, match=rf"{SHARD0}, episode 1, record 1 .*CRC of the record's data"
    ):
        load(tmp_path / "ds")
    with pytest.warns(UserWarning, match=rf"skipped 1 bad episode.*\n  {SHARD0}, episode 1"):
        store = load_rlds(tmp_path / "ds", fps=FPS, progress=False, skip_bad=True)
    assert store.num_episodes == 2 and store.episodes["episode_index"].tolist() == [0, 2]
    assert store.info["episodes_loaded"] == 2 and store.info["episodes_expected"] == 3


def test_a_flipped_length_ends_the_shard(tmp_path):
    write_rlds(tmp_path / "ds", seed=0)
    path = tmp_path / "ds" / SHARD0
    flip(path, record_offsets(path)[1] + 2)  # episode 1's length: the rest cannot be found
    with pytest.raises(LoaderError, match=rf"{SHARD0}, record 1 .*CRC of the record's length"):
        load(tmp_path / "ds")
    with pytest.warns(
        UserWarning, match=rf"(?s)1 bad shard.*{SHARD0}.*lost: episode 1, 1 of its 2"
    ):
        store = load_rlds(tmp_path / "ds", fps=FPS, progress=False, skip_bad=True)
    assert store.info["episodes_loaded"] == 2 and store.info["episodes_expected"] == 3


def test_an_empty_shard_is_an_error_not_a_shorter_dataset(tmp_path):
    write_rlds(tmp_path / "ds", seed=0)
    (tmp_path / "ds" / SHARD0).write_bytes(b"")
    with pytest.raises(
        LoaderError, match=rf"{SHARD0}: the shard holds 0 episodes; dataset_info.json says 2"
    ):
        load(tmp_path / "ds")
    with pytest.warns(UserWarning, match=rf"{SHARD0}.*lost: episodes 0 to 1, 2 of its 2"):
        store = load_rlds(tmp_path / "ds", fps=FPS, progress=False, skip_bad=True)
    assert store.num_episodes == 1 and store.tasks == ["task 2"]
    assert store.info == {"episodes_loaded": 1, "episodes_expected": 3}
    (tmp_path / "ds" / "dataset_info.json").unlink()  # without it, an empty shard is still one
    with pytest.raises(LoaderError, match=rf"{SHARD0}: the shard holds no episode \(0 bytes\)"):
        load(tmp_path / "ds")


def test_a_missing_shard_is_an_error(tmp_path):
    write_rlds(tmp_path / "ds", seed=0, info=False)
    (tmp_path / "ds" / SHARD0).unlink()  # its name says there are 2
    with pytest.raises(LoaderError, match=rf"{SHARD0}: the shard is missing"):
        load(tmp_path / "ds")
    with pytest.warns(UserWarning, match=r"lost: the episodes from 0 on, how many is not known"):
        store = load_rlds(tmp_path / "ds", fps=FPS, progress=False, skip_bad=True)
    assert store.info == {"episodes_loaded": 1, "episodes_expected": None}


def test_shards_must_match_dataset_info(tmp_path):
    write_rlds(tmp_path / "ds", seed=0)
    info_path = tmp_path / "ds" / "dataset_info.json"
    info = json.loads(info_path.read_text())
    info["splits"][0]["shardLengths"] = ["1", "1"]  # shard 0 holds 2
    info_path.write_text(json.dumps(info))
    with pytest.raises(LoaderError, match=rf"{SHARD0}: the shard holds more than the 1 episodes"):
        load(tmp_path / "ds")
    info["splits"][0]["shardLengths"] = ["2", "1", "4"]
    info_path.write_text(json.dumps(info))
    with pytest.raises(
        LoaderError, match=r"the shards' names say there are 2; dataset_info.json lists 3"
    ):
        load(tmp_path / "ds")
    info["splits"][0]["name"] = "trbin"
    info_path.write_text(json.dumps(info))
    with pytest.raises(
        LoaderError, match=r"dataset_info.json has no split 'train'; it has \['trbin'\]"
    ):
        load(tmp_path / "ds")


@pytest.mark.parametrize("keep", [5, 12, 30, 0.5, -1])
def test_cut_shards_are_errors_naming_the_shard(tmp_path, keep):
    write_rlds(tmp_path / "ds", seed=0, info=False)  # the cut alone must be seen
    path = tmp_path / "ds" / SHARD1
    truncate(path, path.stat().st_size - 1 if keep == -1 else keep)
    with pytest.raises(LoaderError, match=rf"{SHARD1}, record 0 \(byte 0\): .*cut short"):
        load(tmp_path / "ds")


def test_a_record_that_is_no_example_is_a_loader_error(tmp_path):
    """Its CRCs hold, but protobuf cannot parse it: a LoaderError naming the
    episode, not protobuf's DecodeError."""
    write_rlds(tmp_path / "ds", seed=0)
    write_records(tmp_path / "ds" / SHARD1, [b"\xff" * 40])
    with pytest.raises(LoaderError, match=rf"{SHARD1}, episode 0: cannot read the episode: Decode"):
        load(tmp_path / "ds")


def test_features_json_that_contradicts_the_records_is_an_error(tmp_path):
    """features.json carries no checksum; what it says is held against the
    records where it can be."""
    write_rlds(tmp_path / "ds", seed=0)
    path = tmp_path / "ds" / "features.json"
    text = path.read_text()
    path.write_text(text.replace('["8", "10", "3"]', '["8", "10", "1"]'))  # one bit
    with pytest.raises(
        LoaderError, match=r"images hold 3 channels \(RGB\); features.json declares 1"
    ):
        load(tmp_path / "ds")
    path.write_text(text.replace('"float32"', '"flobt32"', 1))
    with pytest.raises(LoaderError, match=r"dtype 'flobt32'"):
        load(tmp_path / "ds")
    path.write_text(
        text.replace(
            '"tensor": {"shape": {"dimensions": ["6"]}', '"tensos": {"shape": {"dimensions": ["6"]}'
        )
    )
    with pytest.raises(LoaderError, match=r"steps/observation/state no feature kind TFDS writes"):
        load(tmp_path / "ds")
