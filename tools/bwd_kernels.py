"""Per-kernel GPU times (torch.profiler, median of 20 calls) of the resample
backward benchmark case, (256, 2048, 2048, 64) float32, with its queries in
order (the benchmark's case) and shuffled.
    python tools/bwd_kernels.py"""
import collections
import statistics

import torch
from torch.profiler import ProfilerActivity, profile

import robocache

torch.manual_seed(0)
dev = "cuda"
B, S, T, D = 256, 2048, 2048, 64
values = torch.randn(B, S, D, device=dev)
times = torch.sort(torch.rand(B, S, device=dev) * 10, dim=1).values
query = torch.sort(torch.rand(B, T, device=dev) * 10, dim=1).values
grad = torch.randn(B, T, D, device=dev)
shuffled = query[:, torch.randperm(T, device=dev)]
cases = {
    "queries in order": query,
    "queries shuffled": shuffled,
}
for name, q in cases.items():
    fn = lambda: torch.ops.robocache._resample_backward(  # noqa: E731
        grad, values, times, q, None, "linear", True, True)
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
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
        total += med * len(v) / 20
        print(f"  {med:8.1f} us  x{len(v) // 20}  {k[:100]}")
    print(f"  {total:8.1f} us  kernel time per call")
