"""Inside one operator call: which CUDA kernels it launches and how long each
takes, or each benchmark case run once for Nsight Compute. Needs a GPU and a
CUDA build of robocache (without them it says so and exits).

    python -m benchmark.ops kernels [backward|voxelize ...]
    ncu --profile-from-start off --clock-control none --section SpeedOfLight \\
        python -m benchmark.ops ncu [resample|fuse|voxelize ...]

``kernels`` prints each kernel's torch.profiler median over 20 calls after 3
warm-up calls (the L2 is not flushed, so they can be lower than
``python -m robocache.bench``'s row for the same case):
  backward  the resample backward of the (256, 2048, 2048, 64) float32 case:
            queries in order, shuffled, mode "nearest", and 4x upsampling;
  voxelize  the four voxelize cases of the benchmark.
``ncu`` runs each case of ``python -m robocache.bench``'s GPU suite once
between cudaProfilerStart and cudaProfilerStop.
"""

import argparse
import collections
import statistics
import sys

import torch

import robocache
from robocache.bench import resample_inputs
from robocache.data.synthetic import depth_camera_cloud

KERNEL_CASES = ("backward", "voxelize")
NCU_KINDS = ("resample", "fuse", "voxelize")


def _choice(options):
    def check(name):
        if name not in options:
            raise argparse.ArgumentTypeError(f"got {name!r}; expected one of {', '.join(options)}")
        return name

    return check


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m benchmark.ops",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    kernels = sub.add_parser("kernels", help="per-kernel times of an op's calls")
    kernels.add_argument("cases", nargs="*", type=_choice(KERNEL_CASES), metavar="CASE")
    ncu = sub.add_parser("ncu", help="each benchmark case once, for Nsight Compute")
    ncu.add_argument("kinds", nargs="*", type=_choice(NCU_KINDS), metavar="KIND")
    return parser


def _require_gpu(parser):
    if not torch.cuda.is_available():
        sys.exit(f"{parser.prog}: needs a CUDA GPU; torch {torch.__version__} sees none.")
    if not robocache.is_cuda_available():
        sys.exit(
            f"{parser.prog}: this robocache was built without CUDA kernels; rebuild it "
            "with a CUDA build of torch and nvcc on PATH (see the README)."
        )


def print_kernel_times(name, fn, calls=20):
    """Prints the median time of each CUDA kernel fn() launches, and their sum per call."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per = collections.defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name].append(e.device_time)
    print(f"{name}:")
    total = 0.0
    for k, v in per.items():
        med = statistics.median(v)
        total += med * len(v) / calls
        print(f"  {med:8.1f} us  x{len(v) // calls}  {k[:100]}")
    print(f"  {total:8.1f} us  kernel time per call")


def backward_calls(dev):
    """(name, call) of the resample backward cases."""
    B, S, T, D = 256, 2048, 2048, 64
    values, times, query = resample_inputs(B, S, T, D, torch.float32, dev)
    grad = torch.randn(B, T, D, device=dev)
    shuffled = query[:, torch.randperm(T, device=dev)]
    up = torch.sort(torch.rand(B, 4 * T, device=dev) * 10, dim=1).values
    grad_up = torch.randn(B, 4 * T, D, device=dev)
    calls = []
    for name, q, g, mode in [
        ("queries in order", query, grad, "linear"),
        ("queries shuffled", shuffled, grad, "linear"),
        ("queries in order, nearest", query, grad, "nearest"),
        ("4x upsampling (T = 8192), queries in order", up, grad_up, "linear"),
    ]:
        op = torch.ops.robocache._resample_backward
        calls.append((name, lambda q=q, g=g, m=mode: op(g, values, times, q, None, m, True, True)))
    return calls


def voxelize_calls(dev):
    """(name, call) of the benchmark's voxelize cases."""
    uniform = torch.rand(8, 307200, 3, device=dev)
    depth = depth_camera_cloud(8, device=dev)
    points, features = torch.rand(8, 65536, 3, device=dev), torch.randn(8, 65536, 6, device=dev)
    big = torch.rand(32, 100000, 3, device=dev)
    grid, cell, corner = (100,) * 3, 0.01, (0, 0, 0)
    return [
        ("count uniform", lambda: robocache.voxelize(uniform, grid, cell, corner, reduce="count")),
        ("count depth", lambda: robocache.voxelize(depth, grid, cell, corner, reduce="count")),
        (
            "mean 6",
            lambda: robocache.voxelize(
                points, grid, cell, corner, features=features, reduce="mean"
            ),
        ),
        ("occupancy 128^3", lambda: robocache.voxelize(big, (128,) * 3, 1 / 128, corner)),
    ]


def ncu_calls(dev):
    """(kind, call) of every case of the GPU suite."""
    calls = []
    for shape, dtype in [
        ((256, 2048, 2048, 64), torch.float32),
        ((256, 2048, 2048, 64), torch.bfloat16),
        ((1024, 500, 100, 14), torch.float32),
    ]:
        v, t, q = resample_inputs(*shape, dtype, dev)
        calls.append(("resample", lambda v=v, t=t, q=q: robocache.resample(v, t, q)))
    streams = [
        (torch.randn(256, S, D, device=dev), torch.sort(torch.rand(256, S, device=dev), 1).values)
        for S, D in [(90, 512), (300, 32), (3000, 16)]
    ]
    timeline = torch.sort(torch.rand(256, 150, device=dev), 1).values
    calls.append(("fuse", lambda: robocache.fuse(streams, timeline)))
    calls += [("voxelize", call) for _, call in voxelize_calls(dev)]
    return calls


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    _require_gpu(parser)
    torch.manual_seed(0)
    if args.command == "kernels":
        for case in args.cases or KERNEL_CASES:
            calls = backward_calls("cuda") if case == "backward" else voxelize_calls("cuda")
            for name, call in calls:
                print_kernel_times(f"{case}: {name}", call)
        return 0
    calls = [c for kind, c in ncu_calls("cuda") if not args.kinds or kind in args.kinds]
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for call in calls:
        call()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
