"""Per-kernel GPU times (torch.profiler, median of 20 calls) of the resample
backward benchmark case, (256, 2048, 2048, 64) float32, with its queries in
order (the benchmark's case) and shuffled.
    python tools/bwd_kernels.py"""
import torch

import robocache  # noqa: F401  (registers the operators)

from kernel_times import print_kernel_times

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
    print_kernel_times(name, lambda q=q: torch.ops.robocache._resample_backward(
        grad, values, times, q, None, "linear", True, True))
