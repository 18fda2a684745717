"""Train a small policy from a LeRobot v3 dataset directory, windows cut on the GPU.

    python examples/train_from_lerobot.py /path/to/dataset [--cache DIR] [--steps N] [--device cuda]

The first run loads the dataset (tables with pyarrow, videos with PyAV) and
caches the packed store; later runs map the cache. Each batch is a
WindowSampler call: a 16-step action chunk to predict from 2 steps of every
other feature, normalised with the store's statistics.
"""

import argparse
import os

import torch
from torch import nn

from robocache.data import EpisodeStore, WindowSampler, load_lerobot


def open_store(root, cache):
    if cache and os.path.exists(os.path.join(cache, "store.safetensors")):
        return EpisodeStore.load(cache)
    store = load_lerobot(root)
    if cache:
        store.save(cache)
    return store


class ChunkPolicy(nn.Module):
    """Observations (flattened) -> an action chunk."""

    def __init__(self, obs_dim, action_dim, chunk, hidden=256):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        self.net = nn.Sequential(
            nn.Linear(obs_dim, hidden), nn.ReLU(), nn.Linear(hidden, chunk * action_dim)
        )

    def forward(self, obs):
        return self.net(obs).view(-1, self.chunk, self.action_dim)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", help="a LeRobot v3 dataset directory")
    parser.add_argument("--cache", help="where to keep the packed store")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    store = open_store(args.root, args.cache).to(args.device)
    fps = store.fps or 10
    observations = [k for k in store.keys() if k != "action"]
    deltas = {k: [-1 / fps, 0.0] for k in observations}
    deltas["action"] = [k / fps for k in range(16)]
    sampler = WindowSampler(
        store,
        deltas,
        batch_size=args.batch_size,
        drop_last=False,
        images="float",
        normalize={k: "mean_std" for k in deltas if store[k].values.dtype != torch.uint8},
    )
    batch = sampler.batch_at(torch.arange(1, device=args.device))
    obs_dim = sum(batch[k][0].numel() for k in observations)
    action_dim = batch["action"].shape[-1]
    policy = ChunkPolicy(obs_dim, action_dim, len(deltas["action"])).to(args.device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)

    step = 0
    while step < args.steps:
        for batch in sampler:
            obs = torch.cat([batch[k].flatten(1) for k in observations], dim=1)
            pred = policy(obs)
            valid = (~batch["action_is_pad"]).unsqueeze(-1)
            loss = ((pred - batch["action"]) ** 2 * valid).sum() / valid.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0 or step == args.steps:
                print(f"step {step}: loss {loss.item():.4f}")
            if step == args.steps:
                break
        sampler.set_epoch(sampler.epoch + 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
