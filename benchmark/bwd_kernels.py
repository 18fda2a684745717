"""Per-kernel GPU times (torch.profiler, median of 20 calls) of the resample
backward benchmark case, (256, 2048, 2048, 64) float32: queries in order (the
benchmark's case), shuffled, in order with mode "nearest", and in order at
four times as many queries. Needs a GPU.

    python benchmark/bwd_kernels.py"""

import torch
from kernel_times import parse_args, print_kernel_times

import robocache  # noqa: F401  (registers the operators)


def main(argv=None):
    parse_args(__doc__, argv)
    torch.manual_seed(0)
    dev = "cuda"
    B, S, T, D = 256, 2048, 2048, 64
    values = torch.randn(B, S, D, device=dev)
    times = torch.sort(torch.rand(B, S, device=dev) * 10, dim=1).values
    query = torch.sort(torch.rand(B, T, device=dev) * 10, dim=1).values
    grad = torch.randn(B, T, D, device=dev)
    shuffled = query[:, torch.randperm(T, device=dev)]
    up = torch.sort(torch.rand(B, 4 * T, device=dev) * 10, dim=1).values
    grad_up = torch.randn(B, 4 * T, D, device=dev)
    for name, q, g, mode in [
        ("queries in order", query, grad, "linear"),
        ("queries shuffled", shuffled, grad, "linear"),
        ("queries in order, nearest", query, grad, "nearest"),
        ("4x upsampling (T = 8192), queries in order", up, grad_up, "linear"),
    ]:
        print_kernel_times(
            name,
            lambda q=q, g=g, mode=mode: torch.ops.robocache._resample_backward(
                g, values, times, q, None, mode, True, True
            ),
        )


if __name__ == "__main__":
    main()
