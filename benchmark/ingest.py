"""Ingest speed: each loader, from its files to an EpisodeStore, in frames per second.

    python -m benchmark.ingest [--episodes 40] [--frames 150] [--json PATH] [--small]

Run from the checkout's root. Each dataset is written first, by the tests'
fixtures (tests/fixtures/: each format's own writer library), then loaded three times; the median is kept. "frames" are the
episodes' frames (LeRobot, robomimic, zarr, RLDS and CALVIN) and, for a bag,
its messages; "samples" count every stream's samples.

LeRobot with video is also set against a per-sample decode of the same
video: for frames in random order, open the file, seek to the frame and
decode forward to it, as a per-sample Dataset with a PyAV backend does.
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

from benchmark.writers import writers
from robocache.data import (
    EpisodeStore,
    load_bag,
    load_calvin,
    load_lerobot,
    load_rlds,
    load_robomimic,
    load_zarr,
)


def median_seconds(load, repeats=3):
    times, store = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        store = load()
        times.append(time.perf_counter() - start)
    return statistics.median(times), store


def per_sample_decode_seconds(path, frame_times, count, seed=0):
    """Seconds a frame when each frame is fetched on its own: open, seek to
    the keyframe before it, decode forward to it."""
    import av

    chosen = random.Random(seed).sample(frame_times, min(count, len(frame_times)))
    start = time.perf_counter()
    for t in chosen:
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            container.seek(int(t / stream.time_base), stream=stream, backward=True)
            for frame in container.decode(stream):
                if frame.time >= t - 1e-4:
                    frame.to_ndarray(format="rgb24")
                    break
    return (time.perf_counter() - start) / len(chosen)


def row(name, detail, seconds, store, frames=None):
    if frames is None:
        frames = int(store.episodes["length"].sum())
    samples = sum(int(s.values.shape[0]) for s in store.streams.values())
    return {
        "format": name,
        "data": detail,
        "episodes": store.num_episodes,
        "frames": frames,
        "samples": samples,
        "MB": store.nbytes / 1e6,
        "seconds": seconds,
        "frames_per_s": frames / seconds,
    }


def store_load_costs(store, folder, device):
    """What EpisodeStore.load's checks cost on a saved store: the median
    seconds of a load with each of (check, verify) on and off, the store
    moved to ``device`` (where the times' order is checked)."""
    store.save(folder)
    out = {}
    for check, verify in ((False, False), (True, False), (False, True), (True, True)):

        def load():
            loaded = EpisodeStore.load(folder, device=device, check=check, verify=verify)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return loaded

        out[f"check={check}, verify={verify}"] = median_seconds(load)[0]
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.ingest",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--frames", type=int, default=150, help="frames an episode")
    parser.add_argument("--size", type=int, default=96, help="LeRobot frames are size x size")
    parser.add_argument("--threads", type=int, default=8, help="load_lerobot's threads")
    parser.add_argument("--per-sample", type=int, default=200, help="frames decoded one by one")
    parser.add_argument("--small", action="store_true", help="a small run (a smoke test)")
    parser.add_argument("--json", help="write the rows here")
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where EpisodeStore.load's costs are measured (default: a GPU if present)",
    )
    args = parser.parse_args(argv)
    # The fixtures' writers need every format's library (pip install robocache[all]).
    from rosbags.rosbag2 import StoragePlugin

    TOPICS, write_bag = writers("bags").TOPICS, writers("bags").write_bag
    write_calvin = writers("calvin").write_calvin
    LEROBOT_FPS, write_lerobot = writers("lerobot").FPS, writers("lerobot").write_lerobot
    write_rlds = writers("rlds").write_rlds
    write_robomimic = writers("robomimic").write_robomimic
    write_replay_buffer = writers("zarr").write_replay_buffer

    if args.small:
        args.episodes, args.frames, args.size, args.per_sample = 4, 20, 64, 10
    E, n = args.episodes, args.frames
    lengths = (n,) * E
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for codec, label in (("libsvtav1", "AV1"), ("libx264", "H.264")):
            root = tmp / f"lerobot-{label}"
            write_lerobot(root, lengths=lengths, codec=codec, size=(args.size, args.size))
            load = lambda r=root: load_lerobot(r, threads=args.threads, progress=False)  # noqa: E731
            seconds, store = median_seconds(load)
            detail = f"state, action, one {args.size}x{args.size} {label} video"
            rows.append(row("LeRobot v3", detail, seconds, store))
            video = next(root.glob("videos/*/chunk-000/file-000.mp4"))
            frame_times = [k / LEROBOT_FPS for k in range(E * n)]
            per_frame = per_sample_decode_seconds(video, frame_times, args.per_sample)
            rows[-1]["per_sample_decode_frames_per_s"] = 1 / per_frame
        root = tmp / "lerobot-png"
        write_lerobot(root, lengths=lengths, images_as="png", size=(args.size, args.size))
        seconds, store = median_seconds(lambda: load_lerobot(root, progress=False))
        detail = f"state, action, one {args.size}x{args.size} PNG image feature"
        rows.append(row("LeRobot v3", detail, seconds, store))

        write_robomimic(tmp / "robomimic.hdf5", lengths=lengths)
        seconds, store = median_seconds(
            lambda: load_robomimic(tmp / "robomimic.hdf5", fps=20, progress=False)
        )
        rows.append(row("robomimic HDF5", "joints, actions, rewards, an 8x6 image", seconds, store))

        write_replay_buffer(tmp / "buffer.zarr", lengths=lengths, chunk_rows=100)
        seconds, store = median_seconds(
            lambda: load_zarr(tmp / "buffer.zarr", fps=10, progress=False)
        )
        rows.append(
            row(
                "Diffusion Policy zarr",
                "action, state, 4x4 image; chunks of 100 rows",
                seconds,
                store,
            )
        )

        write_rlds(tmp / "rlds", lengths=lengths, shards=4)
        seconds, store = median_seconds(lambda: load_rlds(tmp / "rlds", fps=10, progress=False))
        rows.append(row("RLDS", "8x10 PNG image, state, action, reward", seconds, store))

        ranges = tuple((e * n, e * n + n - 1) for e in range(E))
        write_calvin(tmp / "calvin" / "training", ranges=ranges)
        seconds, store = median_seconds(
            lambda: load_calvin(tmp / "calvin", "training", progress=False)
        )
        rows.append(
            row("CALVIN", "6x6 image, robot_obs, rel_actions (npz a frame)", seconds, store)
        )

        paths = []
        for e in range(max(1, E // 10)):
            paths.append(tmp / f"bag{e}")
            write_bag(paths[-1], StoragePlugin.MCAP, seconds=n / 30)
        seconds, store = median_seconds(lambda: load_bag(paths, TOPICS, progress=False))
        messages = sum(
            int(s.values.shape[0]) for k, s in store.streams.items() if "torque" not in k
        )
        detail = "ROS 2 mcap: joints 500 Hz, wrench 1 kHz, camera 30 Hz"
        rows.append(row("ROS 2 bag", detail, seconds, store, messages))

        lerobot = load_lerobot(tmp / "lerobot-AV1", progress=False)
        costs = store_load_costs(lerobot, tmp / "store", torch.device(args.device))

    print(f"{'format':22s} {'data':52s} {'frames':>8s} {'MB':>8s} {'s':>7s} {'frames/s':>10s}")
    for r in rows:
        print(
            f"{r['format']:22s} {r['data']:52s} {r['frames']:8d} {r['MB']:8.1f} "
            f"{r['seconds']:7.2f} {r['frames_per_s']:10.0f}"
        )
        if "per_sample_decode_frames_per_s" in r:
            print(
                f"{'':22s} {'  the same video, one frame per decode':52s} {'':8s} {'':8s} "
                f"{'':7s} {r['per_sample_decode_frames_per_s']:10.0f}"
            )
    print(
        f"\nEpisodeStore.load of the LeRobot AV1 store ({lerobot.nbytes / 1e6:.1f} MB) to {args.device}:"
    )
    for name, seconds in costs.items():
        print(f"  {name:28s} {seconds * 1e3:9.1f} ms")
    meta = {"torch": torch.__version__, "cpus": os.cpu_count(), "episodes": E, "frames": n}
    meta["store_load_s"] = costs
    print(f"\ntorch {meta['torch']}, {meta['cpus']} CPUs")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
