"""Host memory of data-parallel ranks on one host: two gloo ranks on the CPU,
each drawing a whole epoch, with each rank's proportional set size (PSS:
pages shared between processes are split between them) read before and
after.

- A replicated store loaded in memory (``mmap=False``) costs every rank the
  whole store: this is what the docs steer users away from.
- A store's shard (``shard=(rank, world_size)``) costs each rank its own
  episodes: together about one store.
- A replicated store left mapped costs the ranks no copy of it: they read
  the rows each batch needs from the one file (the page cache is shared and
  is not any process's memory)."""

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from robocache.data import EpisodeStore, WindowSampler

MS = 10**6
FRAMES = 1024  # per episode, 4 episodes of 64 KiB frames: a 256 MiB stream
STORE_BYTES = 4 * FRAMES * 64 * 1024


def _pss():
    """This process's proportional set size in bytes."""
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no Pss in /proc/self/smaps_rollup")


def _rank(rank, world_size, store_dir, how, rendezvous, results):
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank,
                            world_size=world_size)  # fmt: skip
    try:
        torch.set_num_threads(1)
        before = _pss()
        if how == "replicated in memory":
            store = EpisodeStore.load(store_dir, mmap=False, verify=False)
        elif how == "sharded in memory":
            store = EpisodeStore.load(store_dir, mmap=False, verify=False, shard=(rank, world_size))
        else:
            store = EpisodeStore.load(store_dir, verify=False)
        sampler = WindowSampler(store, {"cam": [0.0, 0.1]}, batch_size=32, seed=0, rank=rank,
                                world_size=world_size, drop_last=False)  # fmt: skip
        frames = 0
        for batch in sampler:
            frames += batch["cam"].shape[0] * batch["cam"].shape[1]
        grown = torch.tensor([_pss() - before, frames], dtype=torch.int64)
        every = [torch.zeros(2, dtype=torch.int64) for _ in range(world_size)]
        dist.all_gather(every, grown)
        if rank == 0:
            torch.save(torch.stack(every), results)
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    episodes = []
    for e in range(4):
        t = torch.arange(FRAMES, dtype=torch.int64) * 100 * MS
        cam = torch.randint(0, 256, (FRAMES, 128, 128, 4), dtype=torch.uint8)
        episodes.append({"cam": (cam, t)})
    EpisodeStore.from_episodes(episodes, progress=False, stats=False).save(folder)
    return folder


def _measure(store_dir, tmp_path, how, world_size=2):
    results = tmp_path / "pss.pt"
    mp.start_processes(
        _rank,
        args=(world_size, str(store_dir), how, str(tmp_path / "rendezvous"), str(results)),
        nprocs=world_size,
        start_method="spawn",
    )
    every = torch.load(results)
    return every[:, 0].tolist(), every[:, 1].tolist()


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps_rollup"), reason="Linux's smaps_rollup")
@pytest.mark.parametrize(
    "how,low,high",
    [
        ("replicated in memory", 1.9, 3.0),  # a whole store per rank
        ("sharded in memory", 0.9, 1.5),  # a store in all
        ("replicated mapped", 0.0, 0.6),  # no copy: the rows of the next batches
    ],
)
def test_host_memory_of_two_ranks(store_dir, tmp_path, how, low, high):
    grown, frames = _measure(store_dir, tmp_path, how)
    assert all(f > 0 for f in frames), frames
    total = sum(grown) / STORE_BYTES
    assert low <= total <= high, (
        f"{how}: the ranks grew by {[g >> 20 for g in grown]} MiB, "
        f"{total:.2f} stores of {STORE_BYTES >> 20} MiB"
    )
