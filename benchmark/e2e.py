"""End to end: what the data path costs a training step, per pipeline, on the same data and model.

    python benchmark/e2e.py [--dataset lerobot|mcap] [--policy dp|small] [--codec av1|h264]
        [--compile] [--batch-size 64] [--workers 4,8,16] [--steps 30] [--budget 60]
        [--json PATH] [--md PATH] [--png PATH] [--small]
    torchrun --nproc_per_node=2 benchmark/e2e.py --data DIR [...]

Under torchrun (NCCL on GPUs, gloo on CPUs) rank 0 writes and loads the
dataset and saves the store in DIR; every rank maps its own shard of it,
trains the policy under DistributedDataParallel with batches of
--batch-size, and only the robocache pipeline runs; rank 0 reports every
rank's step time and loader efficiency, and the samples/s of all ranks.

Data (--dataset mcap: the multi-rate robot logs of e2e_mcap.py instead): a
LeRobot v3 dataset written first by the tests' writer (pyarrow and
PyAV, encoded as LeRobot encodes): 200 episodes, two 96x96 cameras, a 14-dim
state and a 7-dim action at 10 Hz. Windows: 2 steps of each camera and of
the state, a 16-step action chunk.

Pipelines (same data, same model, same run):
  lerobot-like  a per-sample Dataset doing what LeRobotDataset does, restated
                here (it needs no lerobot): delta_timestamps
                windows from the in-memory tables, each camera's frames
                decoded per sample with PyAV (open, seek, decode forward), as
                float CHW, behind a DataLoader (pinned memory, persistent
                workers, prefetch 4);
  lerobot       the lerobot package's own LeRobotDataset (its pyav backend)
                with the same windows, behind the same DataLoader; measured
                after the others (importing lerobot adds to this process's
                memory), and only where lerobot imports (skipped, saying
                why, elsewhere);
  ram           every decoded frame in host RAM, per-sample windows behind
                the same DataLoader (robomimic's and Diffusion Policy's
                cache-in-RAM path); uint8 frames made float on the GPU;
  robocache     the store cached on the GPU, WindowSampler(images="float_chw").

Metrics:
  step time          the median of the timed runs' mean step;
  loader efficiency  the step time with one batch already on the GPU, timed
                     next to each pipeline (see against_staged), / the step
                     time with the pipeline;
  wait               the host's time blocked on the next batch, a step;
  GPU busy           the union of kernel time over the wall time of profiled
                     steps (torch.profiler);
  NVML util          where pynvml is present, over steps of its own (its
                     polling slows a host-bound step); not the claim;
  data path alone    samples/s of the pipeline with no training step;
  host               the proportional set size (PSS) of this process and the
                     loader's workers (the store's host copy, loaded once, is
                     part of every row);
  GPU peak           the peak allocated while the pipeline ran (the model, its
                     optimiser, and for robocache the store).
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import av
import numpy as np
import pyarrow.parquet as pq
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))

import e2e_mcap  # noqa: E402
from e2e_policies import DiffusionLike, SmallPolicy  # noqa: E402
from sampler import _Frames, sync  # noqa: E402
from test_lerobot_loader import FPS, write_lerobot  # noqa: E402

from robocache.data import EpisodeStore, WindowSampler, load_lerobot, load_mcap  # noqa: E402

CAMERAS = ["observation.images.cam0", "observation.images.cam1"]
DELTAS = {
    "action": [k / FPS for k in range(16)],
    "observation.state": [-1 / FPS, 0.0],
    **{cam: [-1 / FPS, 0.0] for cam in CAMERAS},
}


class PerSampleLeRobot(torch.utils.data.Dataset):
    """LeRobotDataset's per-sample path, restated: tables in memory, each
    camera's frames decoded for every sample (PyAV: open, seek to the
    keyframe before the first frame, decode forward), float32 CHW."""

    def __init__(self, root):
        info = json.loads((Path(root) / "meta/info.json").read_text())
        table = pq.read_table(Path(root) / "data/chunk-000/file-000.parquet")
        self.state = np.stack(table.column("observation.state").to_numpy(zero_copy_only=False))
        self.action = np.stack(table.column("action").to_numpy(zero_copy_only=False))
        self.episode = table.column("episode_index").to_numpy()
        episodes = pq.read_table(next(Path(root).glob("meta/episodes/chunk-*/*.parquet")))
        self.start = np.asarray(episodes.column("dataset_from_index").to_pylist())
        self.end = np.asarray(episodes.column("dataset_to_index").to_pylist())
        self.video_start = {
            cam: episodes.column(f"videos/{cam}/from_timestamp").to_pylist() for cam in CAMERAS
        }
        self.videos = {
            cam: str(
                Path(root) / info["video_path"].format(video_key=cam, chunk_index=0, file_index=0)
            )
            for cam in CAMERAS
        }

    def __len__(self):
        return len(self.episode)

    def _rows(self, i, deltas):
        e = self.episode[i]
        rows = np.array([i + round(d * FPS) for d in deltas])
        pad = (rows < self.start[e]) | (rows >= self.end[e])
        return np.clip(rows, self.start[e], self.end[e] - 1), torch.from_numpy(pad)

    def _decode(self, path, times):
        frames = {}
        with av.open(path) as container:
            stream = container.streams.video[0]
            container.seek(int(min(times) / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                for t in times:
                    if t not in frames and abs(frame.time - t) < 1e-4:
                        frames[t] = frame.to_ndarray(format="rgb24")
                if len(frames) == len(set(times)) or frame.time > max(times) + 1e-4:
                    break
        images = torch.from_numpy(np.stack([frames[t] for t in times]))
        return images.permute(0, 3, 1, 2).float().div(255)

    def __getitem__(self, i):
        item = {}
        for key, source in (("action", self.action), ("observation.state", self.state)):
            rows, pad = self._rows(i, DELTAS[key])
            item[key], item[f"{key}_is_pad"] = torch.from_numpy(source[rows]), pad
        e = self.episode[i]
        for cam in CAMERAS:
            rows, pad = self._rows(i, DELTAS[cam])
            times = [self.video_start[cam][e] + (r - self.start[e]) / FPS for r in rows]
            item[cam], item[f"{cam}_is_pad"] = self._decode(self.videos[cam], times), pad
        return item


class RealLeRobot(torch.utils.data.Dataset):
    """The lerobot package's own LeRobotDataset on `root`: the same windows,
    decoded by its pyav backend; each item cut to the keys PerSampleLeRobot
    gives (the policy's), since the rest (the task string among them) does
    not batch onto the GPU."""

    def __init__(self, root):
        from lerobot.datasets.lerobot_dataset import LeRobotDataset

        self.dataset = LeRobotDataset(
            "local/e2e", root=root, delta_timestamps=DELTAS, video_backend="pyav"
        )
        self.keys = [*DELTAS, *(f"{key}_is_pad" for key in DELTAS)]

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        item = self.dataset[i]
        return {key: item[key] for key in self.keys}


def why_lerobot_does_not_import():
    """None where lerobot's LeRobotDataset imports, else the error's last
    line. Tried in a child process: importing it here would add its modules
    (some 200 MB) to the host memory of every pipeline measured after."""
    child = subprocess.run(
        [sys.executable, "-c", "import lerobot.datasets.lerobot_dataset"],
        capture_output=True,
        text=True,
    )
    return None if child.returncode == 0 else (child.stderr.strip().splitlines() or ["?"])[-1]


def build_store(args, root, say):
    """Writes the dataset into `root` unless it is there, and loads it:
    (store, seconds the load took)."""
    if args.dataset == "lerobot":
        if not (root / "meta/info.json").exists():
            say(f"writing the LeRobot dataset {root} ...")
            write_lerobot(
                root,
                lengths=(args.frames,) * args.episodes,
                codec="libsvtav1" if args.codec == "av1" else "libx264",
                size=(args.size, args.size),
                cameras=("cam0", "cam1"),
                state_dim=14,
                action_dim=7,
            )
        load = lambda: load_lerobot(root, progress=False)  # noqa: E731
    else:
        paths = sorted(root.glob("*.mcap"))
        if len(paths) != args.episodes:
            say(f"writing {args.episodes} MCAP logs in {root} ...")
            paths = e2e_mcap.write_bags(root, args.episodes, args.frames / FPS, args.size)
        load = lambda: load_mcap(paths, e2e_mcap.TOPICS, progress=False)  # noqa: E731
    say("loading it into a store ...")
    start = time.perf_counter()
    store = load()
    return store, time.perf_counter() - start


def loader_batches(dataset, workers, batch_size, device, uint8_cameras=(), adapt=None):
    """Batches of `dataset` behind a DataLoader, moved to `device`; the
    `uint8_cameras` keys (B, S, H, W, C) uint8 made (B, S, C, H, W) float
    there, then `adapt` applied."""
    loader = torch.utils.data.DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        prefetch_factor=4 if workers > 0 else None,
        drop_last=True,
    )
    while True:
        for batch in loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            for cam in uint8_cameras:
                batch[cam] = batch[cam].permute(0, 1, 4, 2, 3).float().div_(255)
            yield adapt(batch) if adapt else batch


def sampler_batches(sampler):
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from sampler
        epoch += 1


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


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dataset",
        choices=["lerobot", "mcap"],
        default="lerobot",
        help="lerobot: the LeRobot v3 dataset; mcap: the multi-rate robot logs (e2e_mcap.py)",
    )
    parser.add_argument("--policy", choices=["dp", "small"], default="dp")
    parser.add_argument("--codec", choices=["av1", "h264"], default="av1")
    parser.add_argument("--compile", action="store_true", help="torch.compile the policy")
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="the robocache pipeline replays its batches from CUDA graphs (cuda_graph=True)",
    )
    parser.add_argument("--episodes", type=int, help="default: 200 (lerobot), 40 (mcap)")
    parser.add_argument(
        "--frames", type=int, default=100, help="frames an episode at 10 Hz (its length)"
    )
    parser.add_argument("--size", type=int, default=96)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--workers", default="4,8,16")
    parser.add_argument("--pipelines", default="lerobot-like,lerobot,ram,robocache")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30, help="timed steps, three times")
    parser.add_argument(
        "--blocks",
        type=int,
        default=3,
        help="blocks of --steps timed steps, each next to a staged block, for the pipelines "
        "that work only when asked (robocache); more narrow the drift of a host-bound step",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=60.0,
        help="seconds a pipeline may take to measure (slow ones run fewer steps)",
    )
    parser.add_argument("--data", help="keep the dataset here (needed under torchrun)")
    parser.add_argument("--small", action="store_true", help="a smoke run")
    parser.add_argument("--json")
    parser.add_argument("--md")
    parser.add_argument("--png")
    args = parser.parse_args(argv)
    if args.episodes is None:
        args.episodes = 200 if args.dataset == "lerobot" else 40
    if args.small:
        args.episodes, args.frames, args.size, args.batch_size = 6, 20, 64, 4
        args.warmup, args.steps = 1, 2
    ranks = Ranks(args.device)
    result = run(args, ranks, parser)
    ranks.close()  # after run's locals (a DDP model among them) are gone
    return result


def run(args, ranks, parser):
    """Every pipeline measured on this rank; rank 0 reports."""
    device = ranks.device
    if args.cuda_graph and device.type != "cuda":
        parser.error("--cuda-graph needs a CUDA device")
    if args.blocks < 1:
        parser.error(f"--blocks must be >= 1; got {args.blocks}")
    if ranks.world_size > 1 and not args.data:
        parser.error("under torchrun, give --data (a directory every rank reads)")
    if ranks.world_size > 1:  # DDP: every rank takes the same steps, so no time budget
        args.budget = float("inf")
    workers = [int(w) for w in args.workers.split(",") if w != ""]
    pipelines = ["robocache"] if ranks.world_size > 1 else args.pipelines.split(",")
    torch.manual_seed(0)

    def say(line):
        if ranks.rank == 0:
            print(f"[{time.perf_counter() - began:5.0f} s] {line}", file=sys.stderr, flush=True)

    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(args.data or tmp)
        if args.dataset == "lerobot":
            root = base / f"lerobot-{args.codec}-{args.episodes}x{args.frames}-{args.size}"
        else:
            root = base / f"mcap-{args.episodes}x{args.frames}-{args.size}"
        cache = base / f"{root.name}-store"
        if ranks.rank == 0:
            store, ingest_s = build_store(args, root, say)
            store.save(cache)
        ranks.barrier()
        if ranks.world_size > 1:  # each rank maps its own episodes of the saved store
            store = EpisodeStore.load(cache, shard=(ranks.rank, ranks.world_size))
        ingest_s = ranks.broadcast(ingest_s if ranks.rank == 0 else 0.0)

        mcap = args.dataset == "mcap"
        cameras = e2e_mcap.POLICY_CAMERAS if mcap else CAMERAS
        deltas = e2e_mcap.DELTAS if mcap else DELTAS
        adapt = e2e_mcap.policy_batch if mcap else None
        policy = DiffusionLike if args.policy == "dp" else SmallPolicy
        state_dim = e2e_mcap.STATE_DIM if mcap else 14
        model = policy(cameras, state_dim=state_dim).to(device)
        if ranks.world_size > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        forward = torch.compile(model) if args.compile else model

        def step(batch):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                loss = forward(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        def make_sampler(cuda_graph=False):
            return WindowSampler(
                store.to(device), deltas, batch_size=args.batch_size, images="float_chw",
                drop_last=True, anchor=e2e_mcap.CAMERA if mcap else None, cuda_graph=cuda_graph,
            )  # fmt: skip

        def robocache_batches():
            batches = sampler_batches(make_sampler(cuda_graph=args.cuda_graph))
            return (adapt(b) for b in batches) if adapt else batches

        staged = make_sampler().batch_at(torch.arange(args.batch_size, device=device))
        staged = adapt(staged) if adapt else staged
        staged = {k: v.clone() for k, v in staged.items()}

        def repeat():
            while True:
                yield staged

        say("the step with a batch already on the GPU ...")
        timed(step, repeat(), device, args.warmup, args.steps)  # warms the allocator and caches
        staged_blocks = []

        def staged_block():
            seconds, _ = timed(step, repeat(), device, 2, args.steps, repeats=1)
            staged_blocks.append(seconds)
            return seconds

        rows = [{"pipeline": "batch already on the GPU", "wait_s": 0.0}]
        rows[0]["busy"] = busy_fraction(step, repeat(), device, args.steps)
        cases = []
        if "robocache" in pipelines:
            name = "robocache, cuda_graph" if args.cuda_graph else "robocache"
            cases.append((name, 0, robocache_batches))
        for w in workers:
            if "lerobot-like" in pipelines and not mcap:  # LeRobot has no multi-rate streams
                cases.append(
                    (
                        f"lerobot-like, {w} workers",
                        w,
                        lambda w=w: loader_batches(
                            PerSampleLeRobot(root), w, args.batch_size, device
                        ),
                    )
                )
            if "ram" in pipelines:
                cases.append(
                    (
                        f"ram, {w} workers",
                        w,
                        lambda w=w: loader_batches(
                            e2e_mcap.PerSampleMultiRate(store)
                            if mcap
                            else _Frames(store, DELTAS, FPS),
                            w,
                            args.batch_size,
                            device,
                            [e2e_mcap.CAMERA] if mcap else CAMERAS,
                            adapt,
                        ),  # fmt: skip
                    )
                )
        # The lerobot pipeline comes last: its first case imports lerobot into
        # this process, for good.
        if "lerobot" in pipelines and not mcap:
            why_not = why_lerobot_does_not_import()
            if why_not:
                say(f"lerobot pipeline skipped: lerobot does not import ({why_not})")
            else:
                cases += [
                    (
                        f"lerobot, {w} workers",
                        w,
                        lambda w=w: loader_batches(RealLeRobot(root), w, args.batch_size, device),
                    )
                    for w in workers
                ]
        for name, case_workers, make in cases:
            if device.type == "cuda":
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats(device)
            before = staged_block()
            say(f"{name}: the data path alone ...")
            batches = make()
            alone = data_path_alone(
                batches, device, args.batch_size, 3 * args.steps, case_workers, args.budget / 3
            )
            say(f"{name}: {alone:.0f} samples/s alone; training steps ...")
            seconds, wait, staged_s = against_staged(
                step, batches, staged_block, before, device, args, interleave=case_workers == 0
            )
            row = {"pipeline": name, "step_s": seconds, "wait_s": wait, "staged_step_s": staged_s}
            row["data_path_samples_per_s"] = alone
            profiled = (
                args.steps
                if math.isinf(args.budget)
                else max(3, min(args.steps, int(args.budget / 6 / seconds)))
            )
            row["busy"] = busy_fraction(step, batches, device, profiled)
            say(f"{name}: {seconds * 1e3:.1f} ms a step ({staged_s * 1e3:.1f} staged)")
            row["nvml_util"] = nvml_utilisation(step, batches, device, profiled)
            row["host_bytes"] = host_memory_bytes()  # the loader's workers still run
            if device.type == "cuda":
                row["gpu_peak_bytes"] = torch.cuda.max_memory_allocated(device)
            rows.append(row)
            del batches
        if not staged_blocks:
            staged_block()
        rows[0]["step_s"] = rows[0]["staged_step_s"] = statistics.median(staged_blocks)
        for row in rows:
            row["efficiency"] = row["staged_step_s"] / row["step_s"]
            # Every rank's step time; samples/s over all ranks.
            row["step_s_per_rank"] = ranks.gather(row["step_s"])
            row["samples_per_s"] = sum(args.batch_size / t for t in row["step_s_per_rank"])
            row["efficiency_per_rank"] = ranks.gather(row["efficiency"])

    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "world_size": ranks.world_size,
        "policy": args.policy,
        "dataset": args.dataset,
        "codec": args.codec,
        "compiled": args.compile,
        "batch_size": args.batch_size,
        "episodes": args.episodes,
        "frames": args.frames,
        "size": args.size,
        "ingest_s": ingest_s,
        "store_bytes": store.nbytes,
    }
    if ranks.rank == 0:
        table = markdown(rows, meta)
        print(table)
        if args.json:
            Path(args.json).write_text(json.dumps({**meta, "rows": rows}, indent=1))
        if args.md:
            Path(args.md).write_text(table)
        if args.png:
            plot(rows, meta, args.png)
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
