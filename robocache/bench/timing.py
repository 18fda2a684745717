"""Timing helpers of the benchmark: medians of CUDA events or wall clock,
CUDA-graph replays, and the copies that bound each case."""

import statistics
import time

import torch

L2_BYTES = 64 << 20


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def median_ms(fn, device, min_time_s=0.5, max_reps=200):
    """Median time of fn() in milliseconds."""
    if device == "cuda":
        import triton.testing

        return triton.testing.do_bench(fn, warmup=50, rep=200, return_mode="median")
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time_s or len(times) < 5):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def per_call_ms(fn, device, calls=2000):
    """Wall time per call of fn() issued back to back from Python."""
    for _ in range(20):
        fn()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync(device)
    return (time.perf_counter() - t0) / calls * 1e3


def copy_bandwidth_gbs(device):
    n = (1 << 28) if device == "cuda" else (1 << 25)
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x), device)
    return 2 * x.numel() * x.element_size() / ms / 1e6


def same_bytes_copy_ms(nbytes, device):
    """Median time of a device-to-device copy that moves `nbytes` in all
    (nbytes / 2 read, nbytes / 2 written). Short kernels do not reach the
    bandwidth of the large copy behind copy_GBps (ramp-up and drain are a
    larger share of their time), so each row also reports its bandwidth as
    a % of this copy."""
    n = max(nbytes // 8, 1)
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    return median_ms(lambda: y.copy_(x), device)


class Rotating:
    """Cycles through several copies of the inputs when they fit in L2."""

    def __init__(self, make, nbytes, device):
        copies = (
            1
            if device != "cuda" or nbytes > L2_BYTES
            else min(16, max(2, (4 * L2_BYTES) // max(nbytes, 1)))
        )
        self.sets = [make() for _ in range(copies)]
        self.i = 0

    def next(self):
        self.i = (self.i + 1) % len(self.sets)
        return self.sets[self.i]


def nbytes_of(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def make_row(name, kind, bytes_formula, nbytes, ms, ref_ms, compiled_ms, copy_gbs, extra=None):
    gbs = nbytes / ms / 1e6 if ms else float("nan")
    row = {
        "case": name,
        "kind": kind,
        "bytes": nbytes,
        "bytes_formula": bytes_formula,
        "robocache_ms": ms,
        "eager_ms": ref_ms,
        "compiled_ms": compiled_ms,
        "GBps": gbs,
        "pct_of_copy": 100 * gbs / copy_gbs,
        "speedup_vs_eager": ref_ms / ms if ref_ms else None,
        "speedup_vs_compiled": compiled_ms / ms if compiled_ms else None,
    }
    if extra:
        row.update(extra)
    return row


def graph_ms(fn):
    """Median GPU time of fn() replayed from a CUDA graph (no host launch cost),
    or None where fn cannot be captured."""
    import triton.testing

    try:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    except Exception:  # noqa: BLE001 - a capture failure only means "not measured"
        return None


def time_three(op, ref, args_source, device, references=True, graphs=None):
    """(robocache ms, eager ms, compiled ms); the last two None without
    `references`. With `graphs` (a dict) on CUDA, also records robocache's
    and the compiled reference's times under CUDA graphs there, which take
    the host's launch cost out of both."""
    ms = median_ms(lambda: op(*args_source.next()), device)
    if graphs is not None and device == "cuda":
        graphs["graph_robocache_ms"] = graph_ms(lambda: op(*args_source.next()))
    if not references:
        return ms, None, None
    ref_ms = median_ms(lambda: ref(*args_source.next()), device)
    compiled = torch.compile(ref, dynamic=False)
    for _ in range(3):
        compiled(*args_source.next())
    compiled_ms = median_ms(lambda: compiled(*args_source.next()), device)
    if graphs is not None and device == "cuda":
        graphs["graph_compiled_ms"] = graph_ms(lambda: compiled(*args_source.next()))
    return ms, ref_ms, compiled_ms
