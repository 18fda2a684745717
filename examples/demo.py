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
Each comparison times its two sides in alternation (robocache and the
reference, or the eager and the compiled policy), after a warm-up, so that
both see the machine alike; a busy machine shows as a wide spread.
"""

import os
import sys
import time

import torch

import robocache
from robocache.data.synthetic import depth_camera_cloud, multi_rate_episodes

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from policy import MultiRatePolicy, example_inputs  # noqa: E402

# Before timing, both sides are called for this long (at least twice each):
# a compiled module's first calls, the allocator and the thread pools settle.
WARMUP_S = 0.5
REPS = 21
# A spread (interquartile range as a % of the median) above this says the
# machine was busy while timing: the times are not to be trusted.
NOISY_SPREAD_PCT = 25.0


def _call_ms(fn, device):
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def _median_and_spread(times):
    times = sorted(times)
    median = times[len(times) // 2]
    spread = times[(3 * len(times)) // 4] - times[len(times) // 4]
    return median, 100 * spread / median


def compare(first, second, device, reps=REPS, warmup_s=WARMUP_S):
    """The results of `first` and `second`, their median ms over `reps` calls
    each, alternating, after `warmup_s` seconds of alternating calls, and the
    wider of their spreads (interquartile range, % of the median)."""
    start, warmups = time.perf_counter(), 0
    while warmups < 2 or time.perf_counter() - start < warmup_s:
        first(), second()
        warmups += 1
    first_ms, second_ms = [], []
    for _ in range(reps):
        first_out, ms = _call_ms(first, device)
        first_ms.append(ms)
        second_out, ms = _call_ms(second, device)
        second_ms.append(ms)
    (a_ms, a_spread), (b_ms, b_spread) = map(_median_and_spread, (first_ms, second_ms))
    return first_out, second_out, a_ms, b_ms, max(a_spread, b_spread)


def spread_note(spread):
    noisy = spread > NOISY_SPREAD_PCT
    return f"spread {spread:.0f}%" + (": the machine was busy, run it again" if noisy else "")


def main():
    device = "cuda" if torch.cuda.is_available() and robocache.is_cuda_available() else "cpu"
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    print(f"robocache demo on {name} (torch {torch.__version__})")
    print(
        f"times: the median of {REPS} calls of each side, the two sides alternating, after "
        f"{WARMUP_S} s of warm-up; spread: the interquartile range as a % of the median\n"
    )

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
    fused, ref, ms, ref_ms, spread = compare(
        lambda: robocache.fuse(pairs, control_t, modes=modes),
        lambda: robocache.reference.fuse(pairs, control_t, modes),
        device,
    )
    err = (fused - ref).abs().max().item()
    print(
        f"2. fuse -> {tuple(fused.shape)}: robocache {ms:.3f} ms, pytorch reference {ref_ms:.3f} ms "
        f"({ref_ms / ms:.1f}x), max |diff| {err:.1e}; {spread_note(spread)}"
    )
    assert err < 1e-5, "fuse disagrees with the reference"

    clouds = depth_camera_cloud(8, device=device)
    args = ((100, 100, 100), 0.01, (0.0, 0.0, 0.0))
    grid, ref, ms, ref_ms, spread = compare(
        lambda: robocache.voxelize(clouds, *args),
        lambda: robocache.reference.voxelize(clouds, *args),
        device,
    )
    assert torch.equal(grid, ref), "voxelize disagrees with the reference"
    print(
        f"3. voxelize 8 depth-camera clouds {tuple(clouds.shape)} -> {tuple(grid.shape)} occupancy: "
        f"robocache {ms:.3f} ms, pytorch reference {ref_ms:.3f} ms ({ref_ms / ms:.1f}x), equal; "
        f"{spread_note(spread)}\n"
    )

    torch.manual_seed(0)
    policy = MultiRatePolicy().to(device).eval()
    x = example_inputs(B=16, seconds=2.0, device=device)
    with torch.no_grad():
        compiled = torch.compile(policy, fullgraph=True)
        t0 = time.perf_counter()
        compiled(*x)
        compile_s = time.perf_counter() - t0
        actions, out, eager_ms, compiled_ms, spread = compare(
            lambda: policy(*x), lambda: compiled(*x), device
        )
    err = (out - actions).abs().max().item()
    print(f"4. policy (fuse + voxelize + Conv3d/MLP in forward) -> actions {tuple(actions.shape)}:")
    print(
        f"     torch.compile(fullgraph=True) compiled it in {compile_s:.1f} s (the first call); "
        f"then eager {eager_ms:.3f} ms, compiled {compiled_ms:.3f} ms; max |diff| {err:.1e}; "
        f"{spread_note(spread)}"
    )


if __name__ == "__main__":
    main()
