"""Data-parallel ranks: episode shards of a store, the sampler's per-rank
epochs (replicated and sharded), and DDP training under torchrun with gloo."""

import os
import subprocess
import sys

import pytest
import torch
from helpers import run_session, scheduling_kept

from robocache.data import EpisodeStore, WindowSampler
from robocache.data.store import shard_ranges

EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "train_policy.py"
)


def store_of(lengths, fps=10):
    episodes = []
    for e, n in enumerate(lengths):
        t = torch.arange(n, dtype=torch.int64) * (10**9 // fps)
        episodes.append(
            {
                "action": (torch.randn(n, 3), t),
                "cam": (torch.randint(0, 256, ((n + 1) // 2, 2, 2, 3), dtype=torch.uint8), t[::2]),
                "episode_index": 10 + e,
            }
        )
    return EpisodeStore.from_episodes(episodes, fps=fps, progress=False)


def test_shard_ranges_are_contiguous_balanced_and_cover():
    lengths = torch.randint(1, 200, (37,))
    for world_size in (1, 2, 3, 8, 37):
        ranges = shard_ranges(lengths, world_size)
        assert ranges[0][0] == 0 and ranges[-1][1] == 37
        assert all(a < b for a, b in ranges)  # at least one episode each
        assert all(ranges[r][1] == ranges[r + 1][0] for r in range(world_size - 1))
        if world_size <= 3:
            frames = [int(lengths[a:b].sum()) for a, b in ranges]
            assert max(frames) - min(frames) <= 2 * int(lengths.max())
    assert shard_ranges([5, 1, 1, 1], 2) == ((0, 1), (1, 4))
    with pytest.raises(ValueError, match="3 episodes cannot give each of 4 ranks one"):
        shard_ranges([1, 2, 3], 4)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        shard_ranges([1, 2, 3], 0)


def test_loaded_shards_are_disjoint_and_cover_the_store(tmp_path):
    store = store_of(torch.randint(1, 30, (11,)).tolist())
    store.save(tmp_path)
    for world_size in (2, 3):
        shards = [EpisodeStore.load(tmp_path, shard=(r, world_size)) for r in range(world_size)]
        indices = torch.cat([s.episodes["episode_index"] for s in shards])
        assert torch.equal(indices, store.episodes["episode_index"])  # disjoint, in order, all
        for key in store.keys():
            assert torch.equal(torch.cat([s[key].values for s in shards]), store[key].values)
            assert torch.equal(torch.cat([s[key].times for s in shards]), store[key].times)
            for s in shards:  # offsets rebased; statistics of the whole store
                assert s[key].offsets[0] == 0 and s[key].offsets[-1] == s[key].values.shape[0]
                assert all(torch.equal(s[key].stats[k], v) for k, v in store[key].stats.items())
        assert [s.shard.rank for s in shards] == list(range(world_size))
    with pytest.raises(ValueError, match="one rank's shard; save the whole store"):
        shards[0].save(tmp_path / "again")
    with pytest.raises(ValueError, match=r"shard must be \(rank, world_size\)"):
        EpisodeStore.load(tmp_path, shard=1)
    with pytest.raises(ValueError, match=r"rank must be an int in \[0, 3\)"):
        EpisodeStore.load(tmp_path, shard=(3, 3))


def epoch(sampler, epoch=0):
    sampler.set_epoch(epoch)
    batches = list(sampler)
    return batches, torch.cat([b["index"] for b in batches])


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_replicated_store_deals_the_permutation_out(drop_last):
    store = store_of([7, 1, 12, 5])  # 25 anchors
    for world_size in (2, 3):
        per_rank = [
            epoch(
                WindowSampler(
                    store,
                    {"action": [0.0]},
                    batch_size=4,
                    drop_last=drop_last,
                    rank=r,
                    world_size=world_size,
                )
            )
            for r in range(world_size)
        ]
        assert len({len(batches) for batches, _ in per_rank}) == 1  # equal batch counts
        seen = torch.cat([index for _, index in per_rank])
        if drop_last:
            assert seen.unique().numel() == seen.numel() == (25 // world_size // 4) * 4 * world_size
        else:
            assert set(seen.tolist()) == set(range(25))  # all, a few twice to even the ranks
            assert seen.numel() - 25 < world_size
    # Deterministic, and each epoch a new permutation.
    a = WindowSampler(store, {"action": [0.0]}, batch_size=4, rank=1, world_size=2)
    b = WindowSampler(store, {"action": [0.0]}, batch_size=4, rank=1, world_size=2)
    assert torch.equal(epoch(a)[1], epoch(b)[1])
    assert not torch.equal(epoch(a, 0)[1], epoch(a, 1)[1])


@pytest.mark.parametrize("drop_last", [False, True])
def test_sharded_ranks_draw_equal_batches_from_their_own_episodes(tmp_path, drop_last):
    lengths = [30, 3, 9, 14, 2, 22, 5]
    store_of(lengths).save(tmp_path)
    world_size = 3
    results = []
    for r in range(world_size):
        shard = EpisodeStore.load(tmp_path, shard=(r, world_size))
        sampler = WindowSampler(shard, {"action": [0.0, 0.1]}, batch_size=4, drop_last=drop_last)
        assert (sampler.rank, sampler.world_size) == (r, world_size)  # from the shard
        batches, index = epoch(sampler)
        episodes = torch.cat([b["episode_index"] for b in batches])
        own = set(shard.episodes["episode_index"].tolist())
        assert set(episodes.tolist()) <= own
        n = sampler.num_anchors
        if not drop_last:
            assert set(index.tolist()) == set(range(n))  # every own anchor, wrapped to even out
        results.append((len(batches), index))
    assert len({count for count, _ in results}) == 1
    # Fixed by (seed, epoch, rank): a second sampler of rank 1 draws the same order.
    again = WindowSampler(
        EpisodeStore.load(tmp_path, shard=(1, 3)), {"action": [0.0]}, batch_size=4
    )
    first = WindowSampler(
        EpisodeStore.load(tmp_path, shard=(1, 3)), {"action": [0.0]}, batch_size=4
    )
    assert torch.equal(epoch(again)[1], epoch(first)[1])
    assert not torch.equal(epoch(again, 0)[1], epoch(again, 1)[1])
    with pytest.raises(
        ValueError, match="the store is rank 1's shard of 3, but this sampler is rank 0 of 3"
    ):
        WindowSampler(again.store, {"action": [0.0]}, rank=0, world_size=3)
    with pytest.raises(ValueError, match="give both rank and world_size"):
        WindowSampler(again.store, {"action": [0.0]}, rank=1)


def test_every_shard_picks_the_whole_stores_anchor():
    """The default anchor is the stream with the most samples in the whole
    store: a shard where another stream has more must not pick that one
    (its ranks would then draw different numbers of batches)."""

    def episode(a, b):
        return {
            "a": (torch.randn(a, 2), torch.arange(a) * 10**8),
            "b": (torch.randn(b, 2), torch.arange(b) * 10**8),
        }

    store = EpisodeStore.from_episodes([episode(10, 4), episode(3, 8)], progress=False)
    deltas = {"a": [0.0], "b": [0.0]}
    assert WindowSampler(store, deltas).anchor == "a"  # 13 samples against 12
    for rank in range(2):
        shard = store.take_shard(rank, 2)
        sampler = WindowSampler(shard, deltas, batch_size=2, rank=rank, world_size=2)
        assert sampler.anchor == "a", rank
    lengths = {len(WindowSampler(store.take_shard(r, 2), deltas, batch_size=2, rank=r,
                                 world_size=2)) for r in range(2)}  # fmt: skip
    assert len(lengths) == 1


@pytest.mark.parametrize("world_size,replicate", [(2, False), (3, True)])
def test_ddp_training_under_torchrun_finishes_with_equal_batches(tmp_path, world_size, replicate):
    store_dir = tmp_path / "store"
    subprocess.run(
        [sys.executable, EXAMPLE, "--make-store", str(store_dir)], check=True, timeout=120
    )
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={world_size}",
        EXAMPLE,
        str(store_dir),
        "--epochs",
        "2",
    ] + (["--replicate"] if replicate else [])
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["CUDA_VISIBLE_DEVICES"] = ""  # gloo on the CPU, also on a GPU machine
    result = run_session(command, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("epoch")]
    assert len(lines) == 2
    for line in lines:
        counts = line.split("batches per rank [")[1].split("]")[0].split(", ")
        assert len(counts) == world_size and len(set(counts)) == 1 and int(counts[0]) > 0


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling policies")
def test_run_session_starts_its_command_under_the_normal_scheduling_policy():
    """Ranks that busy-wait under a real-time policy can hold every core: the
    command's session starts under SCHED_OTHER whatever the caller runs under."""
    with scheduling_kept():
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
        except PermissionError:
            pytest.skip("this user may not take a real-time policy")
        assert os.sched_getscheduler(0) == os.SCHED_FIFO
        probe = "import os; print(os.sched_getscheduler(0), os.sched_getparam(0).sched_priority)"
        result = run_session([sys.executable, "-c", probe], timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(os.SCHED_OTHER), "0"]
    assert os.sched_getscheduler(0) != os.SCHED_FIFO  # restored
