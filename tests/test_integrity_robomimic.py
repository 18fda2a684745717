"""load_robomimic on damaged HDF5 files: each raises a LoaderError naming the
file (and the demo and key), or loads exactly the original; none loads as
other values, and no h5py error escapes.

What no check can see:
- in a file as robomimic writes it (h5py's defaults: the oldest file format,
  contiguous datasets, no filters), HDF5 checksums nothing: a flipped bit in
  a dataset's values is a changed value, and one in many metadata fields (a
  name in a local heap, an attribute's value) changes them too;
- in a file written with ``libver="latest"`` and ``fletcher32=True`` on every
  dataset, HDF5 checks its metadata and every chunk, except the global heap
  (variable-length strings: ``env_args``), which has no checksum in any
  format. A flipped bit in the size of a global heap object makes HDF5
  (2.0.0) loop forever reading the string (HDFGroup/hdf5#1707); the flip
  tests leave the global heap out.
"""

import os
import re
import shutil

import pytest

h5py = pytest.importorskip("h5py", reason="the robomimic extra: pip install robocache[robomimic]")

from fixtures.clocks import FPS  # noqa: E402
from fixtures.corrupt import flipped_copies, same_store, truncate  # noqa: E402
from fixtures.robomimic import write_robomimic  # noqa: E402

from robocache.data import LoaderError, load_robomimic  # noqa: E402


def load(path, **kwargs):
    return load_robomimic(path, fps=FPS, progress=False, **kwargs)


def flip(path, byte, bit=0):
    data = bytearray(path.read_bytes())
    data[byte] ^= 1 << bit
    path.write_bytes(bytes(data))


def same(store, original):
    return same_store(store, original) and store.info == original.info


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_a_truncated_file_is_an_error(tmp_path, keep):
    """HDF5's superblock records where the file ends."""
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    truncate(path, keep)
    with pytest.raises(LoaderError, match=r"demos.hdf5\): cannot open the file: .*truncated"):
        load(path)


@pytest.mark.parametrize("signature", [b"TREE", b"HEAP", b"SNOD"])
def test_damaged_groups_are_loader_errors_not_h5pys(tmp_path, signature):
    """A damaged B-tree, local heap or symbol table node (h5py raises
    RuntimeError: "Link iteration failed", "Unable to get group info", ...)."""
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    original = load(path)
    places = [m.start() for m in re.finditer(re.escape(signature), path.read_bytes())]
    assert len(places) > 3
    raised = 0
    for place in places:
        copy = tmp_path / "copy.hdf5"
        shutil.copy(path, copy)
        flip(copy, place, 5)
        try:
            store = load(copy)
        except LoaderError as e:
            assert re.match(r"load_robomimic\(.*copy.hdf5\)(, demo_\d+)?: cannot read ", str(e))
            raised += 1
        else:
            assert same(store, original)  # the mask group's, which a load does not read
        try:
            load(copy, skip_bad=True)  # a demo's own damage skips it; the rest raise
        except LoaderError:
            pass
    assert raised >= len(places) - 1


def test_a_dataset_hdf5_cannot_open_is_an_error_not_a_dropped_key(tmp_path):
    """h5py's group.items() gives None for an object it cannot open: the key
    was dropped from the store without a word."""
    path = tmp_path / "demos.hdf5"
    write_robomimic(path, checksums=True)
    with h5py.File(path) as f:
        header = h5py.h5o.get_info(f["data/demo_0/obs/agentview_image"].id).addr
    flip(path, header + 6)
    with pytest.raises(LoaderError, match=r"cannot read the datasets of demo_0: KeyError"):
        load(path)
    with pytest.raises(LoaderError, match=r"demo_0: cannot read key 'obs/agentview_image'"):
        load(path, keys=["actions", "obs/agentview_image"])


def test_fletcher32_is_verified(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path, checksums=True)
    with h5py.File(path) as f:
        dataset = f["data/demo_10/actions"]
        assert dataset.fletcher32
        chunk = dataset.id.get_chunk_info(0).byte_offset
    flip(path, chunk + 5, 3)
    with pytest.raises(
        LoaderError,
        match=r"demo_10: cannot read key .actions. \(fletcher32\): OSError: .*(filter|Fletcher32)",
    ):
        load(path)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        store = load(path, skip_bad=True)
    assert store.episodes["episode_index"].tolist() == [0, 1]


def _outside_the_global_heap(copies, path, count):
    """The first ``count`` copies whose flipped byte is not in the file's
    global heap collection (see the module's docstring)."""
    data = path.read_bytes()
    start = data.find(b"GCOL")
    end = start + int.from_bytes(data[start + 8 : start + 16], "little")
    assert start > 0 and end > start
    for copy, name, byte, bit in copies:
        if start <= byte < end:
            os.remove(copy)
            continue
        yield copy, name, byte, bit
        count -= 1
        if count == 0:
            return


def test_bit_flips_in_a_checksummed_file_raise_or_change_nothing(tmp_path):
    path = tmp_path / "demos.hdf5"
    write_robomimic(path, checksums=True)
    original = load(path)
    (tmp_path / "flips").mkdir()
    copies = flipped_copies(path, 200, seed=3, dest=tmp_path / "flips")
    raised = 0
    for copy, _, byte, bit in _outside_the_global_heap(copies, path, 40):
        try:
            store = load(copy)
        except LoaderError:
            raised += 1
        else:
            assert same(store, original), f"byte {byte} bit {bit} changed values"
        os.remove(copy)
    assert raised >= 15


def test_bit_flips_in_a_default_file_never_escape_as_h5py_errors(tmp_path):
    """robomimic's own files check nothing (see the module's docstring), so
    flips may change values; but each raises a LoaderError or loads."""
    path = tmp_path / "demos.hdf5"
    write_robomimic(path)
    (tmp_path / "flips").mkdir()
    copies = flipped_copies(path, 200, seed=3, dest=tmp_path / "flips")
    for copy, _, _, _ in _outside_the_global_heap(copies, path, 40):
        for skip_bad in (False, True):
            try:
                load(copy, skip_bad=skip_bad)
            except LoaderError:
                pass
        os.remove(copy)
