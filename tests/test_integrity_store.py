"""EpisodeStore.load on damaged files: every damage raises a LoaderError that
names the file, or the store loads identical to what was saved."""

import json
import os

import pytest
import torch
from fixtures.corrupt import flipped_copies, same_store, truncate
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from robocache.data import EpisodeStore, LoaderError, PackedStream

MS = 1_000_000


def make_store(lengths=(5, 1, 8, 3)):
    episodes = []
    for e, n in enumerate(lengths):
        t = torch.arange(n) * 100 * MS
        episodes.append(
            {
                "action": (torch.randn(n, 3), t),
                "cam": (torch.randint(0, 256, (n, 4, 5, 3), dtype=torch.uint8), t),
                "task": f"task {e % 2}",
            }
        )
    return EpisodeStore.from_episodes(episodes, fps=10, progress=False)


def rewrite(path, change):
    """The file at path written again with ``change(tensors, meta)`` applied."""
    tensors = load_file(path)
    with safe_open(path, framework="pt") as f:
        meta = dict(f.metadata())
    tensors = {k: v.clone() for k, v in tensors.items()}
    change(tensors, meta)
    save_file(tensors, path, metadata=meta)


@pytest.fixture
def saved(tmp_path):
    store = make_store()
    store.save(tmp_path / "store")
    return store, tmp_path / "store", str(tmp_path / "store" / "store.safetensors")


def test_random_bit_flips_raise_or_load_identical(saved, tmp_path):
    store, folder, _ = saved
    caught = 0
    for copy, name, byte, bit in flipped_copies(str(folder), 40, seed=6, dest=str(tmp_path)):
        try:
            # Values are checked as they are first read: here, all at once.
            loaded = EpisodeStore.load(copy).place("cpu")
        except LoaderError as e:
            assert "store.safetensors" in str(e), str(e)
            caught += 1
            continue
        assert same_store(loaded, store), f"byte {byte} bit {bit} of {name} changed the data"
    assert caught > 30  # nearly every byte of the file is data the checksums cover


def test_a_flipped_time_is_caught_by_its_checksum(saved):
    store, folder, path = saved
    rewrite(path, lambda t, m: t["streams/0/times"].__setitem__(3, 2**62))
    with pytest.raises(LoaderError, match=r"streams/0/times does not match its checksum"):
        EpisodeStore.load(folder)


def test_a_flipped_frame_names_its_episode(saved):
    store, folder, path = saved

    def flip(t, m):
        t["streams/1/values"][15, 0, 0, 0] ^= 1

    rewrite(path, flip)
    named = r"store.safetensors: stream 'cam': streams/1/values, episode 3 \(rows 14:17\) does not"
    mapped = EpisodeStore.load(folder)  # the index alone is read: values wait for their reads
    for read in (
        lambda: EpisodeStore.load(folder, mmap=False),
        lambda: EpisodeStore.load(folder, placement="cpu"),
        lambda: mapped.place({"cam": "cpu"}),
        lambda: mapped.mapped_rows["cam"].read(torch.tensor([15])),
    ):
        with pytest.raises(LoaderError, match=named):
            read()
    # Episodes the reads never reach are never checked: the other key, the
    # other episodes' rows, and a shard of other episodes.
    assert mapped.place({"action": "cpu"}).placement["action"] == "cpu"
    assert mapped.mapped_rows["cam"].read(torch.tensor([0, 13])).shape == (2, 4, 5, 3)
    assert EpisodeStore.load(folder, shard=(0, 2)).place("cpu").num_episodes == 3
    with pytest.raises(LoaderError, match=r"episode 3"):
        EpisodeStore.load(folder, shard=(1, 2)).place("cpu")
    # Without verify, nothing is checked.
    assert EpisodeStore.load(folder, verify=False, mmap=False)["cam"].values[15, 0, 0, 0] >= 0


def test_structure_is_checked_without_checksums(saved):
    store, folder, path = saved

    def bad_task(t, m):
        t["episodes/task_index"][1] = 9

    rewrite(path, bad_task)
    with pytest.raises(LoaderError, match=r"task_index\[1\] = 9 is not one of the 2 tasks"):
        EpisodeStore.load(folder, verify=False)


@pytest.mark.parametrize(
    "change, match",
    [
        (
            lambda t, m: t["streams/0/offsets"].__setitem__(2, 99),
            r"stream 'action': offsets must rise",
        ),
        (lambda t, m: t["streams/0/offsets"].__setitem__(1, -3), r"offsets must rise from 0"),
        (
            lambda t, m: m.__setitem__("keys", json.dumps(["action"])),
            r"holds streams/1, but its metadata lists only 1",
        ),
        (
            lambda t, m: m.__setitem__("tasks", "{not json"),
            r"the metadata's 'tasks' is missing or not JSON",
        ),
        (lambda t, m: t.pop("streams/1/times"), r"stream 'cam' has no tensor streams/1/times"),
        (
            lambda t, m: t.__setitem__("streams/0/times", t["streams/0/times"].int()),
            r"times must be \(N,\) int64",
        ),
    ],
)
def test_structural_damage_is_named(saved, change, match):
    store, folder, path = saved
    rewrite(path, change)
    with pytest.raises(LoaderError, match=match) as error:
        EpisodeStore.load(folder, verify=False)
    assert "store.safetensors" in str(error.value)


def test_unsorted_times_are_found_at_load(tmp_path):
    store = make_store()
    action = store["action"]
    times = action.times.clone()
    times[[1, 2]] = times[[2, 1]]  # within episode 0
    store.streams["action"] = PackedStream(action.values, times, action.offsets, action.stats)
    store.save(tmp_path)
    with pytest.raises(
        LoaderError, match=r"stream 'action': times must be non-decreasing.*row 2 \(episode 0\)"
    ):
        EpisodeStore.load(tmp_path)
    assert EpisodeStore.load(tmp_path, check=False)["action"].times[2] == times[2]


def test_truncated_and_foreign_files_name_the_file(saved):
    store, folder, path = saved
    for keep in (0.9, 0.3, 12, 4):
        truncate(path, keep)
        with pytest.raises(LoaderError, match=r"store.safetensors.*not a readable safetensors"):
            EpisodeStore.load(folder)
    with open(path, "wb") as f:
        f.write(b"{}")
    with pytest.raises(LoaderError, match="not a readable safetensors file"):
        EpisodeStore.load(folder)


def test_a_store_saved_without_checksums_warns_once(saved):
    store, folder, path = saved

    def older(t, m):
        m.pop("checksums")
        for i in range(2):
            t.pop(f"streams/{i}/checksums")

    rewrite(path, older)
    with pytest.warns(UserWarning, match="saved without checksums"):
        loaded = EpisodeStore.load(folder)
    assert same_store(loaded, store)


def test_save_replaces_the_file_while_a_mapped_store_keeps_its_own(saved):
    store, folder, path = saved
    mapped = EpisodeStore.load(folder)
    before = mapped["cam"].values.clone()
    make_store(lengths=(2, 2)).save(folder)  # another process's save: a new file, renamed
    assert torch.equal(mapped["cam"].values, before)
    assert EpisodeStore.load(folder).num_episodes == 2
    assert not os.path.exists(path + ".tmp")
