"""robocache demo: multi-rate robot observations into a compiled policy.

Runs end to end on data generated in memory (no download):

1. synthetic episodes: camera features ~30 Hz, joint states ~100 Hz and
   force/torque ~1 kHz on jittered int64-nanosecond clocks, with dropped
   samples and streams that start at different times;
2. robocache.fuse aligns the three streams onto a 50 Hz control timeline in
   one kernel (checked against the pure-PyTorch reference);
3. robocache.voxelize turns depth-camera point clouds into occupancy grids
   (checked against the reference);
4. a small policy that does both inside its forward, eager and under
   torch.compile(fullgraph=True).

It prints what it did and how long each stage took on the device it found.
"""

import os
import sys
import time

import torch

import robocache
from robocache.data.synthetic import depth_camera_cloud, multi_rate_episodes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from policy import MultiRatePolicy, example_inputs  # noqa: E402


def timed(fn, device, reps=10):
    """(result, median milliseconds) after one warm-up call."""
    out = fn()
    times = []
    for _ in range(reps):
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        out = fn()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) * 1e3)
    return out, sorted(times)[len(times) // 2]


def main():
    device = "cuda" if torch.cuda.is_available() and robocache.is_cuda_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"robocache demo on {name} (torch {torch.__version__})\n")

    t0 = time.perf_counter()
    streams, control_t = multi_rate_episodes(B=32, seconds=4.0, device=device)
    print(f"1. generated 32 episodes of 4 s in {(time.perf_counter() - t0) * 1e3:.0f} ms:")
    for key, s in streams.items():
        dropped = 1 - s.lengths.sum().item() / s.lengths.numel() / s.values.shape[1]
        print(
            f"     {key:<8} {tuple(s.values.shape)}  int64 ns clock, {100 * dropped:.1f}% samples dropped"
        )
    print(f"     control timeline {tuple(control_t.shape)} at 50 Hz\n")

    pairs = [s.as_tuple() for s in streams.values()]
    modes = ["previous", "linear", "linear"]
    fused, ms = timed(lambda: robocache.fuse(pairs, control_t, modes=modes), device)
    ref, ref_ms = timed(lambda: robocache.reference.fuse(pairs, control_t, modes), device)
    err = (fused - ref).abs().max().item()
    print(
        f"2. fuse -> {tuple(fused.shape)}: robocache {ms:.3f} ms, pytorch reference {ref_ms:.3f} ms "
        f"({ref_ms / ms:.1f}x), max |diff| {err:.1e}"
    )
    assert err < 1e-5, "fuse disagrees with the reference"

    clouds = depth_camera_cloud(8, device=device)
    args = ((100, 100, 100), 0.01, (0.0, 0.0, 0.0))
    grid, ms = timed(lambda: robocache.voxelize(clouds, *args), device)
    ref, ref_ms = timed(lambda: robocache.reference.voxelize(clouds, *args), device)
    assert torch.equal(grid, ref), "voxelize disagrees with the reference"
    print(
        f"3. voxelize 8 depth-camera clouds {tuple(clouds.shape)} -> {tuple(grid.shape)} occupancy: "
        f"robocache {ms:.3f} ms, pytorch reference {ref_ms:.3f} ms ({ref_ms / ms:.1f}x), equal\n"
    )

    torch.manual_seed(0)
    policy = MultiRatePolicy().to(device).eval()
    x = example_inputs(B=16, seconds=2.0, device=device)
    with torch.no_grad():
        actions, eager_ms = timed(lambda: policy(*x), device)
        compiled = torch.compile(policy, fullgraph=True)
        t0 = time.perf_counter()
        compiled(*x)
        compile_s = time.perf_counter() - t0
        out, compiled_ms = timed(lambda: compiled(*x), device)
    err = (out - actions).abs().max().item()
    print(f"4. policy (fuse + voxelize + Conv3d/MLP in forward) -> actions {tuple(actions.shape)}:")
    print(
        f"     eager {eager_ms:.3f} ms; torch.compile(fullgraph=True): compiled in {compile_s:.1f} s, "
        f"then {compiled_ms:.3f} ms; max |diff| {err:.1e}"
    )


if __name__ == "__main__":
    main()
