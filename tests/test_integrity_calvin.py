"""load_calvin on damaged splits: each raises a LoaderError naming the file
(and the episode and key), or loads exactly the original; none loads as
other values.

A frame's npz is a zip, whose every member carries a CRC-32 that zipfile
checks when it reads the member whole (the loader does; numpy's reader
stops at the array's end and would miss a header that shrank the array).
What no check can see: ``ep_start_end_ids.npy`` is a plain .npy, without a
checksum; a changed value that keeps the episodes ordered, apart and on
existing frames moves an episode's bounds (into a gap between episodes). The
language annotations are a pickle, also without a checksum: a changed
character of an instruction is a changed instruction. The flip test leaves
the ids' values out (their header is in), and loads by ranges, which does
not read the annotations.
"""

import os
import shutil

import numpy as np
import pytest
from fixtures.calvin import write_calvin
from fixtures.corrupt import flipped_copies, same_store, truncate

from robocache.data import LoaderError, load_calvin


def load(path, **kwargs):
    return load_calvin(path, progress=False, **kwargs)


@pytest.fixture
def split(tmp_path):
    write_calvin(tmp_path / "training")
    return tmp_path / "training"


@pytest.mark.parametrize("keep", [0.2, 0.5, 0.9, 0.99])
def test_a_truncated_frame_is_an_error(split, keep):
    truncate(split / "episode_0000007.npz", keep)
    with pytest.raises(LoaderError, match=r"episode 2: cannot read episode_0000007.npz"):
        load(split)
    with pytest.warns(UserWarning, match="skipped 1 bad episode"):
        assert load(split, skip_bad=True).episodes["episode_index"].tolist() == [0, 1]


def test_a_changed_array_header_is_caught_by_the_crc(split):
    """numpy's npz reader reads an array's bytes, not the member's, so a
    header that shrank the array loaded the shorter array."""
    path = split / "episode_0000005.npz"
    data = path.read_bytes()
    assert data.count(b"(15,)") == 1
    path.write_bytes(data.replace(b"(15,)", b"(14,)"))
    with pytest.raises(
        LoaderError, match=r"episode 1: cannot read episode_0000005.npz: BadZipFile: Bad CRC-32"
    ):
        load(split)


def test_a_changed_ids_header_is_an_error(split):
    """A shape shrunk in ep_start_end_ids.npy's header dropped the last
    episode; the values left past the array give it away."""
    path = split / "ep_start_end_ids.npy"
    data = path.read_bytes()
    path.write_bytes(data.replace(b"(3, 2)", b"(2, 2)"))
    with pytest.raises(LoaderError, match=r"ep_start_end_ids.npy holds 16 bytes past its \(2, 2\)"):
        load(split)


@pytest.mark.parametrize(
    "ranges, error",
    [
        ([(0, 5), (5, 5), (6, 11)], r"episodes 0 \(0-5\) and 1 \(5-5\) overlap"),
        ([(0, 4), (5, 5), (11, 6)], r"episode 2: ends \(6\) before it starts \(11\)"),
        ([(0, 4), (5, 5), (6, 12)], r"episode 2: cannot read episode_0000012.npz"),
        ([[0.0, 4.0], [5.0, 5.0], [6.0, 11.0]], r"must be \(n, 2\) integers; got float64"),
    ],
)
def test_ids_that_cannot_be_episodes_are_errors(split, ranges, error):
    np.save(split / "ep_start_end_ids.npy", np.array(ranges))
    with pytest.raises(LoaderError, match=error):
        load(split)


def test_every_frame_holds_the_keys_of_the_first(split):
    with np.load(split / "episode_0000009.npz") as npz:
        frame = {k: npz[k] for k in npz.files if k != "robot_obs"}
    np.savez(split / "episode_0000009.npz", **frame)
    with pytest.raises(LoaderError, match=r"episode 2, episode_0000009.npz: no key 'robot_obs'"):
        load(split)


def test_damaged_language_annotations_are_an_error(split):
    truncate(split / "lang_annotations" / "auto_lang_ann.npy", 0.5)
    with pytest.raises(LoaderError, match=r"cannot read lang_annotations/auto_lang_ann.npy"):
        load(split, episodes="language")


def _ids_values(split):
    """(file, first byte, end) of ep_start_end_ids.npy's values: past its header."""
    with open(split / "ep_start_end_ids.npy", "rb") as f:
        fmt = np.lib.format
        header = (
            fmt.read_array_header_1_0 if fmt.read_magic(f) == (1, 0) else fmt.read_array_header_2_0
        )
        header(f)
        return os.path.join(split.name, "ep_start_end_ids.npy"), f.tell(), f.seek(0, 2)


def test_bit_flips_raise_or_change_nothing(split, tmp_path):
    original = load(split)
    ids, first, end = _ids_values(split)
    (tmp_path / "flips").mkdir()
    raised = tested = 0
    for copy, name, byte, bit in flipped_copies(split, 60, seed=11, dest=tmp_path / "flips"):
        if name != ids or not first <= byte < end:  # see the module's docstring
            tested += 1
            try:
                store = load(copy)
            except LoaderError:
                raised += 1
            else:
                assert same_store(store, original), f"{name}: byte {byte} bit {bit}"
        shutil.rmtree(copy)
        if tested == 40:
            break
    assert tested == 40 and raised >= 20


def test_frames_in_fortran_order_load_and_pickles_are_refused(split):
    """The loader reads each .npy itself (to check its length): it reads
    what numpy's reader does, and like it refuses Python objects."""
    frames = {}
    for i in range(12):
        with np.load(split / f"episode_{i:07d}.npz") as npz:
            frames[i] = {k: npz[k] for k in npz.files}
        frames[i]["rgb_static"] = np.asfortranarray(frames[i]["rgb_static"])
        np.savez(split / f"episode_{i:07d}.npz", **frames[i])
    store = load(split)
    expected = np.stack([frames[i]["rgb_static"] for i in range(5)])
    assert np.array_equal(store["rgb_static"].values[:5].numpy(), expected)
    np.savez(split / "episode_0000003.npz", **{**frames[3], "robot_obs": np.array([{}] * 15)})
    with pytest.raises(LoaderError, match=r"key 'robot_obs': holds Python objects"):
        load(split)
