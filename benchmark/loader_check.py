"""A second measure of loader efficiency, made apart from benchmark/tiers.py,
so that a fault in either shows as a disagreement between them: other frames
(smooth noise that moves, not ramps), other policies (torchvision's ResNet-18
shared by the cameras, or a three-layer CNN a camera), other timing (the
synchronized wall time of blocks of steps).

    python -m benchmark.loader_check [--policy small|resnet18] [--tiers pinned,mapped-warm,mapped-cold]
        [--frames raw,jpeg] [--host-share X] [--blocks 7] [--steps 30] [--busy] [--data PATH]
        [--json PATH] [--small --device cpu]

Policies: ``small`` (two 96x96 cameras, B = 64) and ``resnet18`` (two
224x224 cameras, B = 128). Windows: 2 frames of each camera and of the
state, a 16-step action chunk, at 10 Hz. The sampler's defaults but
``images="float_chw"`` (and ``--host-share``, the GPU decoder's host share,
for JPEG frames). For each tier and frame form: blocks of ``--steps`` steps on
one staged batch and blocks fed by the sampler, alternated; the efficiency is
the median of each pair's ratio (staged / fed). Each row also gives the
host's time in the sampler's ``next`` a fed step, each fed block's slowest
call, and with ``--busy`` the GPU's busy fraction over a staged and a fed
block (the CUDA kernels' time in ``torch.profiler``). Tiers: ``pinned``,
``mapped-warm``, ``mapped-cold`` (the store file's pages dropped first),
``gpu`` and ``cpu`` (host memory, not pinned); on the CPU, all but ``gpu`` and
``pinned``. Run from the checkout's root.
"""

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

import torch
from torch import nn

from benchmark.e2e_measure import busy_fraction, sampler_batches
from benchmark.tiers import drop_pages
from robocache.data import EpisodeStore, WindowSampler
from robocache.data.frames import FrameDecoding

FPS = 10
CAMERAS = ["observation.images.left", "observation.images.right"]
DELTAS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-1 / FPS, 0.0],
    **{camera: [-1 / FPS, 0.0] for camera in CAMERAS},
}
POLICIES = {"small": (96, 64), "resnet18": (224, 128)}
PLACES = {
    "gpu": "cuda", "pinned": "pinned", "mapped-warm": "mapped", "mapped-cold": "mapped", "cpu": "cpu",
}  # fmt: skip


def moving_noise(frames, size, seed):
    """(frames, size, size, 3) uint8: smooth colour noise that drifts a few
    pixels a frame, with grain, as a camera's frames might."""
    generator = torch.Generator().manual_seed(seed)
    coarse = torch.rand(1, 3, max(1, size // 8), max(1, size // 8), generator=generator)
    base = nn.functional.interpolate(coarse, size=(size, size), mode="bicubic")
    shifts = [(t % size, (2 * t) % size) for t in range(frames)]
    video = torch.cat([torch.roll(base, shift, dims=(2, 3)) for shift in shifts])
    video = video + 0.04 * torch.randn(video.shape, generator=generator)
    return (video.clamp(0, 1) * 255).to(torch.uint8).permute(0, 2, 3, 1).contiguous()


def write_store(folder, episodes, frames, size, form):
    def episode(e):
        times = torch.arange(frames) * (10**9 // FPS)
        cameras = {c: (moving_noise(frames, size, 2 * e + i), times) for i, c in enumerate(CAMERAS)}
        return {
            "action": (torch.randn(frames, 7), times),
            "observation.state": (torch.randn(frames, 14), times),
            **cameras,
        }

    store = EpisodeStore.from_episodes(
        (episode(e) for e in range(episodes)), total=episodes, fps=FPS, progress=False, frames=form
    )
    store.save(folder)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()

        def encoder():
            return nn.Sequential(
                nn.Conv2d(3, 32, 5, 2, 2), nn.ReLU(), nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(),
                nn.Conv2d(64, 64, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            )  # fmt: skip

        self.encoders = nn.ModuleList(encoder() for _ in CAMERAS)
        self.head = nn.Sequential(nn.Linear(2 * 2 * 64 + 28, 256), nn.ReLU(), nn.Linear(256, 112))

    def forward(self, batch):
        n = batch["action"].shape[0]
        features = [e(batch[c].flatten(0, 1)).view(n, -1) for e, c in zip(self.encoders, CAMERAS)]
        x = torch.cat([*features, batch["observation.state"].flatten(1)], 1)
        return nn.functional.mse_loss(self.head(x), batch["action"].flatten(1))


class SharedResNet18(nn.Module):
    def __init__(self):
        super().__init__()
        import torchvision

        self.encoder = torchvision.models.resnet18(num_classes=256)
        self.head = nn.Linear(2 * 2 * 256 + 28, 112)

    def forward(self, batch):
        n = batch["action"].shape[0]
        images = torch.cat([batch[c].flatten(0, 1) for c in CAMERAS])
        features = self.encoder(images).view(len(CAMERAS), n, -1).transpose(0, 1).flatten(1)
        x = torch.cat([features, batch["observation.state"].flatten(1)], 1)
        return nn.functional.mse_loss(self.head(x), batch["action"].flatten(1))


def wall_per_step(step, next_batch, steps, device):
    """(the synchronized wall time a step, the host's time in ``next_batch``
    a step, its slowest call) over ``steps`` steps."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    asking, slowest = 0.0, 0.0
    start = time.perf_counter()
    for _ in range(steps):
        asked = time.perf_counter()
        batch = next_batch()
        took = time.perf_counter() - asked
        asking, slowest = asking + took, max(slowest, took)
        step(batch)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - start) / steps, asking / steps, slowest


def check(args, folder, tier, form, device):
    size, batch_size = POLICIES[args.policy]
    if args.small:
        batch_size = 4
    rest = "cuda" if device.type == "cuda" else "cpu"
    store = EpisodeStore.load(folder, placement={"observation.images.*": PLACES[tier], "*": rest})
    if tier == "mapped-cold":
        drop_pages(os.path.join(folder, "store.safetensors"))
    model = (SmallCNN() if args.policy == "small" else SharedResNet18()).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    decoding = FrameDecoding(host_share=args.host_share)
    sampler = WindowSampler(
        store, DELTAS, batch_size=batch_size, images="float_chw", device=device, seed=5,
        decoding=decoding,
    )  # fmt: skip
    fed = sampler_batches(sampler)  # epoch after epoch
    staged = {k: v.clone() for k, v in next(fed).items()}
    warmup = 2 if args.small else 10
    wall_per_step(step, lambda: staged, warmup, device)
    wall_per_step(step, lambda: next(fed), warmup, device)
    pairs, asks = [], []
    for _ in range(args.blocks):
        staged_s = wall_per_step(step, lambda: staged, args.steps, device)[0]
        fed_s, next_s, slowest_s = wall_per_step(step, lambda: next(fed), args.steps, device)
        pairs.append((staged_s, fed_s))
        asks.append((next_s, slowest_s))
    busy = {}
    if args.busy:  # profiled apart from the blocks timed
        busy = {
            "busy_staged": busy_fraction(step, itertools.repeat(staged), device, args.steps),
            "busy_fed": busy_fraction(step, fed, device, args.steps),
        }
    row = {
        "policy": args.policy,
        "tier": tier,
        "frames": form,
        "host_share": args.host_share,
        "efficiency": statistics.median(s / f for s, f in pairs),
        "block_efficiencies": [s / f for s, f in pairs],
        "staged_step_s": statistics.median(s for s, _ in pairs),
        "step_s": statistics.median(f for _, f in pairs),
        "next_s": statistics.median(n for n, _ in asks),
        "block_slowest_next_s": [s for _, s in asks],
        **busy,
        "decoders": sampler.decoders,
    }
    blocks = " ".join(f"{e:.3f}" for e in row["block_efficiencies"])
    slowest = " ".join(f"{s * 1e3:.2f}" for s in row["block_slowest_next_s"])
    said = "".join(
        f", GPU busy {busy[f'busy_{block}']:.2f} {block}"
        for block in ("staged", "fed")
        if busy.get(f"busy_{block}") is not None
    )
    print(
        f"{args.policy} / {tier} / {form}: efficiency {row['efficiency']:.3f} (blocks {blocks}); "
        f"{row['step_s'] * 1e3:.2f} ms a step, {row['staged_step_s'] * 1e3:.2f} ms staged; "
        f"next() {row['next_s'] * 1e6:.0f} us a step (slowest a block, ms: {slowest}){said}",
        flush=True,
    )
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.loader_check",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--policy", default="small", choices=sorted(POLICIES))
    parser.add_argument("--tiers", default="pinned")
    parser.add_argument("--frames", default="raw,jpeg", help="raw, jpeg or raw,jpeg")
    parser.add_argument("--host-share", type=float, help="JPEG: the GPU decoder's host share")
    parser.add_argument("--blocks", type=int, default=7, help="staged and fed blocks, alternated")
    parser.add_argument("--steps", type=int, default=30, help="steps a block")
    parser.add_argument("--episodes", type=int, default=30)
    parser.add_argument("--episode-frames", type=int, default=150)
    parser.add_argument("--busy", action="store_true",
                        help="the GPU's busy fraction over a staged and a fed block (profiled)")  # fmt: skip
    parser.add_argument("--data", help="keep the stores here")
    parser.add_argument("--json")
    parser.add_argument("--small", action="store_true", help="a smoke run")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tiers = [t for t in args.tiers.split(",") if t]
    allowed = [t for t in PLACES if device.type == "cuda" or PLACES[t] not in ("cuda", "pinned")]
    if not tiers or any(t not in allowed for t in tiers):
        parser.error(f"--tiers: on {device.type}, of {', '.join(allowed)}; got {args.tiers!r}")
    forms = [f for f in args.frames.split(",") if f]
    if not forms or any(f not in ("raw", "jpeg") for f in forms):
        parser.error(f"--frames: raw, jpeg or raw,jpeg; got {args.frames!r}")
    if args.blocks < 1 or args.steps < 1:
        parser.error(f"--blocks and --steps must be >= 1; got {args.blocks} and {args.steps}")
    if args.small:  # a run of more batches than an epoch
        args.episodes, args.episode_frames, args.blocks, args.steps = 3, 12, 2, 5
    size = 32 if args.small else POLICIES[args.policy][0]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{name}, torch {torch.__version__}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for form in forms:
            folder = os.path.join(args.data or tmp, f"check-{args.episodes}x{args.episode_frames}"
                                  f"-{size}-{form}")  # fmt: skip
            if not os.path.exists(os.path.join(folder, "store.safetensors")):
                write_store(folder, args.episodes, args.episode_frames, size, form)
            rows += [check(args, folder, tier, form, device) for tier in tiers]
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": name, "torch": torch.__version__, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
