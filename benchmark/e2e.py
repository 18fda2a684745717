"""End to end: what the data path costs a training step, per pipeline, on the same data and model.

    python -m benchmark.e2e [--dataset lerobot|mcap] [--policy dp|small] [--codec av1|h264]
        [--compile] [--batch-size 64] [--workers 4,8,16] [--steps 30] [--budget 60]
        [--json PATH] [--md PATH] [--png PATH] [--small]
    torchrun --nproc_per_node=2 -m benchmark.e2e --data DIR [...]

Under torchrun (NCCL on GPUs, gloo on CPUs) rank 0 writes and loads the
dataset and saves the store in DIR; every rank maps its own shard of it,
trains the policy under DistributedDataParallel with batches of
--batch-size, and only the robocache pipeline runs; rank 0 reports every
rank's step time and loader efficiency, and the samples/s of all ranks.

Data (--dataset mcap: the multi-rate robot logs of e2e_loaders.py instead): a
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
import json
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmark import e2e_loaders as data
from benchmark.e2e_measure import (
    Ranks,
    against_staged,
    busy_fraction,
    data_path_alone,
    host_memory_bytes,
    markdown,
    nvml_utilisation,
    plot,
    sampler_batches,
    timed,
)
from benchmark.e2e_policies import DiffusionLike, SmallPolicy
from benchmark.sampler import InRamFrames
from robocache.data import EpisodeStore, WindowSampler


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.e2e",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--dataset",
        choices=["lerobot", "mcap"],
        default="lerobot",
        help="lerobot: the LeRobot v3 dataset; mcap: the multi-rate robot logs (e2e_loaders.py)",
    )
    parser.add_argument("--policy", choices=["dp", "small"], default="dp")
    parser.add_argument("--codec", choices=["av1", "h264"], default="av1")
    parser.add_argument("--compile", action="store_true", help="torch.compile the policy")
    parser.add_argument(
        "--cuda-graph",
        action="store_true",
        help="the robocache pipeline replays its batches from CUDA graphs (cuda_graph=True; "
        "by default the sampler decides, and does so on a GPU)",
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
        args.warmup, args.steps, args.budget = 1, 2, min(args.budget, 10.0)
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
            store, ingest_s = data.build_store(args, root, say)
            store.save(cache)
        ranks.barrier()
        if ranks.world_size > 1:  # each rank maps its own episodes of the saved store
            store = EpisodeStore.load(cache, shard=(ranks.rank, ranks.world_size))
        ingest_s = ranks.broadcast(ingest_s if ranks.rank == 0 else 0.0)

        mcap = args.dataset == "mcap"
        cameras = data.LOG_POLICY_CAMERAS if mcap else data.CAMERAS
        deltas = data.LOG_DELTAS if mcap else data.DELTAS
        adapt = data.log_policy_batch if mcap else None
        policy = DiffusionLike if args.policy == "dp" else SmallPolicy
        state_dim = data.LOG_STATE_DIM if mcap else 14
        size = {"width": 8} if args.small and args.policy == "dp" else {}  # a smoke run
        model = policy(cameras, state_dim=state_dim, **size).to(device)
        if ranks.world_size > 1:
            model = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[device.index] if device.type == "cuda" else None
            )
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        forward = torch.compile(model) if args.compile else model

        def step(batch):
            # bf16 on the GPU; a CPU (a smoke run) keeps float32, which it runs far faster.
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = forward(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()

        def make_sampler(cuda_graph=None):
            return WindowSampler(
                store.to(device), deltas, batch_size=args.batch_size, images="float_chw",
                drop_last=True, anchor=data.CAMERA if mcap else None, cuda_graph=cuda_graph,
            )  # fmt: skip

        def robocache_batches():
            batches = sampler_batches(make_sampler(cuda_graph=args.cuda_graph or None))
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
                        lambda w=w: data.loader_batches(
                            data.PerSampleLeRobot(root), w, args.batch_size, device
                        ),
                    )
                )
            if "ram" in pipelines:
                cases.append(
                    (
                        f"ram, {w} workers",
                        w,
                        lambda w=w: data.loader_batches(
                            data.PerSampleMultiRate(store)
                            if mcap
                            else InRamFrames(store, data.DELTAS, data.FPS),
                            w,
                            args.batch_size,
                            device,
                            [data.CAMERA] if mcap else data.CAMERAS,
                            adapt,
                        ),  # fmt: skip
                    )
                )
        # The lerobot pipeline comes last: its first case imports lerobot into
        # this process, for good.
        if "lerobot" in pipelines and not mcap:
            why_not = data.why_lerobot_does_not_import()
            if why_not:
                say(f"lerobot pipeline skipped: lerobot does not import ({why_not})")
            else:
                cases += [
                    (
                        f"lerobot, {w} workers",
                        w,
                        lambda w=w: data.loader_batches(
                            data.RealLeRobot(root), w, args.batch_size, device
                        ),
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


if __name__ == "__main__":
    sys.exit(main())
