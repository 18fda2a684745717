"""Runs each benchmark case's robocache call once between cudaProfilerStart and
cudaProfilerStop, for Nsight Compute. Needs a GPU.

    ncu --profile-from-start off --clock-control none python benchmark/ncu_cases.py [KIND ...]

KIND is resample, fuse or voxelize (default: all)."""

import argparse

import torch
from kernel_times import parse_args

import robocache
from robocache.bench import resample_inputs
from robocache.data.synthetic import depth_camera_cloud

KINDS = ("resample", "fuse", "voxelize")


def _kind(name):
    if name not in KINDS:
        raise argparse.ArgumentTypeError(f"got {name!r}; expected one of {', '.join(KINDS)}")
    return name


def cases(dev):
    """(kind, call) for every benchmark case."""
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
    fq = torch.sort(torch.rand(256, 150, device=dev), 1).values
    calls.append(("fuse", lambda: robocache.fuse(streams, fq)))
    uni = torch.rand(8, 307200, 3, device=dev)
    depth = depth_camera_cloud(8, device=dev)
    pts, feats = torch.rand(8, 65536, 3, device=dev), torch.randn(8, 65536, 6, device=dev)
    big = torch.rand(32, 100000, 3, device=dev)
    calls.append(
        ("voxelize", lambda: robocache.voxelize(uni, (100,) * 3, 0.01, (0, 0, 0), reduce="count"))
    )
    calls.append(
        ("voxelize", lambda: robocache.voxelize(depth, (100,) * 3, 0.01, (0, 0, 0), reduce="count"))
    )
    calls.append(
        (
            "voxelize",
            lambda: robocache.voxelize(
                pts, (100,) * 3, 0.01, (0, 0, 0), features=feats, reduce="mean"
            ),
        )
    )
    calls.append(
        (
            "voxelize",
            lambda: robocache.voxelize(big, (128,) * 3, 1 / 128, (0, 0, 0), reduce="occupancy"),
        )
    )
    return calls


def main(argv=None):
    args = parse_args(
        __doc__,
        argv,
        lambda p: p.add_argument(
            "kinds",
            nargs="*",
            type=_kind,
            metavar="KIND",
            help="only these cases: " + ", ".join(KINDS),
        ),
    )
    torch.manual_seed(0)
    calls = [c for kind, c in cases("cuda") if not args.kinds or kind in args.kinds]
    for c in calls:
        c()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStart()
    for c in calls:
        c()
    torch.cuda.synchronize()
    torch.cuda.cudart().cudaProfilerStop()


if __name__ == "__main__":
    main()
