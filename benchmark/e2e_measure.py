"""How benchmark/e2e.py measures a pipeline: the step time next to a staged
step, the host's wait, the GPU's busy fraction (torch.profiler) and NVML
utilisation, the data path alone, host memory (PSS); the ranks under
torchrun; and the report (markdown, PNG)."""

import gc
import os
import statistics
import sys
import threading
import time
from pathlib import Path

import torch

from robocache.bench.timing import sync


class Utilisation:
    """NVML GPU utilisation sampled every 50 ms, where pynvml is present."""

    def __init__(self, device):
        self.samples, self.stop = [], threading.Event()
        self.handle = None
        if device.type == "cuda":
            try:
                import pynvml

                pynvml.nvmlInit()
                self.handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
                self.nvml = pynvml
            except Exception:  # no NVML here: the column stays empty
                self.handle = None

    def __enter__(self):
        if self.handle is not None:
            self.thread = threading.Thread(target=self._run, daemon=True)
            self.thread.start()
        return self

    def _run(self):
        while not self.stop.wait(0.05):
            self.samples.append(self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu)

    def __exit__(self, *exc):
        self.stop.set()
        if self.handle is not None:
            self.thread.join()

    def mean(self):
        return statistics.mean(self.samples) if self.samples else None


def busy_fraction(step, batches, device, steps):
    """Union of the CUDA kernels' time over the wall time of `steps` steps."""
    if device.type != "cuda":
        return None
    # CUDA activity only: recording every CPU op would slow a host-bound step.
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(steps):
            step(next(batches))
        torch.cuda.synchronize(device)
        wall = time.perf_counter() - start
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA
    )
    busy, end = 0.0, -1.0
    for a, b in spans:  # microseconds
        if a > end:
            busy += b - a
            end = b
        elif b > end:
            busy += b - end
            end = b
    return min(1.0, busy * 1e-6 / wall)


def sampler_batches(sampler):
    """A sampler's batches, epoch after epoch, without end."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from sampler
        epoch += 1


def timed(step, batches, device, warmup, steps, repeats=3, budget_s=float("inf")):
    """The step time and the host's wait for the next batch, each the median
    over `repeats` runs of the mean over `steps` steps; a run stops early
    (after 3 steps at least) once it has taken its share of `budget_s`."""
    for _ in range(warmup):
        step(next(batches))
    times, waits = [], []
    for _ in range(repeats):
        sync(device)
        wait, done = 0.0, 0
        start = time.perf_counter()
        while done < steps and (done < 3 or time.perf_counter() - start < budget_s / repeats):
            asked = time.perf_counter()
            batch = next(batches)
            wait += time.perf_counter() - asked
            step(batch)
            done += 1
        sync(device)
        times.append((time.perf_counter() - start) / done)
        waits.append(wait / done)
    return statistics.median(times), statistics.median(waits)


def against_staged(step, batches, staged_block, before, device, args, interleave):
    """The pipeline's step time and wait, and the staged step's time measured
    around it: the loader efficiency is their ratio. A host-bound step drifts
    by several percent over a run, so the staged step is timed next to each
    pipeline: interleaved with it (staged, pipeline, staged, ...) where the
    pipeline works only when asked (robocache, or a DataLoader without
    workers); before and after it where workers run ahead, since a staged
    block in between would let them fill their queue and flatter the next
    block. `before` is the staged step timed before the pipeline started
    (its workers not yet running). Returns (step_s, wait_s, staged_step_s)."""
    staged = [before]
    if interleave:
        runs = []
        share = args.budget / (2 * args.blocks)
        for _ in range(args.blocks):
            runs.append(timed(step, batches, device, args.warmup, args.steps, 1, share))
            staged.append(staged_block())
        seconds = statistics.median(r[0] for r in runs)
        wait = statistics.median(r[1] for r in runs)
    else:
        seconds, wait = timed(
            step, batches, device, args.warmup, args.steps, budget_s=args.budget / 2
        )
        staged.append(staged_block())
    return seconds, wait, statistics.median(staged)


def nvml_utilisation(step, batches, device, steps):
    """NVML's utilisation over `steps` steps of their own: its polling
    thread takes driver time, so it never runs while steps are timed."""
    with Utilisation(device) as nvml:
        for _ in range(steps):
            step(next(batches))
        sync(device)
    return nvml.mean()


def data_path_alone(batches, device, batch_size, steps, workers=0, budget_s=float("inf")):
    """Samples/s of the pipeline with no training step: batches on the GPU,
    as fast as the pipeline gives them. A DataLoader's `workers` start
    together, so their first batches arrive together: the rate is taken
    over the batches after the first wave, until `steps` of them have come
    or `budget_s` has passed (3 batches at least)."""
    skip = max(workers, 1)
    for _ in range(skip):
        next(batches)
    sync(device)
    start, done = time.perf_counter(), 0
    while done < steps and (done < 3 or time.perf_counter() - start < budget_s):
        next(batches)
        done += 1
    sync(device)
    return done * batch_size / (time.perf_counter() - start)


def host_memory_bytes():
    """Proportional set size of this process and its children (the loader's
    workers): shared pages count once, split between their sharers. None
    where /proc has no smaps_rollup."""

    def pss(pid):
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
        except OSError:
            return None
        return None

    def children(pid):
        out = []
        for task in Path(f"/proc/{pid}/task").glob("*"):
            try:
                out += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
        return out

    pending, total = [os.getpid()], 0
    while pending:
        pid = pending.pop()
        size = pss(pid)
        if size is None:
            if pid == os.getpid():
                return None
            continue  # a worker that exited meanwhile
        total += size
        pending += children(pid)
    return total


class Ranks:
    """torch.distributed under torchrun (NCCL on GPUs, gloo on CPUs), else one rank."""

    def __init__(self, device):
        import torch.distributed as dist

        self.dist = dist
        self.world_size, self.rank = 1, 0
        self.device = torch.device(device)
        if "RANK" in os.environ:
            cuda = self.device.type == "cuda"
            dist.init_process_group("nccl" if cuda else "gloo")
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            if cuda:
                self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
                torch.cuda.set_device(self.device)
        elif self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", 0)

    def barrier(self):
        if self.world_size > 1:
            self.dist.barrier()

    def gather(self, value):
        if self.world_size == 1:
            return [value]
        out = [None] * self.world_size
        self.dist.all_gather_object(out, value)
        return out

    def broadcast(self, value):
        if self.world_size == 1:
            return value
        box = [value]
        self.dist.broadcast_object_list(box, src=0)
        return box[0]

    def close(self):
        # Nothing may still hold the process group (DDP's reducer does) when
        # it is destroyed: gloo aborts the process at exit otherwise.
        gc.collect()
        if self.world_size > 1:
            self.dist.barrier()
            self.dist.destroy_process_group()


def markdown(rows, meta):
    def pct(x):
        return "-" if x is None else f"{100 * x:.0f}%"

    def gib(x):
        return "-" if x is None else f"{x / 2**30:.2f}"

    lines = [
        f"{meta['world_size']} x {meta['device']}, torch {meta['torch']}, policy {meta['policy']}"
        f"{' (compiled)' if meta['compiled'] else ''}, B = {meta['batch_size']}, "
        + (
            f"{meta['episodes']} episodes of {meta['frames']} frames, 2 cameras "
            f"{meta['size']}x{meta['size']} {meta['codec']}; "
            if meta.get("dataset", "lerobot") == "lerobot"
            else f"{meta['episodes']} MCAP logs of {meta['frames'] / 10:g} s: joints 500 Hz, "
            f"wrench 1 kHz, camera 30 Hz {meta['size']}x{meta['size']} JPEG; "
        )
        + f"ingest {meta['ingest_s']:.1f} s, "
        f"store {gib(meta['store_bytes'])} GiB",
        "",
        "| pipeline | step (ms) | staged step beside it (ms) | loader efficiency | samples/s "
        "| wait (ms) | GPU busy | NVML util | data path alone (samples/s) | host (GiB) "
        "| GPU peak (GiB) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        util, alone = r.get("nvml_util"), r.get("data_path_samples_per_s")
        lines.append(
            f"| {r['pipeline']} | {r['step_s'] * 1e3:.2f} | {r['staged_step_s'] * 1e3:.2f} | "
            f"{r['efficiency']:.2f} | {r['samples_per_s']:.0f} | {r['wait_s'] * 1e3:.2f} | "
            f"{pct(r.get('busy'))} | {'-' if util is None else f'{util:.0f}%'} | "
            f"{'-' if alone is None else f'{alone:.0f}'} | {gib(r.get('host_bytes'))} | "
            f"{gib(r.get('gpu_peak_bytes'))} |"
        )
    ours = next((r for r in rows if r["pipeline"].startswith("robocache")), None)
    theirs = [r for r in rows if r["pipeline"].startswith(("lerobot-like", "lerobot,"))]
    if ours and theirs:
        best = max(theirs, key=lambda r: r["data_path_samples_per_s"])
        ratio = ours["data_path_samples_per_s"] / best["data_path_samples_per_s"]
        lines += [
            "",
            f"Data path alone: robocache gives {ratio:.0f}x the samples/s of the best "
            f"LeRobot loader ({best['pipeline']}).",
        ]
    return "\n".join(lines) + "\n"


def plot(rows, meta, path):
    """Step time, split into the step with a staged batch and the rest."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: no plot", file=sys.stderr)
        return
    names = [r["pipeline"] for r in rows]
    compute = [r["staged_step_s"] * 1e3 for r in rows]
    data = [max(0.0, r["step_s"] * 1e3 - c) for r, c in zip(rows, compute)]
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(rows) + 1.5))
    ax.barh(names, compute, label="the step with a batch already on the GPU")
    ax.barh(names, data, left=compute, label="waiting for data")
    ax.invert_yaxis()
    ax.set_xlabel("ms per step")
    ax.set_title(f"{meta['device']}: policy {meta['policy']}, B = {meta['batch_size']}")
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
