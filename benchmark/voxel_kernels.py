"""Per-kernel GPU times (torch.profiler, median of 20 calls) of the voxelize
benchmark cases: which pass of a voxelize call takes the time. Needs a GPU.

    python benchmark/voxel_kernels.py"""

import torch
from kernel_times import parse_args, print_kernel_times

import robocache
from robocache.data.synthetic import depth_camera_cloud


def main(argv=None):
    parse_args(__doc__, argv)
    torch.manual_seed(0)
    dev = "cuda"
    uni = torch.rand(8, 307200, 3, device=dev)
    depth = depth_camera_cloud(8, device=dev)
    pts, feats = torch.rand(8, 65536, 3, device=dev), torch.randn(8, 65536, 6, device=dev)
    big = torch.rand(32, 100000, 3, device=dev)
    cases = {
        "count uniform": lambda: robocache.voxelize(
            uni, (100,) * 3, 0.01, (0, 0, 0), reduce="count"
        ),
        "count depth": lambda: robocache.voxelize(
            depth, (100,) * 3, 0.01, (0, 0, 0), reduce="count"
        ),
        "mean 6": lambda: robocache.voxelize(
            pts, (100,) * 3, 0.01, (0, 0, 0), features=feats, reduce="mean"
        ),
        "occupancy 128^3": lambda: robocache.voxelize(big, (128,) * 3, 1 / 128, (0, 0, 0)),
    }
    for name, fn in cases.items():
        print_kernel_times(name, fn)


if __name__ == "__main__":
    main()
