"""What a WindowSampler batch costs the host, for each path a batch can take.

Part of ``python -m benchmark.sampler`` (its first table). For each option
that changes how a batch is made (CUDA graphs, prefetch on a side stream, a
packed or per-store mixture, augmentation, keys pinned, mapped or stored
as JPEG), a loop draws batches as a training loop does (the last batch held
in a variable) and reports, per batch, the process's CPU time (every thread
of it: the read-ahead's and the decoder's too) and the wall time, each the
median of several rounds. Where a batch needs nothing back from the GPU,
the GPU is first kept busy (``torch.cuda._sleep``), so that the host never
waits on it and the numbers are the host's own; elsewhere (host-to-device
copies from pageable memory wait for the stream) the loop runs as it
would.
"""

import statistics
import tempfile
import time

import torch

from benchmark.e2e_measure import sampler_batches
from robocache.data import Augment, EpisodeStore, Mixture, WindowSampler

FPS = 30
CAMERAS = ["observation.images.cam0", "observation.images.cam1"]
DELTAS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-1 / FPS, 0.0],
    **{cam: [-1 / FPS, 0.0] for cam in CAMERAS},
}


def _store(episodes, length, size, seed=0, **kw):
    g = torch.Generator().manual_seed(seed)

    def episode():
        t = torch.arange(length, dtype=torch.int64) * round(1e9 / FPS)
        ep = {
            "action": (torch.randn(length, 7, generator=g), t),
            "observation.state": (torch.randn(length, 14, generator=g), t),
        }
        for cam in CAMERAS:
            shape = (length, size, size, 3)
            ep[cam] = (torch.randint(0, 256, shape, generator=g, dtype=torch.uint8), t)
        return ep

    return EpisodeStore.from_episodes(
        (episode() for _ in range(episodes)), total=episodes, fps=FPS, progress=False, **kw
    )


def host_seconds(sampler, batches, rounds, device, busy):
    """(process CPU s, wall s) a batch: the medians over ``rounds`` loops of
    ``batches`` batches, after a warm-up that captures any graphs."""
    it = sampler_batches(sampler)
    batch = None
    for _ in range(4):
        batch = next(it)
    cpu, wall = [], []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            if busy:  # long enough for every batch of the round to be queued behind it
                torch.cuda._sleep(int(5e7))
        c0, t0 = time.process_time(), time.perf_counter()
        for _ in range(batches):
            batch = next(it)
        c1, t1 = time.process_time(), time.perf_counter()
        cpu.append((c1 - c0) / batches)
        wall.append((t1 - t0) / batches)
    del batch
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(cpu), statistics.median(wall)


def _cases(device, small, folder):
    """(name, make sampler(batch_size), whether every key is cut on the GPU)."""
    # Epochs of over 100 batches of 256, so that an epoch's start weighs as in training.
    episodes, frames = (4, 40) if small else (96, 300)
    size = 16 if small else 96
    raw = _store(episodes, frames, size)
    raw.save(f"{folder}/raw")
    jpeg = _store(max(1, episodes // 8), frames, size, frames="jpeg")
    jpeg.save(f"{folder}/jpeg")
    cameras = {cam: "mapped" for cam in CAMERAS}
    cases = []
    if device.type == "cuda":
        gpu = raw.to(device)
        pinned = raw.place({"observation.images.*": "pinned", "*": "cuda"})
        aug = {cam: Augment(crop_size=size - size // 8, brightness=0.2) for cam in CAMERAS}
        mix = [(gpu, 0.5), (_store(episodes, frames, size, seed=1).to(device), 0.5)]
        cases += [
            ("store on the GPU: defaults", lambda B: WindowSampler(gpu, DELTAS, batch_size=B), True),
            ("  prefetch=1", lambda B: WindowSampler(gpu, DELTAS, batch_size=B, prefetch=1), True),
            ("  cuda_graph=False", lambda B: WindowSampler(gpu, DELTAS, batch_size=B, cuda_graph=False), True),
            ("  cuda_graph=False, prefetch=1", lambda B: WindowSampler(gpu, DELTAS, batch_size=B, cuda_graph=False, prefetch=1), True),
            ("  augment", lambda B: WindowSampler(gpu, DELTAS, batch_size=B, augment=aug), True),
            ("images pinned: defaults", lambda B: WindowSampler(pinned, DELTAS, batch_size=B), True),
            ("  prefetch=0", lambda B: WindowSampler(pinned, DELTAS, batch_size=B, prefetch=0), True),
            ("mixture of 2 on the GPU: defaults (packed)", lambda B: WindowSampler(Mixture(mix), DELTAS, batch_size=B), True),
            ("  pack=False", lambda B: WindowSampler(Mixture(mix, pack=False), DELTAS, batch_size=B), False),
        ]  # fmt: skip
        index = {"*": "cuda"}
    else:
        index = {"*": "cpu"}
        cases.append(
            ("store on the host: defaults", lambda B: WindowSampler(raw, DELTAS, batch_size=B), False)
        )  # fmt: skip

    def mapped(B, read_ahead=2):
        store = EpisodeStore.load(f"{folder}/raw", placement={**cameras, **index}, verify=False)
        return WindowSampler(store, DELTAS, batch_size=B, device=device, read_ahead=read_ahead)

    def encoded(B):
        store = EpisodeStore.load(f"{folder}/jpeg", placement={"*": "cpu"}, verify=False)
        return WindowSampler(store, DELTAS, batch_size=B, device=device)

    cases += [
        ("images mapped: defaults (read ahead)", mapped, False),
        ("  read_ahead=0", lambda B: mapped(B, 0), False),
        ("images JPEG (host decode): defaults", encoded, False),
    ]
    return cases


def run(device, batch_sizes, small, say=print):
    """Rows of (case, B, CPU us, wall us); printed as they come."""
    rows = []
    batches, rounds = (5, 3) if small else (50, 5)
    say(
        f"\nHost time a batch (process CPU time / wall, us; medians of {rounds} x {batches} batches)"
    )
    say(f"  {'case':44s}" + "".join(f"{'B = ' + str(B):>22s}" for B in batch_sizes))
    with tempfile.TemporaryDirectory() as folder:
        for name, make, busy in _cases(device, small, folder):
            line = f"  {name:44s}"
            for B in batch_sizes:
                if "JPEG" in name and B > 64 and not small:
                    line += f"{'-':>22s}"  # a host decode of B x 4 frames: its own benchmark
                    continue
                cpu, wall = host_seconds(make(B), batches, rounds, device, busy)
                rows.append(
                    {"case": name.strip(), "B": B, "cpu_us": cpu * 1e6, "wall_us": wall * 1e6}
                )
                line += f"{cpu * 1e6:>11.1f} /{wall * 1e6:>9.1f}"
            say(line)
    return rows
