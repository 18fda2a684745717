"""load_zarr on damaged replay buffers: every one raises a LoaderError naming
the array and the chunk, or loads exactly the original; none loads as other
values.

What no check can see (zarr v2 chunks carry no checksum): a flipped bit
inside a raw chunk is a changed value; inside a Blosc chunk (Diffusion
Policy's default), a changed value or byte order, unless it breaks the
chunk's header or LZ4 stream. Only codecs that check their output (here Zstd
with ``checksum=True``) find those, so the whole-buffer flip test writes
such chunks, and the test on default buffers flips only their metadata.
"""

import os
import shutil

import numpy as np
import pytest

zarr = pytest.importorskip("zarr", reason="the zarr extra: pip install robocache[zarr]")

import numcodecs  # noqa: E402  (installed with zarr)
from fixtures.clocks import FPS  # noqa: E402
from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from fixtures.zarr import metadata_flipped_copies, write_replay_buffer  # noqa: E402

from robocache.data import LoaderError, load_zarr  # noqa: E402


def load(path, **kwargs):
    return load_zarr(path, fps=FPS, progress=False, **kwargs)


@pytest.fixture
def buffer(tmp_path):
    write_replay_buffer(tmp_path / "buffer.zarr")
    return tmp_path / "buffer.zarr"


def test_a_missing_chunk_is_an_error_not_fill(buffer):
    chunk = (buffer / "data/action/1.0").read_bytes()
    os.remove(buffer / "data/action/1.0")
    with pytest.raises(
        LoaderError, match=r"data/action: chunk 1.0 \(rows 3-5\) is missing from the store"
    ):
        load(buffer)
    (buffer / "data/action/1.0").write_bytes(chunk)
    # With skip_bad, the episodes the chunk holds rows of are skipped.
    os.remove(buffer / "data/state/3.0")
    with pytest.warns(UserWarning, match=r"skipped 1 bad episode.*\n.*data/state: chunk 3.0"):
        store = load(buffer, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]


def test_a_missing_episode_ends_chunk_is_an_error(buffer):
    os.remove(buffer / "meta/episode_ends/0")
    with pytest.raises(LoaderError, match=r"meta/episode_ends: chunk 0 .*is missing"):
        load(buffer)


def test_a_folder_under_data_that_is_not_an_array_is_an_error(buffer):
    os.remove(buffer / "data/img/.zarray")
    with pytest.raises(LoaderError, match=r"data/img is not a readable zarr array"):
        load(buffer)
    with pytest.raises(LoaderError, match=r"data/img is not a readable zarr array"):
        load(buffer, keys=["img"])
    assert set(load(buffer, keys=["action", "state"]).keys()) == {"action", "state"}


@pytest.mark.parametrize(
    "compressors, error",
    [
        ("auto", r"chunk 1.0 \(rows 3-5\) holds \d+ bytes, but its Blosc header says \d+"),
        (numcodecs.Zstd(level=3), r"episode 0: data/action, chunk 1.0: cannot be decoded"),
        (None, r"episode 0: data/action, chunk 1.0: cannot be decoded"),
    ],
    ids=["blosc", "zstd", "raw"],
)
def test_a_truncated_chunk_is_an_error(tmp_path, compressors, error):
    write_replay_buffer(tmp_path / "buffer.zarr", compressors=compressors)
    truncate(tmp_path / "buffer.zarr/data/action/1.0", 0.5)
    with pytest.raises(LoaderError, match=error):
        load(tmp_path / "buffer.zarr")


def test_a_chunk_that_cannot_be_decoded_is_named_and_skippable(buffer):
    chunk = buffer / "data/img/2.0.0.0"
    data = bytearray(chunk.read_bytes())
    data[2] ^= 0xFF  # Blosc's flags: no longer a chunk it can decode
    chunk.write_bytes(bytes(data))
    with pytest.raises(LoaderError, match=r"episode 2: data/img, chunk 2.0.0.0: cannot be decoded"):
        load(buffer)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        store = load(buffer, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]


def test_episode_ends_must_end_at_every_arrays_last_row(buffer):
    root = zarr.open_group(str(buffer), mode="a")
    root["meta/episode_ends"][:] = np.array([4, 5, 11])
    with pytest.raises(LoaderError, match=r"key 'action': 12 rows, but episode_ends ends at 11"):
        load(buffer)
    root["meta/episode_ends"][:] = np.array([4, 3, 12])
    with pytest.raises(LoaderError, match=r"episode_ends must be non-decreasing"):
        load(buffer)


def test_metadata_that_cannot_be_the_arrays_is_an_error(buffer, tmp_path):
    """The .zarray changes a single flipped bit makes that zarr reads without
    complaint: a byte order, a shape shrunk within its chunk."""
    copy = tmp_path / "copy.zarr"
    shape_end = b'\n  ],\n  "chunks"'
    for name, old, new, error in [
        ("action", b'"<f4"', b'">f4"', r"data/action: dtype >f4 is not in this machine's byte"),
        ("action", b"2" + shape_end, b"0" + shape_end, r"action: chunks \(3, 2\) are wider"),
        ("img", b"3" + shape_end, b"1" + shape_end, r"data/img: chunks .* wider than the shape"),
    ]:
        shutil.copytree(buffer, copy)
        path = copy / "data" / name / ".zarray"
        text = path.read_bytes()
        assert text.count(old) == 1
        path.write_bytes(text.replace(old, new))
        with pytest.raises(LoaderError, match=error):
            load(copy)
        shutil.rmtree(copy)
    # A shape shrunk by whole chunks leaves chunks outside it.
    shutil.copy(buffer / "data/action/3.0", buffer / "data/action/4.0")
    with pytest.raises(LoaderError, match=r"action: chunk 4.0 is in the store but outside"):
        load(buffer)


def _raises_or_same(copies, original):
    """Each copy raises a LoaderError or loads a store identical to the
    original; returns how many raised."""
    raised = 0
    for copy, name, byte, bit in copies:
        try:
            store = load(copy)
        except LoaderError:
            raised += 1
        else:
            assert same_store(store, original), f"{name}: byte {byte} bit {bit} changed values"
        shutil.rmtree(copy)
    return raised


def test_bit_flips_in_a_checksummed_buffer_raise_or_change_nothing(tmp_path):
    """Zstd with checksum=True: every chunk checks what it decodes to; the
    metadata is checked by the loader. Flips anywhere in the buffer."""
    path = tmp_path / "buffer.zarr"
    write_replay_buffer(path, compressors=numcodecs.Zstd(level=3, checksum=True))
    (tmp_path / "flips").mkdir()
    copies = flipped_copies(path, 40, seed=7, dest=tmp_path / "flips")
    assert _raises_or_same(copies, load(path)) >= 30  # most flips hit something read


def test_bit_flips_in_a_default_buffers_metadata_raise_or_change_nothing(buffer, tmp_path):
    """Blosc chunks (the default) do not check themselves, so only the
    metadata files are flipped here."""
    (tmp_path / "flips").mkdir()
    copies = metadata_flipped_copies(buffer, 40, seed=7, dest=tmp_path / "flips")
    assert _raises_or_same(copies, load(buffer)) >= 30


def test_stores_that_are_not_folders_are_checked_through_zarrs_store_api(buffer, monkeypatch):
    """A local folder's chunks are listed and measured with os (zarr's async
    store API costs about 0.3 ms a chunk); any other store, through zarr."""
    import robocache.data.loaders.zarr as zarr_loader

    monkeypatch.setattr(zarr_loader, "_local_root", lambda store: None)
    os.remove(buffer / "data/action/0.0")
    truncate(buffer / "data/state/3.0", 0.5)
    with pytest.warns(UserWarning, match="skipped 2 bad episode") as warned:
        store = load(buffer, skip_bad=True)
    assert "data/action: chunk 0.0 (rows 0-2) is missing" in str(warned[0].message)
    assert "data/state: chunk 3.0 (rows 9-11) holds" in str(warned[0].message)
    assert store.episodes["episode_index"].tolist() == [1]
