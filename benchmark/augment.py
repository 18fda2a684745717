"""Per-window augmentation on the GPU against torchvision's v2 transforms per
sample, and what it costs a ResNet-18 two-camera policy's step.

    python -m benchmark.augment [--device cuda] [--batch 128] [--json PATH] [--small]
    python -m benchmark.augment --device cpu --batch 32 --size 96 --workers ""

A store of two 224 x 224 cameras on the device; windows of 2 frames;
``Augment(crop_size=224, crop_scale=(0.8, 1), brightness=0.3, contrast=0.4,
saturation=0.5, hue=0.08)`` (Diffusion Policy's jitter) on both cameras.
Reported, medians of repeats:
- the augmentation of a batch (the draws and one op call per camera), and
  the same windows through torchvision v2 per sample: on the device in this
  process, and on the host in DataLoader workers (4, 8, 16 by default);
- the resized crop alone (no jitter) of one camera's frames, float output:
  the op, the op with a rotation (``degrees=5``), and a plain-PyTorch loop
  over the windows (crop, antialiased ``interpolate``, to float), on the
  device; the second command above is 64 frames of 96 x 96 on the host;
- the policy's step (forward, backward, optimiser) on a batch made ahead
  (ideal), and fed by the sampler with and without augmentation; their
  ratio is the loader efficiency.
"""

import argparse
import json
import statistics
import sys
import time

import torch

from benchmark.e2e_policies import DiffusionLike
from robocache.bench.timing import per_batch_seconds, sync
from robocache.data import Augment, EpisodeStore, WindowSampler
from robocache.data.augment import augment_generator
from robocache.ops import augment as augment_op

CAMERAS = ("observation.images.top", "observation.images.wrist")
JITTER = dict(brightness=0.3, contrast=0.4, saturation=0.5, hue=0.08)
DELTAS = {CAMERAS[0]: [-0.1, 0.0], CAMERAS[1]: [-0.1, 0.0], "observation.state": [-0.1, 0.0]}
DELTAS["action"] = [k / 10 for k in range(16)]


def make_store(episodes, frames, size, device):
    g = torch.Generator().manual_seed(0)

    def episode(e):
        t = torch.arange(frames) * 10**8
        ep = {"observation.state": (torch.randn(frames, 14, generator=g), t)}
        ep["action"] = (torch.randn(frames, 7, generator=g), t)
        for cam in CAMERAS:
            x = torch.randint(0, 256, (frames, 3, size // 4, size // 4), generator=g).float()
            x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear")
            ep[cam] = (x.round().to(torch.uint8).permute(0, 2, 3, 1).contiguous(), t)
        return ep

    return EpisodeStore.from_episodes(
        (episode(e) for e in range(episodes)), total=episodes, progress=False
    ).to(device)


def torchvision_transform(size):
    from torchvision.transforms import v2

    return v2.Compose(
        [v2.RandomResizedCrop(size, scale=(0.8, 1.0), antialias=True), v2.ColorJitter(**JITTER)]
    )


class _Windows(torch.utils.data.Dataset):
    """The windows' frames on the host, augmented per sample (each camera's
    window as one (F, C, H, W) tensor, its frames alike)."""

    def __init__(self, frames, size):
        self.frames, self.size, self.transform = frames, size, None

    def __len__(self):
        return self.frames[0].shape[0]

    def __getitem__(self, i):
        if self.transform is None:
            self.transform = torchvision_transform(self.size)
        return [self.transform(f[i]) for f in self.frames]


def dataloader_ms(frames, size, batch, workers, batches):
    """ms a batch of torchvision v2 per sample in ``workers`` DataLoader workers."""
    loader = torch.utils.data.DataLoader(
        _Windows(frames, size), batch_size=batch, num_workers=workers, persistent_workers=True,
        prefetch_factor=4, sampler=torch.utils.data.RandomSampler(_Windows(frames, size), True, 10**9),
    )  # fmt: skip
    it = iter(loader)
    for _ in range(2 * workers):  # every worker started and warm
        next(it)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(batches):
            next(it)
        times.append((time.perf_counter() - start) / batches)
    del it, loader
    return statistics.median(times) * 1e3


def crop_rows(frames, size, device, batches):
    """The resized crop alone of (B, F, size, size, C) frames, to float
    (B, F, C, size, size): the op, the op with a rotation, and a plain-PyTorch
    loop over the windows fed the same draws."""
    B, F = frames.shape[:2]
    rows, boxes = [], None
    for name, kwargs in (("", {}), (", degrees=5", dict(degrees=5))):
        aug = Augment(crop_size=size, crop_scale=(0.8, 1.0), **kwargs)
        params = aug.draw(B, size, size, augment_generator(0, 0, 0, "crop"))
        boxes = boxes or [[int(v) for v in row[:4]] for row in params.tolist()]
        params = params.to(device)
        ms = per_batch_seconds(
            lambda: augment_op(frames, params, size, "float_chw"), device, batches
        )
        rows.append({"what": f"resized crop{name}, robocache, {B * F} frames", "ms": ms * 1e3})

    def plain_loop():
        out = []
        for b, (top, left, h, w) in enumerate(boxes):
            crop = frames[b, :, top : top + h, left : left + w].permute(0, 3, 1, 2).float()
            resized = torch.nn.functional.interpolate(
                crop, size=(size, size), mode="bilinear", align_corners=False, antialias=True
            )
            out.append(resized.div_(255))
        return torch.stack(out)

    ms = per_batch_seconds(plain_loop, device, batches)
    rows.append(
        {
            "what": f"resized crop, plain PyTorch loop on {device.type}, {B * F} frames",
            "ms": ms * 1e3,
        }
    )
    return rows


def step_ms(policy, optimiser, batches, device, steps):
    """ms a policy step (forward, backward, optimiser), fed by ``batches``."""

    def step(batch):
        optimiser.zero_grad(set_to_none=True)
        policy.loss(batch).backward()
        optimiser.step()

    for _ in range(3):
        step(next(batches))
    sync(device)
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        sync(device)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times) * 1e3


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmark.augment", description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--workers", default="4,8,16")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="a smoke run")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.small:
        args.batch, args.size, args.workers, args.steps = 4, 32, "", 2
    device = torch.device(args.device)
    store = make_store(8 if args.small else 40, 30 if args.small else 100, args.size, device)
    aug = Augment(crop_size=args.size, crop_scale=(0.8, 1.0), **JITTER)
    forms = {cam: "float_chw" for cam in CAMERAS}
    plain = WindowSampler(store, DELTAS, batch_size=args.batch, images=forms, device=device)
    augmented = WindowSampler(
        store, DELTAS, batch_size=args.batch, images=forms, device=device,
        augment={cam: aug for cam in CAMERAS}, prefetch=1,
    )  # fmt: skip
    raw = WindowSampler(store, DELTAS, batch_size=args.batch, device=device)
    index = torch.randint(raw.num_anchors, (args.batch,), device=device)
    windows = raw.batch_at(index)
    frames = [windows[cam] for cam in CAMERAS]  # (B, 2, H, W, 3) uint8
    meta = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    meta.update(torch=torch.__version__, batch=args.batch, size=args.size, frames_per_window=2)
    meta["threads"] = torch.get_num_threads()
    rows = []
    steps = iter(range(10**9))
    size = aug.output_size(args.size, args.size)

    def ours():
        """What the sampler does a batch: each camera's draws on the host, and the op."""
        out = []
        step = next(steps)
        for cam, f in zip(CAMERAS, frames):
            g = augment_generator(0, step, 0, cam)
            params = aug.draw(args.batch, args.size, args.size, g)
            if device.type == "cuda":
                params = params.pin_memory().to(device, non_blocking=True)
            out.append(augment_op(f, params, size, "float_chw"))
        return out

    rows.append({"what": "augment, robocache", "ms": per_batch_seconds(ours, device, 20) * 1e3})
    rows += crop_rows(frames[0], size[0], device, 20)
    try:
        transform = torchvision_transform(args.size)
    except ImportError:
        transform = None
    if transform is not None:
        chw = [f.permute(0, 1, 4, 2, 3).contiguous() for f in frames]

        def per_sample():
            return [torch.stack([transform(f[b]) for b in range(args.batch)]) for f in chw]

        rows.append(
            {"what": f"augment, torchvision v2 per sample on {device.type}",
             "ms": per_batch_seconds(per_sample, device, 2 if args.small else 5, repeats=3) * 1e3}
        )  # fmt: skip
        host = [f.cpu() for f in chw]
        for w in [int(w) for w in args.workers.split(",") if w]:
            ms = dataloader_ms(host, args.size, args.batch, w, 10)
            rows.append(
                {"what": f"augment, torchvision v2 per sample, {w} DataLoader workers", "ms": ms}
            )
    if device.type == "cuda":
        width = 8 if args.small else 64
        policy = DiffusionLike(CAMERAS, state_dim=14, action_dim=7, width=width).to(device)
        optimiser = torch.optim.AdamW(policy.parameters(), lr=1e-4)
        staged = plain.batch_at(index)
        ideal = step_ms(policy, optimiser, iter(lambda: staged, None), device, args.steps)
        rows.append({"what": "policy step, a batch made ahead (ideal)", "ms": ideal})

        def endless(sampler):
            while True:
                yield from sampler

        for name, sampler in (("without augmentation", plain), ("with augmentation", augmented)):
            fed = step_ms(policy, optimiser, endless(sampler), device, args.steps)
            rows.append({"what": f"policy step fed by the sampler, {name}", "ms": fed,
                         "efficiency": ideal / fed})  # fmt: skip
        rows.append({"what": "augmentation / ideal step", "fraction": rows[0]["ms"] / ideal})
    for row in rows:
        value = f"{row['ms']:9.3f} ms" if "ms" in row else f"{row['fraction']:9.3f}   "
        extra = f"  efficiency {row['efficiency']:.3f}" if "efficiency" in row else ""
        print(f"{row['what']:<62} {value}{extra}")
    print(
        f"({meta['device']}, {meta['threads']} threads, torch {meta['torch']}, B = {args.batch}, "
        f"two cameras, {args.size}^2)"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
