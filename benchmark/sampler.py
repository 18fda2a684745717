"""WindowSampler: what a batch costs the host on each path, and the sampler
against the peers that build the same windows.

    python -m benchmark.sampler [--device cuda] [--workers 4,8,16] [--json PATH] [--small]
        [--host-only] [--host-batch-sizes 64,256]

First table (benchmark/sampler_host.py): the host's CPU and wall time a
batch with the default arguments and with each option that changes the
path (graphs, prefetch, mixtures, augmentation, pinned, mapped and JPEG
keys), so that a regression shows in one run.

Peer cases (LeRobot-style windows, B = 256):
  lowdim:  a 16-step action chunk of 7 and 2 steps of a 14-dim state;
  cameras: the same plus two uint8 96x96x3 cameras, 2 steps each.

Columns: robocache's WindowSampler (a loop of batches, synchronized once;
the same loop with WindowSampler(cuda_graph=True); one batch replayed from
a CUDA graph; ten batches in one graph, against ten
copies of the batch's bytes in one graph), the same windows in plain PyTorch
on the device (episode lookup, clamp, gather; eager and torch.compile), and a
per-sample Dataset doing what LeRobot does (index arithmetic, clamping,
gathering from in-memory arrays) behind a DataLoader with pinned memory and
persistent workers, its batches copied to the device.
"""

import argparse
import json
import sys

import torch

from benchmark import sampler_host
from robocache.bench.timing import graph_seconds, per_batch_seconds
from robocache.data import EpisodeStore, WindowSampler

FPS = 30
ACTION = [k / FPS for k in range(16)]
TWO_STEPS = [-1 / FPS, 0.0]


def make_store(episodes, frames, cameras):
    """Synthetic LeRobot-like episodes on one frame clock."""

    def episode(e):
        t = torch.arange(frames, dtype=torch.int64) * round(1e9 / FPS)
        ep = {
            "action": (torch.randn(frames, 7), t),
            "observation.state": (torch.randn(frames, 14), t),
        }
        for c in range(cameras):
            ep[f"observation.images.cam{c}"] = (
                torch.randint(0, 256, (frames, 96, 96, 3), dtype=torch.uint8),
                t,
            )
        return ep

    return EpisodeStore.from_episodes(
        (episode(e) for e in range(episodes)), total=episodes, fps=FPS
    )


def deltas_for(store):
    d = {"action": ACTION, "observation.state": TWO_STEPS}
    d.update({k: TWO_STEPS for k in store.keys() if k.startswith("observation.images")})
    return d


def batch_bytes(batch):
    return sum(t.numel() * t.element_size() for t in batch.values())


def copy_gbps(nbytes, device):
    """A device-to-device copy of nbytes (the ceiling for a batch that size)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return 2 * nbytes / per_batch_seconds(lambda: dst.copy_(src), device, 20) / 1e9


class InRamFrames(torch.utils.data.Dataset):
    """The per-sample peer: LeRobot's rule on in-memory arrays, one window at a time."""

    def __init__(self, store, deltas, fps=FPS):
        self.store, self.deltas, self.fps = store, deltas, fps
        self.offsets = store["action"].offsets.tolist()
        self.episode = torch.repeat_interleave(
            torch.arange(store.num_episodes), store["action"].offsets.diff()
        ).tolist()

    def __len__(self):
        return len(self.episode)

    def __getitem__(self, i):
        e = self.episode[i]
        start, end = self.offsets[e], self.offsets[e + 1]
        item = {"index": i, "episode_index": e, "frame_index": i - start}
        for key, deltas in self.deltas.items():
            rows = [i + round(d * self.fps) for d in deltas]
            item[f"{key}_is_pad"] = torch.tensor([not start <= r < end for r in rows])
            item[key] = self.store[key].values[[min(max(r, start), end - 1) for r in rows]]
        return item


def dataloader_seconds(store, deltas, workers, batch_size, batches, device):
    loader = torch.utils.data.DataLoader(
        InRamFrames(store, deltas),
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=device.type == "cuda",
        persistent_workers=workers > 0,
        drop_last=True,
    )
    it = iter(loader)

    def next_batch():
        nonlocal it
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        return {k: v.to(device, non_blocking=True) for k, v in batch.items()}

    for _ in range(3 + workers):  # let the workers fill their queues
        next_batch()
    return per_batch_seconds(next_batch, device, batches, repeats=3)


def torch_windows(store, deltas):
    """The same windows in plain PyTorch on the store's device (vectorized;
    each frame's episode from a lookup table)."""
    offsets = store["action"].offsets
    episode_of_frame = torch.repeat_interleave(
        torch.arange(store.num_episodes, device=offsets.device), offsets.diff()
    )
    frame_deltas = {
        k: torch.tensor([round(d * FPS) for d in v], device=offsets.device)
        for k, v in deltas.items()
    }
    tensors = {k: store[k].values for k in deltas}

    def batch(index):
        episode = episode_of_frame[index]
        start, end = offsets[episode].unsqueeze(1), offsets[episode + 1].unsqueeze(1)
        out = {}
        for key, d in frame_deltas.items():
            rows = index.unsqueeze(1) + d
            out[f"{key}_is_pad"] = (rows < start) | (rows >= end)
            out[key] = tensors[key][torch.minimum(torch.maximum(rows, start), end - 1)]
        return out

    return batch


def run_case(name, store, args, device):
    deltas = deltas_for(store)
    B = args.batch_size
    sampler = WindowSampler(store, deltas, batch_size=B, device=device)
    gen = torch.Generator(device=store.device).manual_seed(0)
    n = sampler.num_anchors

    def index():
        return torch.randint(0, n, (B,), device=store.device, generator=gen)

    batch = sampler.batch_at(index())
    nbytes = batch_bytes(batch)
    row = {"case": name, "B": B, "batch_bytes": nbytes}
    row["robocache_s"] = per_batch_seconds(lambda: sampler.batch_at(index()), device, args.batches)
    if device.type == "cuda":
        # The sampler's own graph mode: a batch is an index copy and a replay.
        graphed = WindowSampler(store, deltas, batch_size=B, device=device, cuda_graph=True)
        same = index()
        for key, value in graphed.batch_at(same).items():
            if not torch.equal(sampler.batch_at(same)[key], value):
                raise AssertionError(f"{name}: the graph mode's batch differs at {key!r}")
        row["robocache_graph_mode_s"] = per_batch_seconds(
            lambda: graphed.batch_at(index()), device, args.batches
        )
        static = index()
        row["robocache_graph_s"] = graph_seconds(lambda: sampler.batch_at(static), device)
        row["copy_GBps"] = copy_gbps(nbytes, device)
        # Throughput against a device copy of the batch's bytes, both timed
        # alike: ten in one CUDA graph (no replay's own cost in either).
        src = torch.empty(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        row["copy_x10_s"] = graph_seconds(lambda: dst.copy_(src), device, per_graph=10)
        row["robocache_graph_x10_s"] = graph_seconds(
            lambda: sampler.batch_at(static), device, per_graph=10
        )
        row["graph_vs_copy"] = row["copy_x10_s"] / row["robocache_graph_x10_s"]
    plain = torch_windows(store, deltas)
    same = index()
    ours, theirs = sampler.batch_at(same), plain(same)
    for key, value in theirs.items():
        if not torch.equal(ours[key], value):
            raise AssertionError(f"{name}: the plain PyTorch windows differ at {key!r}")
    row["torch_eager_s"] = per_batch_seconds(lambda: plain(index()), device, args.batches)
    compiled = torch.compile(plain, dynamic=False)
    row["torch_compiled_s"] = per_batch_seconds(lambda: compiled(index()), device, args.batches)
    cpu_store = store.to("cpu")
    for w in args.workers:
        row[f"dataloader_{w}_workers_s"] = dataloader_seconds(
            cpu_store, deltas, w, B, args.loader_batches, device
        )
    return row


def print_row(row):
    B = row["B"]
    print(f"\n{row['case']}: B = {B}, {row['batch_bytes'] / 1e6:.2f} MB a batch")
    for key, value in row.items():
        if key.endswith("_s"):
            print(
                f"  {key[:-2]:28s} {value * 1e6:10.1f} us/batch {B / value / 1e6:9.3f} M windows/s"
            )
    if "copy_GBps" in row:
        gbps = row["batch_bytes"] / row["robocache_s"] / 1e9
        print(
            f"  robocache writes {gbps:.0f} GB/s; a copy of the same bytes {row['copy_GBps']:.0f} GB/s"
        )
        print(
            f"  ten batches in one graph: {row['graph_vs_copy']:.0%} of the rate of ten copies"
            " of their bytes in one graph"
        )


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.sampler",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--workers", default="4,8,16", help="DataLoader worker counts, comma-separated"
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=200, help="batches per timing")
    parser.add_argument("--loader-batches", type=int, default=20)
    parser.add_argument("--small", action="store_true", help="a small store (a smoke run)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument("--host-only", action="store_true", help="the host-time table alone")
    parser.add_argument("--host-batch-sizes", default="64,256")
    args = parser.parse_args(argv)
    args.workers = [int(w) for w in args.workers.split(",") if w != ""]
    device = torch.device(args.device)
    sizes = [int(b) for b in args.host_batch_sizes.split(",") if b != ""]
    host_rows = sampler_host.run(device, sizes, args.small)
    episodes, frames = (8, 64) if args.small else (200, 400)
    rows = []
    for name, cameras in () if args.host_only else (("lowdim", 0), ("cameras", 2)):
        store = make_store(
            episodes if cameras == 0 else episodes // 2 if args.small else episodes // 4,
            frames,
            cameras,
        ).to(device)
        rows.append(run_case(name, store, args, device))
        print_row(rows[-1])
    meta = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
    }
    print(f"\n{meta['device']}, torch {meta['torch']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "host": host_rows, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
