"""Shared by the profiling scripts in benchmark/: the per-kernel GPU time of a
call (torch.profiler medians over repeated calls), and the command line that
each script has (``--help``, and a clear exit where there is no GPU)."""

import argparse
import collections
import statistics
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import robocache


def parse_args(doc, argv=None, add_arguments=None):
    """Parses a profiling script's command line (its docstring is the help),
    then exits with a message unless a GPU and robocache's CUDA kernels are
    both present."""
    parser = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit(f"{parser.prog}: needs a CUDA GPU; torch {torch.__version__} sees none.")
    if not robocache.is_cuda_available():
        sys.exit(
            f"{parser.prog}: this robocache was built without CUDA kernels; rebuild it "
            "with a CUDA build of torch and nvcc on PATH (see the README)."
        )
    return args


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
