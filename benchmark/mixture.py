"""A mixture batch against a single-store batch of the same shape.

    python -m benchmark.mixture [--device cuda] [--batch 128] [--json PATH] [--small]

An Open-X-like mixture of three synthetic datasets: different key names,
rates (10, 5 and 15 Hz), action widths (7, 4 and 7) and cameras, weights
0.5, 0.3 and 0.2, one camera whose frames are one size in every store. The single
store is the first dataset alone, sampled with the same keys, windows and
batch size. Reported: the median time of a batch (host and device, the
loop synchronized once), their ratio, and how often each dataset was drawn
against its weight.
"""

import argparse
import json
import statistics
import sys

import torch

from robocache.bench.timing import per_batch_seconds
from robocache.data import EpisodeStore, Mixture, WindowSampler

DELTAS = {"action": [k / 10 for k in range(16)], "image": [-0.1, 0.0], "state": [-0.1, 0.0]}


def synthetic(episodes, frames, fps, action_width, names, size, seed):
    g = torch.Generator().manual_seed(seed)

    def episode(e):
        n = frames + e % 7
        t = torch.arange(n) * round(1e9 / fps)
        return {
            names["action"]: (torch.randn(n, action_width, generator=g), t),
            names["state"]: (torch.randn(n, 8, generator=g), t),
            names["image"]: (
                torch.randint(0, 256, (n, size, size, 3), generator=g, dtype=torch.uint8),
                t,
            ),
        }

    return EpisodeStore.from_episodes(
        (episode(e) for e in range(episodes)), total=episodes, fps=fps, progress=False
    )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.mixture",
        description="A mixture batch against a single-store batch of the same shape.",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--episodes", type=int, default=50)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--size", type=int, default=96, help="frames are size x size")
    parser.add_argument("--small", action="store_true", help="a small run (a smoke test)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)
    if args.small:
        args.batch, args.episodes, args.frames, args.size = 16, 4, 20, 8
    device = torch.device(args.device)
    print(f"building three stores on {device} ...", file=sys.stderr, flush=True)
    specs = [
        (
            10,
            7,
            {"action": "action", "state": "observation.state", "image": "observation.images.top"},
        ),
        (5, 4, {"action": "actions", "state": "proprio", "image": "image_0"}),
        (15, 7, {"action": "act", "state": "robot_state", "image": "rgb_static"}),
    ]
    stores, entries = [], []
    for i, ((fps, width, names), weight) in enumerate(zip(specs, (0.5, 0.3, 0.2))):
        s = synthetic(args.episodes, args.frames, fps, width, names, args.size, seed=i).to(device)
        stores.append(s)
        entries.append((s, weight, {own: name for name, own in names.items()}))
    mixture = Mixture(entries)  # packed into one store where every key is on the GPU
    mixed = WindowSampler(mixture, DELTAS, batch_size=args.batch, device=device)
    apart = WindowSampler(
        Mixture(entries, pack=False), DELTAS, batch_size=args.batch, device=device
    )
    single_keys = {specs[0][2][k]: d for k, d in DELTAS.items()}
    single = WindowSampler(stores[0], single_keys, batch_size=args.batch, device=device)
    steps = iter(range(10**9))
    anchors = iter(lambda: torch.randint(single.num_anchors, (args.batch,), device=device), None)
    batches, rounds = (5, 1) if args.small else (50, 7)
    timings = {"mixed": [], "apart": [], "single": []}
    for _ in range(rounds):  # interleaved, so that a slow spell of the host hits all three
        timings["mixed"].append(
            per_batch_seconds(lambda: mixed.batch_at_step(next(steps)), device, batches)
        )
        timings["apart"].append(
            per_batch_seconds(lambda: apart.batch_at_step(next(steps)), device, batches)
        )
        timings["single"].append(
            per_batch_seconds(lambda: single.batch_at(next(anchors)), device, batches)
        )
    mixed_s, apart_s, single_s = (
        statistics.median(timings[k]) for k in ("mixed", "apart", "single")
    )
    counts = torch.zeros(3)
    for step in range(200):
        counts += torch.bincount(mixed.draws(step)[0], minlength=3)
    shares = (counts / counts.sum()).tolist()
    row = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "batch": args.batch,
        "single_ms": single_s * 1e3,
        "packed": mixed.packed,
        "mixture_ms": mixed_s * 1e3,
        "ratio": mixed_s / single_s,
        "per_store_ms": apart_s * 1e3,
        "per_store_ratio": apart_s / single_s,
        "weights": mixture.weights.tolist(),
        "drawn_shares": shares,
    }
    print(
        f"single store {row['single_ms']:.3f} ms, mixture {row['mixture_ms']:.3f} ms a batch "
        f"({row['ratio']:.2f}x{', packed' if row['packed'] else ''}), each store cut apart "
        f"{row['per_store_ms']:.3f} ms ({row['per_store_ratio']:.2f}x); drawn {', '.join(f'{s:.3f}' for s in shares)} against "
        f"weights 0.5, 0.3, 0.2 ({row['device']}, torch {row['torch']})"
    )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": [row]}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
