"""robocache's benchmark: is robocache faster than the same operation written
in plain PyTorch, in eager mode and under torch.compile, on this machine?

    python -m robocache.bench [--device cpu|cuda] [--only KINDS]
        [--shape KIND:SIZES ...] [--json PATH] [--png PATH] [--robocache-only]

For each case it times robocache, the pure-PyTorch reference
(robocache.reference) in eager mode and the reference under torch.compile,
forward (and backward where listed), and says whether robocache is faster
than the compiled reference, and by how much.

Method:
- CUDA: triton.testing.do_bench (CUDA events, after warm-up; the median),
  with the L2 cache flushed between calls; where a case's inputs fit in L2
  they also rotate among several copies. Resample and fuse are also timed
  replayed from a CUDA graph, which takes the host's launch cost out of both
  robocache and the compiled reference; the tiny resample case is also timed
  per call from Python.
- CPU: the median of repeated wall-clock timings after warm-up.
- A backward is timed on its own: each input set's forward runs once, then
  torch.autograd.grad differentiates its output again and again
  (retain_graph), for robocache and both references alike.
- Each timing reports the spread of its repeats: their interquartile range
  as a % of their median; a row with a spread over 10% is flagged as too
  noisy to trust.
- Inputs are random (never zeros).

Bandwidth comes from the minimal bytes (every input read once, every output
written once) and is given as a % of a large copy measured in the same run
(device-to-device on a GPU, within host memory on the CPU), and as a % of a
copy that moves the row's own bytes (short kernels spend more of their time
ramping up than a large copy does).
Benchmarks are not tests: nothing here asserts a time.
"""

import time

import torch

from .cases import KINDS, Context, parse_shape, resample_inputs, shape_case, suite
from .report import plot, print_table, verdict
from .timing import NOISY_SPREAD_PCT, copy_bandwidth_gbs, noisy, same_bytes_copy

__all__ = [
    "KINDS",
    "main",
    "parse_shape",
    "plot",
    "print_table",
    "resample_inputs",
    "run",
    "verdict",
]


def run(device, only=None, shapes=None, references=True, progress=None):
    """Times the suite's cases (those whose kind is in `only`, if given), or
    the (kind, args) `shapes` read by parse_shape, and returns the results.
    `progress(line)` is called before and after each case."""
    torch.manual_seed(0)
    ctx = Context(device, copy_bandwidth_gbs(device), references)
    if shapes:
        cases = [shape_case(ctx, kind, args) for kind, args in shapes]
    else:
        cases = [(kind, thunk) for kind, thunk in suite(ctx) if not only or kind in only]
    rows = []
    for i, (kind, thunk) in enumerate(cases, 1):
        if progress:
            progress(f"[{i}/{len(cases)}] {kind} ...")
        start = time.perf_counter()
        row = thunk()
        copy = same_bytes_copy(row["bytes"], device)
        row["same_bytes_copy_ms"], row["same_bytes_copy_spread_pct"] = copy
        row["pct_of_same_bytes_copy"] = 100 * copy.ms / row["robocache_ms"]
        row["noisy"] = noisy(row)
        rows.append(row)
        if progress:
            progress(
                f"[{i}/{len(cases)}] {row['case']}: {row['robocache_ms']:.4f} ms"
                f"{', ' + verdict(row) if row['compiled_ms'] else ''} "
                f"({time.perf_counter() - start:.0f} s)"
            )
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "copy_GBps": ctx.copy_gbs,
        "noisy_spread_pct": NOISY_SPREAD_PCT,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }


def main(argv=None):
    from .cli import main as cli_main

    return cli_main(argv)
