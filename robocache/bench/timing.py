"""Timing helpers of the benchmark: medians of CUDA events or wall clock and
the spread of their repeats, CUDA-graph replays, backward passes timed on
their own, and the copies that bound each case."""

import itertools
import statistics
import time
from typing import NamedTuple

import torch

L2_BYTES = 64 << 20
# A timing whose repeats spread wider than this (interquartile range, as a %
# of the median) is flagged as too noisy to trust.
NOISY_SPREAD_PCT = 10.0
QUARTILES = [0.25, 0.5, 0.75]


class Timing(NamedTuple):
    """The median of a timing's repeats (ms), and their spread: the
    interquartile range as a % of the median."""

    ms: float
    spread_pct: float

    @classmethod
    def of_quartiles(cls, q1, median, q3):
        return cls(median, 100 * (q3 - q1) / median if median > 0 else float("nan"))


def sync(device):
    """Waits for the device's work (a CUDA device; nothing on the CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def repeat_ms(fn, device, min_time_s=0.5, max_reps=200):
    """The Timing of repeated calls of fn(), after warm-up."""
    if device == "cuda":
        import triton.testing

        return Timing.of_quartiles(
            *triton.testing.do_bench(fn, warmup=50, rep=200, quantiles=QUARTILES)
        )
    fn()
    times = []
    start = time.perf_counter()
    while len(times) < max_reps and (time.perf_counter() - start < min_time_s or len(times) < 5):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return Timing.of_quartiles(*statistics.quantiles(times, n=4))


def median_ms(fn, device, min_time_s=0.5, max_reps=200):
    """Median time of fn() in milliseconds."""
    return repeat_ms(fn, device, min_time_s, max_reps).ms


def backward_call(forward, input_sets):
    """A call that runs a backward pass and nothing else: `forward(*inputs)`
    runs here, once for each (inputs, grad_out) of `input_sets`; each call
    then differentiates the next set's output with respect to its inputs that
    require grad, keeping the graph for the next time (retain_graph). A
    timing of it is the backward's own, never a difference of two timings
    (which can come out negative)."""
    graphs = []
    for inputs, grad_out in input_sets:
        wrt = tuple(x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad)
        graphs.append((forward(*inputs), wrt, grad_out))
    graphs = itertools.cycle(graphs)

    def backward():
        out, wrt, grad_out = next(graphs)
        return torch.autograd.grad(out, wrt, grad_out, retain_graph=True)

    return backward


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


def same_bytes_copy(nbytes, device):
    """The Timing of a copy on `device` (within its memory) that moves `nbytes` in all
    (nbytes / 2 read, nbytes / 2 written). Short kernels do not reach the
    bandwidth of the large copy behind copy_GBps (ramp-up and drain are a
    larger share of their time), so each row also reports its bandwidth as
    a % of this copy."""
    n = max(nbytes // 8, 1)
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    return repeat_ms(lambda: y.copy_(x), device)


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


def make_row(name, kind, bytes_formula, nbytes, timing, ref, compiled, copy_gbs, extra=None):
    """One row of results: robocache's `timing`, and the eager (`ref`) and
    compiled references' (Timing, or None where not timed)."""
    ms = timing.ms
    ref_ms = ref.ms if ref else None
    compiled_ms = compiled.ms if compiled else None
    gbs = nbytes / ms / 1e6 if ms else float("nan")
    row = {
        "case": name,
        "kind": kind,
        "bytes": nbytes,
        "bytes_formula": bytes_formula,
        "robocache_ms": ms,
        "eager_ms": ref_ms,
        "compiled_ms": compiled_ms,
        "robocache_spread_pct": timing.spread_pct,
        "eager_spread_pct": ref.spread_pct if ref else None,
        "compiled_spread_pct": compiled.spread_pct if compiled else None,
        "GBps": gbs,
        "pct_of_copy": 100 * gbs / copy_gbs,
        "speedup_vs_eager": ref_ms / ms if ref_ms else None,
        "speedup_vs_compiled": compiled_ms / ms if compiled_ms else None,
    }
    if extra:
        row.update(extra)
    return row


def spreads(row):
    """Every spread (%) the row reports, by the name of its timing."""
    return {
        key.removesuffix("_spread_pct"): value
        for key, value in row.items()
        if key.endswith("_spread_pct") and value is not None
    }


def noisy(row):
    """Whether any of the row's timings spread wider than NOISY_SPREAD_PCT."""
    return any(not value <= NOISY_SPREAD_PCT for value in spreads(row).values())


def graph_timing(fn):
    """The Timing of fn() replayed from a CUDA graph (no host launch cost),
    or None where fn cannot be captured."""
    import triton.testing

    try:
        quartiles = triton.testing.do_bench_cudagraph(fn, rep=100, quantiles=QUARTILES)
    except Exception:  # noqa: BLE001 - a capture failure only means "not measured"
        return None
    return Timing.of_quartiles(*quartiles)


def record_graph(graphs, name, fn):
    """graphs[graph_<name>_ms] and its spread, from graph_timing(fn)."""
    timing = graph_timing(fn)
    graphs[f"graph_{name}_ms"] = timing.ms if timing else None
    graphs[f"graph_{name}_spread_pct"] = timing.spread_pct if timing else None


def time_three(op, ref, args_source, device, references=True, graphs=None):
    """Timings of (robocache, eager, compiled); the last two None without
    `references`. With `graphs` (a dict) on CUDA, also records robocache's
    and the compiled reference's times under CUDA graphs there, which take
    the host's launch cost out of both."""
    timing = repeat_ms(lambda: op(*args_source.next()), device)
    if graphs is not None and device == "cuda":
        record_graph(graphs, "robocache", lambda: op(*args_source.next()))
    if not references:
        return timing, None, None
    ref_timing = repeat_ms(lambda: ref(*args_source.next()), device)
    compiled = torch.compile(ref, dynamic=False)
    for _ in range(3):
        compiled(*args_source.next())
    compiled_timing = repeat_ms(lambda: compiled(*args_source.next()), device)
    if graphs is not None and device == "cuda":
        record_graph(graphs, "compiled", lambda: compiled(*args_source.next()))
    return timing, ref_timing, compiled_timing


# Loops of calls, for the scripts in benchmark/.


def per_batch_seconds(make_batch, device, batches, repeats=5):
    """Median over repeats of (time for `batches` batches) / batches."""
    make_batch()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            make_batch()
        sync(device)
        times.append((time.perf_counter() - start) / batches)
    return statistics.median(times)


def graph_seconds(fn, device, per_graph=1):
    """fn() captured `per_graph` times in one CUDA graph; seconds per call
    (median of CUDA-event timings of 20 replays)."""
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        for _ in range(3):
            fn()
    torch.cuda.current_stream(device).wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    times = []
    for _ in range(50):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(20):
            graph.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 20 / per_graph / 1e3)
    return statistics.median(times)
