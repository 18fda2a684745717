"""Data-parallel training with the WindowSampler under torchrun and DDP.

    python examples/train_policy.py --make-store DIR          # a small synthetic store
    torchrun --nproc_per_node=2 examples/train_policy.py DIR [--epochs N] [--replicate]

Each rank loads its shard of a saved store (whole episodes, balanced by
frames; ``--replicate``: the whole store, the epoch's permutation split),
cuts windows on its own device, and trains a small chunk policy wrapped in
DistributedDataParallel (NCCL on GPUs, gloo on CPUs). Every rank draws the
same number of batches an epoch; rank 0 prints each rank's count and the loss.
"""

import argparse
import gc
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from robocache.data import EpisodeStore, WindowSampler

FPS = 10


def make_store(directory, episodes=24, seed=0):
    """Episodes of 20 to 80 frames: a 14-dim state and a 7-dim action."""
    gen = torch.Generator().manual_seed(seed)

    def episode(e):
        n = int(torch.randint(20, 81, (), generator=gen))
        t = torch.arange(n, dtype=torch.int64) * (10**9 // FPS)
        state = torch.randn(n, 14, generator=gen).cumsum(0) * 0.1
        action = torch.tanh(state[:, :7]) + 0.05 * torch.randn(n, 7, generator=gen)
        return {"observation.state": (state, t), "action": (action, t), "task": f"task {e % 3}"}

    store = EpisodeStore.from_episodes((episode(e) for e in range(episodes)), fps=FPS)
    store.save(directory)


class ChunkPolicy(nn.Module):
    def __init__(self, obs_dim, action_dim, chunk, hidden=128):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, chunk * action_dim)
        )

    def forward(self, obs):
        return self.net(obs).view(-1, self.chunk, self.action_dim)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("store", nargs="?", help="a directory written by EpisodeStore.save")
    parser.add_argument("--make-store", metavar="DIR", help="write a small synthetic store, exit")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--replicate", action="store_true", help="every rank holds the store")
    args = parser.parse_args(argv)
    if args.make_store:
        make_store(args.make_store)
        return 0
    if not args.store:
        parser.error("give a store directory (or --make-store DIR)")

    torch.manual_seed(0)
    distributed = "RANK" in os.environ  # started by torchrun
    if distributed:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        dist.init_process_group(backend)
        rank, world_size = dist.get_rank(), dist.get_world_size()
    else:
        rank, world_size = 0, 1
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")

    train(args, rank, world_size, device, distributed)
    if distributed:
        # Only now, with the DDP model (whose reducer holds the process group)
        # gone and collected: gloo can hang a rank at exit otherwise.
        gc.collect()
        dist.barrier()  # no rank tears down while another still talks to it
        dist.destroy_process_group()
        # torch 2.6's gloo can leave a thread spinning through interpreter
        # finalization (seen in CI: both ranks at full CPU, no Python frame
        # left); the work is done and flushed, so the rank ends here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def train(args, rank, world_size, device, distributed):
    """The epochs of training, rank 0 printing each epoch's batch counts and loss."""
    shard = None if args.replicate or world_size == 1 else (rank, world_size)
    store = EpisodeStore.load(args.store, device=device, shard=shard)
    deltas = {"observation.state": [-1 / FPS, 0.0], "action": [k / FPS for k in range(8)]}
    sampler = WindowSampler(
        store,
        deltas,
        batch_size=args.batch_size,
        seed=0,
        normalize={"observation.state": "mean_std", "action": "mean_std"},
    )  # rank and world_size from torch.distributed
    policy = ChunkPolicy(2 * 14, 7, len(deltas["action"])).to(device)
    if distributed:
        policy = nn.parallel.DistributedDataParallel(
            policy, device_ids=[device.index] if device.type == "cuda" else None
        )
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        batches, total = 0, torch.zeros((), device=device)
        for batch in sampler:
            pred = policy(batch["observation.state"].flatten(1))
            valid = (~batch["action_is_pad"]).unsqueeze(-1)
            loss = ((pred - batch["action"]) ** 2 * valid).sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            batches += 1
            total += loss.detach()
        counts = torch.tensor([batches], device=device)
        if distributed:
            gathered = [torch.zeros_like(counts) for _ in range(world_size)]
            dist.all_gather(gathered, counts)
            dist.all_reduce(total)
            counts = torch.cat(gathered)
        if rank == 0:
            mean = total.item() / max(1, batches * world_size)
            print(f"epoch {epoch}: batches per rank {counts.tolist()}, mean loss {mean:.4f}")


if __name__ == "__main__":
    raise SystemExit(main())
