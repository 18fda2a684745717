"""load_lerobot on damaged datasets: each raises a LoaderError naming the file
(and the episode, column or key), or loads exactly the original; none loads
as other values, and no pyarrow or PyAV error escapes.

What no check can see:
- video: AV1 and H.264 carry no checksum, and a lossy decoder shows a
  changed byte of a frame's data as artefacts, not an error; only damage to
  the container (a truncated file, a lost stream table, frames missing from
  a segment) is found;
- parquet pages without a CRC (LeRobot writes none; pyarrow writes them with
  ``write_page_checksum=True``, and the loader verifies them where present):
  a changed byte of a page's values. The footer never has a checksum: the
  loader checks the columns it reads (present, of their kind, without
  nulls), the episode count against info.json, and the data rows against
  meta/episodes;
- info.json: ``fps`` (only ``store.fps``; the times are the table's own).
So the flip test uses image features (PNG in the parquet) and page CRCs,
and leaves info.json's fps out.
"""

import os
import shutil
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("av", reason="the lerobot extra: pip install robocache[lerobot]")
pytest.importorskip("pyarrow", reason="the lerobot extra: pip install robocache[lerobot]")

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from fixtures.lerobot import write_lerobot  # noqa: E402

from robocache.data import LoaderError, load_lerobot  # noqa: E402

DATA = "data/chunk-000/file-000.parquet"
EPISODES = "meta/episodes/chunk-000/file-000.parquet"
VIDEO = "videos/observation.images.top/chunk-000/file-000.mp4"


def load(root, **kwargs):
    return load_lerobot(root, progress=False, threads=1, **kwargs)


def rewrite(path, change):
    """The parquet file at path, its table changed by change(columns dict)."""
    columns = pq.read_table(path).to_pydict()
    change(columns)
    pq.write_table(pa.table(columns), path)


@pytest.mark.parametrize("keep", [0.3, 0.7, 0.9])
def test_a_truncated_video_is_an_error(tmp_path, keep):
    """The mp4 ends with its stream table: a cut loses it, or the frames."""
    write_lerobot(tmp_path, codec="libx264")
    truncate(tmp_path / VIDEO, keep)
    with pytest.raises(LoaderError, match=r"episode 0, key 'observation.images.top'.*file-000.mp4"):
        load(tmp_path)


@pytest.mark.parametrize("name", [EPISODES, DATA])
@pytest.mark.parametrize("keep", [0.5, 0.95])
def test_a_truncated_table_is_an_error(tmp_path, name, keep):
    write_lerobot(tmp_path, images_as="png")
    truncate(tmp_path / name, keep)
    with pytest.raises(LoaderError, match=f"cannot read {name}: "):
        load(tmp_path)


def test_timestamps_that_go_back_are_an_error_naming_file_and_column(tmp_path):
    write_lerobot(tmp_path, images_as="png")

    def swap(columns):
        t = columns["timestamp"]
        t[7], t[8] = t[8], t[7]  # episode 2's frames 1 and 2

    rewrite(tmp_path / DATA, swap)
    with pytest.raises(
        LoaderError,
        match=rf"episode 2, {DATA}, column 'timestamp': times go backwards at frame 2",
    ):
        load(tmp_path)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        assert load(tmp_path, skip_bad=True).episodes["episode_index"].tolist() == [0, 1]


def test_data_rows_must_be_the_episodes_of_meta_episodes(tmp_path):
    write_lerobot(tmp_path, images_as="png")

    def shift(columns):  # episode 2 said to start a row early: a row of episode 1
        columns["dataset_from_index"][2] -= 1
        columns["dataset_to_index"][2] -= 1

    rewrite(tmp_path / EPISODES, shift)
    with pytest.raises(
        LoaderError,
        match=rf"episode 2, {DATA}, column 'episode_index': row 0 of the episode holds 1, not 2",
    ):
        load(tmp_path)


def test_page_checksums_are_verified(tmp_path):
    write_lerobot(tmp_path, images_as="png", page_checksums=True)
    path = tmp_path / DATA
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)  # action's values
    assert chunk.path_in_schema.startswith("action")
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size - 3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(LoaderError, match=rf"cannot read {DATA}: OSError: .*CRC checksum"):
        load(tmp_path)


def test_meta_episodes_must_hold_every_episode_as_its_kind(tmp_path):
    """A parquet footer has no checksum: a changed byte there can cut the
    row count (pyarrow then reads fewer rows) or change a column's type."""
    write_lerobot(tmp_path, images_as="png")
    rows = pq.read_table(tmp_path / EPISODES)
    pq.write_table(rows.slice(0, 2), tmp_path / EPISODES)
    with pytest.raises(LoaderError, match=r"lists 2 episodes, info.json's total_episodes says 3"):
        load(tmp_path)
    index = rows.schema.get_field_index("tasks")
    as_bytes = pa.array([[t.encode() for t in ts] for ts in rows.column("tasks").to_pylist()])
    pq.write_table(rows.set_column(index, "tasks", as_bytes), tmp_path / EPISODES)
    with pytest.raises(LoaderError, match=rf"{EPISODES}, column 'tasks' is list<.*binary>"):
        load(tmp_path)
    pq.write_table(rows.drop_columns(["tasks"]), tmp_path / EPISODES)
    with pytest.raises(LoaderError, match=rf"{EPISODES} has no column 'tasks'"):
        load(tmp_path)


def _fps_value(root):
    """(file, first byte, end) of info.json's fps value."""
    text = (root / "meta/info.json").read_bytes()
    start = text.index(b'"fps": ') + len(b'"fps": ')
    end = start + len(text[start:].split(b",")[0])
    return os.path.join(root.name, "meta", "info.json"), start, end


def test_bit_flips_raise_or_change_nothing(tmp_path):
    root = tmp_path / "dataset"
    write_lerobot(root, images_as="png", page_checksums=True)
    original = load(root)
    fps, first, end = _fps_value(root)
    (tmp_path / "flips").mkdir()
    raised = tested = 0
    for copy, name, byte, bit in flipped_copies(root, 60, seed=5, dest=tmp_path / "flips"):
        if name != fps or not first <= byte < end:  # see the module's docstring
            tested += 1
            try:
                store = load(copy)
            except LoaderError:
                raised += 1
            else:
                assert same_store(store, original) and store.fps == original.fps, (
                    f"{name}: byte {byte} bit {bit} changed values"
                )
        shutil.rmtree(copy)
        if tested == 40:
            break
    # What share raises depends on how much of each file is footer (no
    # checksum), which changes with pyarrow's version: a quarter of flips at
    # least land in checked pages or columns.
    assert tested == 40 and raised >= 10


def test_video_frame_times_must_not_go_back(monkeypatch):
    """A damaged file's frames come in whatever order its timestamps say;
    the store needs them in order, and the error names the file."""
    import av

    import robocache.data.loaders.lerobot as lerobot_loader

    class Frame:
        def __init__(self, time):
            self.time = time

        def to_ndarray(self, format):
            return np.zeros((2, 2, 3), np.uint8)

    class Container:
        streams = SimpleNamespace(video=[SimpleNamespace(time_base=0.1, thread_type=None)])

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def decode(self, stream):
            return [Frame(t) for t in (0.0, 0.2, 0.1, 0.3)]

    monkeypatch.setattr(av, "open", lambda path: Container())
    with pytest.raises(
        LoaderError, match=r"here: file-000.mp4: frame times go backwards at frame 2"
    ):
        lerobot_loader._decode_segment("videos/file-000.mp4", 0.0, 1.0, "here")
