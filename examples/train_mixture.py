"""Train one policy on two datasets of different schemas, mixed by weight.

    python examples/train_mixture.py LEROBOT_DIR RLDS_DIR [--steps N] [--size 64] [--device cuda]

A LeRobot v3 dataset (its camera "observation.images.top", its
"observation.state" and "action") and an RLDS one ("observation/image",
"observation/state", "action") are loaded with their frames resized to one
size and kept as JPEG, then mixed 60/40 under one schema: "image",
"state", "action". Their state and action widths differ: the batch pads
them to the widest, and "state_mask" and "action_mask" say which
dimensions are real, so the loss counts only those. Each store is
normalised with its own statistics.
"""

import argparse

import torch
from torch import nn

from robocache.data import Mixture, WindowSampler, load_lerobot, load_rlds

LEROBOT_KEYS = {"observation.images.top": "image", "observation.state": "state"}
RLDS_KEYS = {"observation/image": "image", "observation/state": "state"}


class MixedPolicy(nn.Module):
    """(image, state) -> an action chunk of the widest action."""

    def __init__(self, image_shape, state_dim, action_dim, chunk, hidden=128):
        super().__init__()
        self.chunk, self.action_dim = chunk, action_dim
        channels = image_shape[0]
        self.vision = nn.Sequential(
            nn.Conv2d(channels, 16, 3, stride=2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
        )
        self.head = nn.Sequential(
            nn.Linear(16 + state_dim, hidden), nn.ReLU(), nn.Linear(hidden, chunk * action_dim)
        )

    def forward(self, image, state):
        features = torch.cat([self.vision(image), state], dim=1)
        return self.head(features).view(-1, self.chunk, self.action_dim)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lerobot", help="a LeRobot v3 dataset directory")
    parser.add_argument("rlds", help="an RLDS dataset directory (its version folder)")
    parser.add_argument("--rlds-fps", type=float, default=10, help="the RLDS set's rate")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--size", type=int, default=64, help="frames resized to size x size")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)

    frames = dict(frames="jpeg", resize=(args.size, args.size), progress=False)
    lerobot = load_lerobot(args.lerobot, **frames)
    rlds = load_rlds(args.rlds, fps=args.rlds_fps, **frames)
    mixture = Mixture([(lerobot, 0.6, LEROBOT_KEYS), (rlds, 0.4, RLDS_KEYS)])
    print(mixture)
    fps = lerobot.fps or 10
    sampler = WindowSampler(
        mixture,
        {"image": [0.0], "state": [0.0], "action": [k / fps for k in range(8)]},
        batch_size=args.batch_size,
        device=args.device,
        images="float_chw",
        normalize={"state": "mean_std", "action": "mean_std"},
    )
    batch = sampler.batch_at_step(0)
    policy = MixedPolicy(
        batch["image"].shape[2:], batch["state"].shape[-1], batch["action"].shape[-1], 8
    ).to(args.device)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    step = 0
    while step < args.steps:
        for batch in sampler:
            pred = policy(batch["image"][:, 0], batch["state"][:, 0])
            real = (~batch["action_is_pad"]).unsqueeze(-1) & batch["action_mask"].unsqueeze(1)
            loss = ((pred - batch["action"]) ** 2 * real).sum() / real.sum().clamp(min=1)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
            if step % 10 == 0 or step == args.steps:
                drawn = torch.bincount(batch["dataset_index"], minlength=2).tolist()
                print(f"step {step}: loss {loss.item():.4f}, windows per dataset {drawn}")
            if step == args.steps:
                break
        sampler.set_epoch(sampler.epoch + 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
