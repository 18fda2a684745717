"""Where should the data live? A policy trained from one store placed on the
GPU, in pinned host memory, or mapped from its file (warm: in the page
cache; cold: its pages dropped first), against the same step with a batch
already on the GPU.

    python -m benchmark.tiers [--policy small,resnet,resnet18|both] [--tiers gpu,pinned,mapped-warm,mapped-cold]
        [--frames raw,jpeg] [--episodes 40] [--episode-frames 200] [--json PATH] [--png PATH]
        [--small --device cpu]

Policies: ``small`` (two 96x96 cameras, B = 64, a small CNN), ``resnet``
(two 224x224 cameras, B = 128, a ResNet-18 a camera and a temporal U-Net:
benchmark/e2e_policies.DiffusionLike) and ``resnet18`` (the same cameras
and batch, one ResNet-18 shared by the cameras and a linear head).
Windows: 2 frames of each camera and of the state, a 16-step action chunk,
at 10 Hz. ``--frames jpeg`` adds the
tiers of a store whose frames are kept as JPEG (quality 90), decoded by the
sampler's default decoder (on the GPU where the extra robocache[nvimgcodec]
is installed).

For each (policy, tier): the step with a staged batch (the ideal), the step
fed by the sampler and their ratio (the loader efficiency: the median ratio of
alternated staged and fed blocks), windows/s of the
sampler alone, its GB/s against a pinned-to-device copy (the roofline of
reads from host memory), its frames/s against the disk's random-read rate (a
probe of the store file at the frame size, pages dropped; ``ratio``), and the
GPU and host memory used. Run from the checkout's root; ``--small --device cpu`` is a smoke run.
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import robocache
from benchmark.e2e_measure import data_path_alone, host_memory_bytes, sampler_batches, timed
from benchmark.e2e_policies import DiffusionLike, ResNet18Policy, SmallPolicy
from robocache.bench.timing import per_batch_seconds
from robocache.data import EpisodeStore, WindowSampler
from robocache.data.frames import FrameDecoding

FPS = 10
CAMERAS = ["observation.images.cam0", "observation.images.cam1"]
DELTAS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-1 / FPS, 0.0],
    **{cam: [-1 / FPS, 0.0] for cam in CAMERAS},
}
POLICIES = {
    "small": (96, 64, SmallPolicy),
    "resnet": (224, 128, DiffusionLike),
    "resnet18": (224, 128, ResNet18Policy),
}
TIERS = ("gpu", "pinned", "mapped-warm", "mapped-cold")
PLACEMENT = {
    "gpu": "cuda",
    "pinned": {"observation.images.*": "pinned", "*": "cuda"},
    "mapped-warm": {"observation.images.*": "mapped", "*": "cuda"},
    "mapped-cold": {"observation.images.*": "mapped", "*": "cuda"},
    "cpu": "cpu",
}


def write_store(folder, episodes, frames, size, say, form="raw"):
    """A store of camera-like frames (smooth, different in every frame),
    kept raw or as JPEG (``form``)."""
    say(f"writing a store of {episodes} episodes x {frames} {form} frames of {size}x{size} ...")
    y, x = torch.meshgrid(torch.arange(size), torch.arange(size), indexing="ij")
    ramp = (x + 2 * y).to(torch.int32)

    def episode(e):
        t = torch.arange(frames) * (10**9 // FPS)
        shift = torch.arange(frames).view(-1, 1, 1, 1) * 3 + e
        image = ((ramp.view(1, size, size, 1) + shift + torch.tensor([0, 40, 80])) % 256).to(
            torch.uint8
        )
        return {
            "action": (torch.randn(frames, 7), t),
            "observation.state": (torch.randn(frames, 14), t),
            **{cam: (image, t) for cam in CAMERAS},
        }

    store = EpisodeStore.from_episodes(
        (episode(e) for e in range(episodes)), total=episodes, fps=FPS, progress=False,
        frames=form,
    )  # fmt: skip
    store.save(folder)
    return store.nbytes


def drop_pages(path):
    """The file's pages out of the page cache (written back, then
    posix_fadvise DONTNEED; pages a process has mapped in stay)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def disk_probe(path, block, reads=2000, threads=16):
    """Random reads of ``block`` bytes a second from the file, pages dropped."""
    from concurrent.futures import ThreadPoolExecutor

    size = os.path.getsize(path)
    drop_pages(path)
    fd = os.open(path, os.O_RDONLY)
    rng = random.Random(0)
    offsets = [rng.randrange(0, max(1, size - block)) for _ in range(reads)]
    start = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda o: os.pread(fd, block, o), offsets))
    seconds = time.perf_counter() - start
    os.close(fd)
    return reads / seconds


def pinned_copy_gbps(nbytes, device):
    """The pinned-host-to-device copy rate: the roofline of reads from host memory."""
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return nbytes / per_batch_seconds(lambda: dst.copy_(src, non_blocking=True), device, 10) / 1e9


def gather_vs_copy(folder, batch_size, device):
    """The image windows of one batch cut from pinned values by the kernel
    (anchor_windows, every camera, one launch), in GB/s, against a copy of as
    many bytes from pinned memory to the device: (kernel GB/s, copy GB/s)."""
    store = EpisodeStore.load(folder, placement={"observation.images.*": "pinned", "*": "cuda"})
    streams = [store[cam] for cam in CAMERAS]
    deltas = [torch.tensor([round(d * 1e9) for d in DELTAS[cam]], device=device) for cam in CAMERAS]
    anchor = streams[0]
    index = torch.randperm(anchor.num_samples, device=device)[:batch_size]

    def cut():
        return robocache.anchor_windows(
            [s.values for s in streams], [s.times for s in streams],
            [s.offsets for s in streams], deltas, anchor.offsets, anchor.times, index,
        )[0]  # fmt: skip

    nbytes = sum(o.numel() * o.element_size() for o in cut())
    kernel_s = per_batch_seconds(cut, device, 20)
    src = torch.empty(nbytes, dtype=torch.uint8).pin_memory()
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    copy_s = per_batch_seconds(lambda: dst.copy_(src, non_blocking=True), device, 20)
    return nbytes / kernel_s / 1e9, nbytes / copy_s / 1e9


def sampler_decoders(store, batch_size, device):
    """Each encoded key's decoder, as the sampler's defaults choose it."""
    return WindowSampler(store, DELTAS, batch_size=batch_size, device=device).decoders


def measure(args, folder, tier, policy_name, device, say, form="raw"):
    size, batch_size, policy = POLICIES[policy_name]
    if args.small:
        batch_size = 4
    placement = PLACEMENT[tier]
    if device.type == "cpu" and tier.startswith("mapped"):
        placement = {"observation.images.*": "mapped", "*": "cpu"}
    store = EpisodeStore.load(folder, placement=placement, verify=args.verify)
    if tier == "mapped-cold":
        drop_pages(os.path.join(folder, "store.safetensors"))
    kw = {"width": 8} if args.small and policy is not SmallPolicy else {}
    model = policy(CAMERAS, state_dim=14, **kw).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batch):
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            loss = model(batch)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    def batches():
        sampler = WindowSampler(
            store, DELTAS, batch_size=batch_size, images="float_chw", device=device, seed=1,
            prefetch=args.prefetch, decoding=FrameDecoding(
                hardware_share=args.hardware_share, host_share=args.host_share
            ),
        )  # fmt: skip
        return sampler_batches(sampler)

    staged = next(batches())
    staged = {k: v.clone() for k, v in staged.items()}

    def repeat():
        while True:
            yield staged

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    timed(step, repeat(), device, args.warmup, args.steps, repeats=1)
    name = f"{policy_name} / {tier}" + (f" / {form}" if form != "raw" else "")
    say(f"{name}: the sampler alone ...")
    stream = batches()
    alone = data_path_alone(stream, device, batch_size, args.steps, budget_s=args.budget)
    say(f"{name}: training steps ...")
    timed(step, stream, device, args.warmup, args.steps, repeats=1)
    # A host-bound step drifts over a run: staged and fed blocks alternate,
    # and the efficiency is the median of each pair's ratio.
    share = args.budget / (2 * args.blocks)
    pairs = []
    for _ in range(args.blocks):
        staged_s, _ = timed(step, repeat(), device, 0, args.steps, 1, share)
        fed_s, wait_s = timed(step, stream, device, 0, args.steps, 1, share)
        pairs.append((staged_s, fed_s, wait_s))
    ideal = statistics.median(p[0] for p in pairs)
    real = statistics.median(p[1] for p in pairs)
    wait = statistics.median(p[2] for p in pairs)
    efficiency = statistics.median(p[0] / p[1] for p in pairs)
    frame_bytes = size * size * 3
    read = batch_size * len(CAMERAS) * len(DELTAS[CAMERAS[0]]) * frame_bytes
    row = {
        "policy": policy_name,
        "tier": tier,
        "frames": form,
        "batch_size": batch_size,
        "ideal_step_s": ideal,
        "step_s": real,
        "efficiency": efficiency,
        "prefetch": args.prefetch,
        "decoders": sampler_decoders(store, batch_size, device),
        "wait_s": wait,
        "windows_per_s": alone,
        "frames_GBps": alone / batch_size * read / 1e9,
        "host_bytes": host_memory_bytes(),
        "placement": store.placement,
    }
    if device.type == "cuda":
        row["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(device)
    if device.type == "cuda" and tier == "pinned" and form == "raw":
        row["pinned_gather_GBps"], row["pinned_copy_GBps"] = gather_vs_copy(
            folder, batch_size, device
        )
        say(
            f"{policy_name} / pinned: the kernel gathers the frames at "
            f"{row['pinned_gather_GBps']:.1f} GB/s, a copy of as many bytes runs at "
            f"{row['pinned_copy_GBps']:.1f} GB/s"
        )
    say(
        f"{name}: efficiency {row['efficiency']:.3f} "
        f"({real * 1e3:.1f} ms a step, {ideal * 1e3:.1f} ms staged), {alone:.0f} windows/s"
    )
    return row


def plot(rows, meta, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib (pip install robocache[bench]): no plot", file=sys.stderr)
        return
    labels = [f"{r['policy']} / {r['tier']} / {r['frames']}" for r in rows]
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(rows) + 1.5))
    ax.barh(labels, [r["efficiency"] for r in rows])
    ax.axvline(0.97, color="k", lw=0.8, ls="--")
    ax.invert_yaxis()
    ax.set_xlabel("loader efficiency (staged step / step)")
    ax.set_title(f"{meta['device']}, torch {meta['torch']}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.tiers",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--policy", default="both", help="small, resnet, resnet18, comma-separated, or both"
    )
    parser.add_argument("--tiers", default=",".join(TIERS))
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--episode-frames", type=int, default=200, help="frames an episode")
    parser.add_argument(
        "--frames", default="raw", help="raw, jpeg or raw,jpeg: how frames are kept"
    )
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--budget", type=float, default=30.0, help="seconds a timing may take")
    parser.add_argument(
        "--blocks", type=int, default=7, help="staged and fed blocks of --steps, alternated"
    )
    parser.add_argument(
        "--prefetch", type=int, help="the sampler's prefetch (default: the sampler's own)"
    )
    parser.add_argument(
        "--hardware-share", type=float,
        help="JPEG rows: the share of each batch the GPU decoder gives its hardware engines",
    )  # fmt: skip
    parser.add_argument(
        "--host-share", type=float,
        help="JPEG rows: the share of each batch the GPU decoder decodes on the host's cores",
    )  # fmt: skip
    parser.add_argument(
        "--verify", action="store_true",
        help="load with verify=True: each episode's values checked by the sampler's first read",
    )  # fmt: skip
    parser.add_argument("--data", help="keep the stores here")
    parser.add_argument("--small", action="store_true", help="a smoke run")
    parser.add_argument("--json")
    parser.add_argument("--png")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    tiers = [t for t in args.tiers.split(",") if t]
    unknown = [t for t in tiers if t not in (*TIERS, "cpu")]
    if unknown:
        parser.error(f"--tiers: unknown {unknown}; the tiers are {', '.join(TIERS)} (and cpu)")
    if device.type != "cuda" and any(t in ("gpu", "pinned") for t in tiers):
        parser.error("--tiers gpu and pinned need a CUDA device; on the CPU: cpu,mapped-warm")
    forms = [f for f in args.frames.split(",") if f]
    if not forms or any(f not in ("raw", "jpeg") for f in forms):
        parser.error(f"--frames: raw, jpeg or raw,jpeg; got {args.frames!r}")
    if args.small:
        args.episodes, args.episode_frames, args.warmup, args.steps = 3, 12, 1, 2
        args.budget = min(args.budget, 5.0)
    policies = ["small", "resnet"] if args.policy == "both" else args.policy.split(",")
    if any(p not in POLICIES for p in policies):
        parser.error(
            f"--policy: {', '.join(POLICIES)} (comma-separated) or both; got {args.policy!r}"
        )
    began = time.perf_counter()

    def say(line):
        print(f"[{time.perf_counter() - began:5.0f} s] {line}", file=sys.stderr, flush=True)

    rows, probes = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.data or tmp)
        for policy_name in policies:
            size = 32 if args.small else POLICIES[policy_name][0]
            for form in forms:
                folder = base / f"tiers-{args.episodes}x{args.episode_frames}-{size}-{form}"
                if not (folder / "store.safetensors").exists():
                    write_store(folder, args.episodes, args.episode_frames, size, say, form)
                path = str(folder / "store.safetensors")
                if policy_name not in probes:
                    probes[policy_name] = disk_probe(path, size * size * 3,
                                                     200 if args.small else 2000)  # fmt: skip
                for tier in tiers:
                    rows.append(measure(args, folder, tier, policy_name, device, say, form))
                    rows[-1]["disk_reads_per_s"] = probes[policy_name]
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "episodes": args.episodes,
        "episode_frames": args.episode_frames,
    }
    if device.type == "cuda":
        meta["pinned_copy_GBps"] = pinned_copy_gbps(256 << 20, device)
    print(f"{meta['device']}, torch {meta['torch']}; pinned copy "
          f"{meta.get('pinned_copy_GBps', float('nan')):.1f} GB/s")  # fmt: skip
    print(f"{'policy':8} {'tier':12} {'frames':6} {'staged ms':>10} {'step ms':>9} {'effic.':>7} "
          f"{'windows/s':>10} {'GB/s':>7} {'frames/s':>9} {'disk reads/s':>13} {'ratio':>6}")  # fmt: skip
    for r in rows:
        frames = r["windows_per_s"] * len(CAMERAS) * len(DELTAS[CAMERAS[0]])
        print(
            f"{r['policy']:8} {r['tier']:12} {r['frames']:6} {r['ideal_step_s'] * 1e3:10.2f} "
            f"{r['step_s'] * 1e3:9.2f} {r['efficiency']:7.3f} {r['windows_per_s']:10.0f} "
            f"{r['frames_GBps']:7.2f} {frames:9.0f} {r['disk_reads_per_s']:13.0f} "
            f"{frames / r['disk_reads_per_s']:6.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
    if args.png:
        plot(rows, meta, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
