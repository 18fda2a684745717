"""Per-kernel GPU times of a call: torch.profiler medians over repeated calls,
shared by tools/voxel_kernels.py and tools/bwd_kernels.py."""
import collections
import statistics

import torch
from torch.profiler import ProfilerActivity, profile


def print_kernel_times(name, fn, calls=20):
    """Prints the median time of each CUDA kernel fn() launches, and their sum per call."""
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
