"""Mapped keys read ahead of the sampler: the windows are those of the store
in memory, bit for bit, in every mode; the reads are the rows the windows
use; and the reading threads end with the iteration, however it ends."""

import os
import threading
import time

import pytest
import torch
from conftest import requires_cuda
from readahead_cases import DELTAS, epoch, make_store

from robocache.data import EpisodeStore, LoaderError, WindowSampler
from robocache.data.sampler.finder import finders_of
from robocache.data.sampler.plan import check_options, edge_tolerance_ns, plan_keys
from robocache.data.store.rows import row_reader


@pytest.mark.parametrize(
    "modes",
    [
        {"cam": "nearest", "joints": "linear", "force": "mean"},
        {"cam": "previous", "joints": "mean", "force": "nearest"},
        {"cam": "nearest", "joints": "nearest", "force": "linear"},
    ],
)
@pytest.mark.parametrize("tolerances", [None, {"joints": 0.04, "force": 0.02}])
def test_windows_read_ahead_are_the_windows_in_memory(tmp_path, modes, tolerances):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    assert mapped.mapped == set(store.keys())
    kw = {"tolerance_s": tolerances} if tolerances else {}
    expected = epoch(store, modes, 0, **kw)
    for depth in (0, 1, 3):
        got = epoch(mapped, modes, depth, **kw)
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert a.keys() == b.keys()
            for key in a:
                assert torch.equal(a[key].view(torch.uint8) if a[key].dtype == torch.bfloat16 else a[key],
                                   b[key].view(torch.uint8) if b[key].dtype == torch.bfloat16 else b[key]), key  # fmt: skip


def test_a_shard_reads_its_own_rows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    modes = {"joints": "linear"}
    for rank in range(2):
        shard = EpisodeStore.load(tmp_path, shard=(rank, 2))
        whole = store.take_shard(rank, 2)
        assert shard.mapped_rows["cam"].rows == shard["cam"].values.shape[0]
        got = epoch(shard, modes, 2, rank=rank, world_size=2)
        want = epoch(whole, modes, 0, rank=rank, world_size=2)
        for a, b in zip(got, want):
            for key in ("cam", "joints", "cam_is_pad", "index", "frame_index"):
                assert torch.equal(a[key], b[key]), key


def os_threads(at_most=None):
    """This process's threads, native ones included (Linux), once at most
    ``at_most`` or after 5 s: a Python thread that was joined may still be
    ending in the OS for a moment."""
    deadline = time.monotonic() + 5
    while True:
        count = len(os.listdir("/proc/self/task"))
        if at_most is None or count <= at_most or time.monotonic() > deadline:
            return count
        time.sleep(0.01)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_the_threads_end_with_the_iteration(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    sampler = WindowSampler(mapped, DELTAS, anchor="anchor", batch_size=2, read_ahead=2)
    for _ in sampler:  # torch's own thread pools start once, here
        pass
    time.sleep(0.2)
    before = threading.active_count(), os_threads()
    iterator = iter(sampler)
    next(iterator)
    assert os_threads() >= before[1] + 7  # the reader's 7 native threads
    for _ in iterator:  # a whole epoch
        pass
    assert (threading.active_count(), os_threads(before[1])) == before
    for _ in sampler:  # a break
        break
    assert (threading.active_count(), os_threads(before[1])) == before
    with pytest.raises(KeyError):  # an exception in the loop body
        for batch in sampler:
            batch["nothing"]
    assert (threading.active_count(), os_threads(before[1])) == before


LEFT_OPEN = """
import sys
sys.path.insert(0, {tests!r})
from readahead_cases import DELTAS
from robocache.data import EpisodeStore, WindowSampler

sampler = WindowSampler(EpisodeStore.load({folder!r}), DELTAS, anchor="anchor", batch_size=4,
                        read_ahead=2)


def endless():
    while True:
        yield from sampler


batches = endless()
next(batches)
"""


def test_an_iteration_left_open_at_exit_ends_cleanly(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    make_store().save(tmp_path)
    code = LEFT_OPEN.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Exception ignored" not in done.stderr, done.stderr[-2000:]


def test_a_batch_reads_only_rows_near_its_windows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    options = check_options(modes={"joints": "linear"})
    plans = plan_keys(mapped, DELTAS, options, torch.device("cpu"))
    (finder,) = [f for f in finders_of(mapped, plans) if f.keys[0].plan.key == "joints"]
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    edge = edge_tolerance_ns(1e-4)
    # Two batches of one window each: episode 0's, then episode 3's.
    index = torch.tensor([3, int(store["anchor"].offsets[3]) + 2])
    found, bounds = finder.rows_of(index, anchor, edge, 1)
    first = found[bounds[0] : bounds[1]]
    n = int(store["joints"].offsets[1])  # episode 0's rows
    assert 0 < first.numel() < n and int(first.max()) < n
    later = found[bounds[1] : bounds[2]]
    episode = store["joints"].offsets
    assert int(episode[3]) <= int(later.min()) and int(later.max()) < int(episode[4])
    reader = row_reader(2)
    offsets, times = finder.indexes(found, bounds)
    ticket, buffer, _ = finder.submit(reader, first, (offsets[0], times[: bounds[1]]), False)
    finder.wait(reader, ticket)
    ((values, times, offsets),) = finder.views(buffer, first.numel(), first.numel()).values()
    assert torch.equal(values, store["joints"].values[first])
    assert torch.equal(times, store["joints"].times[first])
    assert offsets[0] == 0 and offsets[1] == first.numel() and offsets[-1] == first.numel()
    reader.close()


def test_each_batch_of_a_chunk_has_its_own_index(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    plans = plan_keys(mapped, DELTAS, check_options(), torch.device("cpu"))
    (finder,) = [f for f in finders_of(mapped, plans) if f.keys[0].plan.key == "joints"]
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    # Batches of 3 anchors, the last one short; then batches with no rows.
    index = torch.randperm(
        int(store["anchor"].offsets[-1]), generator=torch.Generator().manual_seed(0)
    )
    found, bounds = finder.rows_of(index, anchor, edge_tolerance_ns(1e-4), 3)
    cases = [(found, bounds), (found[:0], [0, 0, 0])]
    for rows, bounds in cases:
        offsets, times = finder.indexes(rows, bounds)
        assert offsets.shape == (len(bounds) - 1, finder.offsets.numel())
        for b in range(len(bounds) - 1):  # its episodes' offsets in its own rows, its rows' times
            mine = rows[bounds[b] : bounds[b + 1]]
            assert torch.equal(offsets[b], torch.searchsorted(mine, finder.offsets))
            assert torch.equal(times[bounds[b] : bounds[b + 1]], finder.times[mine])


def test_rows_land_in_a_buffer_laid_out_for_more_rows(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    deltas = {"joints": [-0.1, 0.0], "force": [-0.1, 0.0]}
    modes = {"joints": "linear", "force": "linear"}
    plans = plan_keys(mapped, deltas, check_options(modes=modes), torch.device("cpu"))
    (finder,) = finders_of(mapped, plans)  # the two keys share their rows
    anchor = (mapped["anchor"].offsets, mapped["anchor"].times)
    found, bounds = finder.rows_of(torch.tensor([3, 12]), anchor, edge_tolerance_ns(1e-4), 2)
    offsets, times = finder.indexes(found, bounds)
    count, room = found.numel(), found.numel() + 7
    buffer = torch.full((1 << 16,), 255, dtype=torch.uint8)  # room enough
    reader = row_reader(2)
    try:
        ticket, _, size = finder.submit(reader, found, (offsets[0], times), False, buffer, room)
        finder.wait(reader, ticket)
        streams = finder.views(buffer, room, count)
        assert sorted(streams) == sorted(k.position for k in finder.keys)
        ends = []
        for key in finder.keys:
            values, times, offsets = streams[key.position]
            stream = store[key.plan.key]
            assert torch.equal(values, stream.values[found]), key.plan.key
            assert torch.equal(times, stream.times[found])
            assert torch.equal(offsets, torch.searchsorted(found, stream.offsets))
            ends.append(values.data_ptr() + values.nbytes - buffer.data_ptr())
        # The size a copy takes covers every key's rows, and ends with the last one's.
        assert size == max(ends) and len(set(ends)) == len(ends)
        with pytest.raises(ValueError, match="do not fit"):
            finder.submit(reader, found, (offsets[0], times), False, buffer, count - 1)
    finally:
        reader.close()


def test_keys_of_one_timeline_and_rule_share_the_rows_found(tmp_path):
    store = make_store()
    store.save(tmp_path)
    mapped = EpisodeStore.load(tmp_path)
    deltas = {"joints": [-0.1, 0.0], "force": [-0.1, 0.0], "cam": [0.0]}
    options = check_options(modes={"joints": "linear", "force": "linear"})
    plans = plan_keys(mapped, deltas, options, torch.device("cpu"))
    groups = sorted(sorted(k.plan.key for k in f.keys) for f in finders_of(mapped, plans))
    assert ["force", "joints"] in groups and ["cam"] in groups
    options = check_options(modes={"joints": "linear", "force": "nearest"})
    plans = plan_keys(mapped, deltas, options, torch.device("cpu"))
    assert ["force"] in sorted(
        sorted(k.plan.key for k in f.keys) for f in finders_of(mapped, plans)
    )


SAVE_OVER = """
import sys
sys.path.insert(0, {tests!r})
from test_readahead import make_store
make_store(seed=1).save({folder!r})
"""


@pytest.mark.parametrize("saver", ["this process", "another process"])
def test_a_save_over_the_store_leaves_this_process_reading_its_own_file(tmp_path, saver):
    import subprocess
    import sys
    from pathlib import Path

    store = make_store()
    modes = {"joints": "linear", "force": "mean"}
    expected = epoch(store, modes, 0)
    for depth in (0, 2):
        store.save(tmp_path)
        mapped = EpisodeStore.load(tmp_path)
        sampler = WindowSampler(mapped, DELTAS, modes=modes, anchor="anchor", batch_size=4,
                                seed=3, key_age=True, read_ahead=depth)  # fmt: skip
        batches = iter(sampler)
        got = [{k: v.clone() for k, v in next(batches).items()}]
        if saver == "this process":
            make_store(seed=1).save(tmp_path)
        else:
            code = SAVE_OVER.format(tests=str(Path(__file__).parent), folder=str(tmp_path))
            subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
        assert not torch.equal(EpisodeStore.load(tmp_path)["joints"].values[:4],
                               store["joints"].values[:4])  # fmt: skip
        got += [{k: v.clone() for k, v in b.items()} for b in batches]
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            for key in ("cam", "joints", "index"):
                assert torch.equal(a[key], b[key]), (depth, key)
            assert torch.equal(a["force"].view(torch.uint8), b["force"].view(torch.uint8))


def test_a_store_file_pickled_is_the_file_loaded_or_an_error(tmp_path):
    import pickle

    store = make_store()
    store.save(tmp_path)
    file = EpisodeStore.load(tmp_path).mapped_rows["cam"].file
    copy = pickle.loads(pickle.dumps(file))
    assert copy.identity == file.identity and copy.fd != file.fd
    make_store(seed=1).save(tmp_path)
    with pytest.raises(LoaderError, match=r"store.safetensors: not the file this store was loaded"):
        pickle.loads(pickle.dumps(file))


CUT_WHILE_SAMPLING = """
import sys
sys.path.insert(0, {tests!r})
from fixtures.corrupt import truncate
from readahead_cases import DELTAS
from robocache.data import EpisodeStore, LoaderError, WindowSampler

store = EpisodeStore.load({folder!r}, verify={verify})
sampler = WindowSampler(store, DELTAS, anchor="anchor", batch_size=4, read_ahead={depth},
                        device={device!r}, modes={{"joints": "linear"}})
next(iter(sampler))
truncate({path!r}, 0.1)
try:
    for batch in sampler:
        pass
    sampler.batch_at([0, 3])
except LoaderError as e:
    print(e)
    sys.exit(0)
sys.exit(3)
"""


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=requires_cuda)])
@pytest.mark.parametrize("depth", [0, 2])
@pytest.mark.parametrize("verify", [True, False])
def test_a_file_cut_while_sampling_is_an_error_naming_it_not_a_crash(
    tmp_path, device, depth, verify
):
    import subprocess
    import sys
    from pathlib import Path

    make_store().save(tmp_path)
    path = tmp_path / "store.safetensors"
    code = CUT_WHILE_SAMPLING.format(tests=str(Path(__file__).parent), folder=str(tmp_path),
                                     path=str(path), depth=depth, device=device,
                                     verify=verify)  # fmt: skip
    # A SIGBUS (a fault of the mapping) would kill the process with -7.
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "store.safetensors: the file ends inside the values of" in done.stdout or (
        "store.safetensors: the file ends inside a stream's values" in done.stdout
    ), done.stdout


def test_a_sampler_s_repr_shows_what_it_holds_ahead(tmp_path):
    make_store().save(tmp_path)
    sampler = WindowSampler(EpisodeStore.load(tmp_path), DELTAS, anchor="anchor", batch_size=4,
                            read_ahead=3)  # fmt: skip
    text = repr(sampler)
    assert text.startswith(
        f"WindowSampler(a store, {len(sampler)} batches of 4 an epoch, device=cpu"
    )
    assert (
        "read from the file 3 batches ahead, the rows of at most 4 batches in host memory" in text
    )
    assert "'cam'" in text and "'joints'" in text
