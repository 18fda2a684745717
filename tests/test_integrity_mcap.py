"""load_mcap on corrupt files: every bit flip, cut or broken chunk either
raises a LoaderError naming the file, or loads the values the file was
written with. The files are written by mcap's own writers, which fill the
chunks' and the summary's CRCs (and the data section's where asked)."""

import warnings

import pytest

pytest.importorskip("mcap", reason="the mcap extra: pip install robocache[mcap]")
pytest.importorskip("mcap_protobuf", reason="the mcap extra: pip install robocache[mcap]")

from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from fixtures.mcap import write_json_mcap, write_protobuf_mcap  # noqa: E402
from mcap.reader import make_reader  # noqa: E402
from mcap.writer import CompressionType  # noqa: E402

from robocache.data import LoaderError, load_mcap  # noqa: E402

JSON_TOPICS = {"/joints": "position", "/force": "force"}
PROTOBUF_TOPICS = {"/joints": "position", "/camera": "image"}


def load(path, topics, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file these writers wrote carries its CRCs: no warning
        return load_mcap(path, topics, time_source="timestamp", progress=False, **kwargs)


def outcomes(path, topics, flips, seed):
    """For each of ``flips`` copies of ``path`` with one bit flipped: "raised"
    (a LoaderError naming the copy), "same" (the original's values) or a
    description of what else happened."""
    original = load(path, topics)
    results = []
    for copy, _, byte, bit in flipped_copies(path, flips, seed=seed):
        try:
            store = load(copy, topics)
        except LoaderError as e:
            results.append("raised" if str(copy) in str(e) else f"byte {byte}: unnamed: {e}")
            continue
        except Exception as e:  # a raw library error, or a warning made an error above
            results.append(f"byte {byte} bit {bit}: {type(e).__module__}.{type(e).__name__}: {e}")
            continue
        results.append("same" if same_store(original, store) else f"byte {byte} bit {bit}: changed")
    return results


@pytest.mark.parametrize(
    "options",
    [
        {"chunk_size": 4096},
        {"chunk_size": 4096, "compression": CompressionType.LZ4},
        {"chunk_size": 4096, "compression": CompressionType.NONE},
        {"chunk_size": 4096, "enable_data_crcs": True},
        {"use_chunking": False, "enable_data_crcs": True},
    ],
    ids=["zstd", "lz4", "uncompressed", "data-crc", "unchunked"],
)
def test_bit_flips_in_json_channels_raise_or_change_nothing(tmp_path, options):
    write_json_mcap(tmp_path / "run.mcap", seed=0, **options)
    results = outcomes(tmp_path / "run.mcap", JSON_TOPICS, flips=40, seed=1)
    assert set(results) <= {"raised", "same"}, [r for r in results if r not in ("raised", "same")]
    assert results.count("raised") >= 20  # most flips land in the data: these were caught


def test_bit_flips_in_protobuf_channels_raise_or_change_nothing(tmp_path):
    write_protobuf_mcap(tmp_path / "run.mcap", seed=0, chunk_size=8192)
    results = outcomes(tmp_path / "run.mcap", PROTOBUF_TOPICS, flips=40, seed=2)
    assert set(results) <= {"raised", "same"}, [r for r in results if r not in ("raised", "same")]
    assert results.count("raised") >= 20


def flip(path, byte, bit=0):
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def chunks(path):
    with open(path, "rb") as f:
        return make_reader(f).get_summary().chunk_indexes


def test_a_flipped_digit_in_a_message_is_a_chunk_crc_error(tmp_path):
    path = tmp_path / "run.mcap"
    write_json_mcap(path, seed=0, compression=CompressionType.NONE)
    data = path.read_bytes()
    digit = data.index(b'"position": [') + len(b'"position": [') + 3  # inside the first number
    assert data[digit : digit + 1].isdigit()
    flip(path, digit)  # another digit: still JSON, another value
    with pytest.raises(LoaderError, match=r"run\.mcap.*CRC of a chunk does not match"):
        load(path, JSON_TOPICS)


def test_a_broken_zstd_chunk_is_a_loader_error(tmp_path):
    """zstd fails before the CRC can be computed: its ZstdError becomes a
    LoaderError naming the file."""
    path = tmp_path / "run.mcap"
    write_json_mcap(path, seed=0, chunk_size=4096)
    first = chunks(path)[0]
    flip(path, first.chunk_start_offset + first.chunk_length - 5, bit=3)  # zstd's last block
    with pytest.raises(
        LoaderError, match=r"run\.mcap\): (cannot read the file: ZstdError|the CRC)"
    ):
        load(path, JSON_TOPICS)


def test_a_flip_in_the_summary_is_a_summary_crc_error(tmp_path):
    path = tmp_path / "run.mcap"
    write_json_mcap(path, seed=0)
    flip(path, path.read_bytes().rindex(b"/joints") + 3)  # the summary's copy of the channel
    with pytest.raises(LoaderError, match=r"run\.mcap.*CRC of the summary section does not match"):
        load(path, JSON_TOPICS)


def test_a_flip_in_a_chunk_not_read_is_caught_by_the_data_section_crc(tmp_path):
    """Only /joints is loaded; a chunk of /force alone is never decompressed,
    but the data section's CRC covers it."""
    path = tmp_path / "run.mcap"
    write_json_mcap(path, seed=0, chunk_size=1024, enable_data_crcs=True)
    with open(path, "rb") as f:
        reader = make_reader(f)
        force = {i for i, c in reader.get_summary().channels.items() if c.topic == "/force"}
        only_force = [c for c in chunks(path) if set(c.message_index_offsets) == force]
    if not only_force:
        pytest.skip("the writer put /force in no chunk of its own")
    flip(path, only_force[0].chunk_start_offset + only_force[0].chunk_length // 2)
    with pytest.raises(LoaderError, match=r"run\.mcap.*CRC of the data section does not match"):
        load(path, {"/joints": "position"})


@pytest.mark.parametrize("keep", [8, 100, 0.25, 0.5, 0.9, 0.999, -1])
def test_cut_files_are_loader_errors(tmp_path, keep):
    path = tmp_path / "run.mcap"
    write_json_mcap(path, seed=0, chunk_size=4096)
    truncate(path, path.stat().st_size - 1 if keep == -1 else keep)
    with pytest.raises(LoaderError, match=r"run\.mcap"):
        load(path, JSON_TOPICS)


def test_empty_files_and_skip_bad(tmp_path):
    good, empty = tmp_path / "good.mcap", tmp_path / "empty.mcap"
    write_json_mcap(good, seed=0)
    empty.write_bytes(b"")
    with pytest.raises(LoaderError, match=r"empty\.mcap\): the file is empty"):
        load(empty, JSON_TOPICS)
    cut = tmp_path / "cut.mcap"
    cut.write_bytes(good.read_bytes()[:-20])
    with pytest.raises(
        LoaderError, match=r"cut\.mcap\): the file does not end with an MCAP footer"
    ):
        load(cut, JSON_TOPICS)
    with pytest.warns(UserWarning) as caught:
        store = load_mcap([good, empty, cut], JSON_TOPICS, progress=False, skip_bad=True)
    assert store.num_episodes == 1
    skipped = [str(w.message) for w in caught if "skipped 2 bad file" in str(w.message)]
    assert len(skipped) == 1 and "empty.mcap" in skipped[0] and "cut.mcap" in skipped[0]


def test_files_without_crcs_load_with_a_warning(tmp_path):
    """Corruption in a file whose writer left the CRCs out cannot be seen: the
    loader says so."""
    path = tmp_path / "run.mcap"
    written = write_json_mcap(path, seed=0, enable_crcs=False)
    with pytest.warns(UserWarning, match=r"1 file\(s\) carry no CRC.*\n  .*run\.mcap"):
        store = load_mcap(path, JSON_TOPICS, time_source="timestamp", progress=False)
    assert store["/force.force"].values.shape == written["/force.force"][0].shape
