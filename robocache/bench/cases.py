"""robocache's benchmark suite: ``python -m robocache.bench [--device DEV] [--json PATH] [--only KINDS]``.

For each case it times robocache, the pure-PyTorch reference in eager mode and
the reference under ``torch.compile``, forward (and backward where listed), on
whatever device is present (CUDA if available, else the CPU).

Method:
- CUDA: ``triton.testing.do_bench`` (CUDA events, after warm-up; the median),
  with the L2 cache flushed between calls by do_bench; where a case's working
  set fits in L2 the inputs also rotate among several copies. Launch-bound
  cases are also timed per call from Python (a host loop, synchronized once).
- CUDA, resample and fuse rows: robocache and the compiled reference are also
  timed replayed from a CUDA graph (``triton.testing.do_bench_cudagraph``,
  median), which removes the host's launch cost from both: small cases whose
  compiled calls are host-bound are compared on GPU time there.
- CPU: the median of repeated wall-clock timings after warm-up.
- Inputs are random (never zeros).

Bandwidth is computed from the minimal byte count: every input read once and
every output written once (the formula of each case is printed with it), and
is reported as a fraction of a large device-to-device copy measured in the
same run (bytes read + bytes written), and also against a copy that moves the
same number of bytes as the case (half read, half written), timed the same
way: a kernel of tens of microseconds spends a larger share of its time
ramping up and draining than a large copy does. Benchmarks are not tests:
nothing here asserts a time.
"""

import argparse
import json
import math
import statistics
import time

import torch

import robocache
from robocache import reference
from robocache.episodes import depth_camera_cloud

_L2_BYTES = 64 << 20


def _sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def _median_ms(fn, device, min_time_s=0.5, max_reps=200):
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


def _per_call_ms(fn, device, calls=2000):
    """Wall time per call of fn() issued back to back from Python."""
    for _ in range(20):
        fn()
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    _sync(device)
    return (time.perf_counter() - t0) / calls * 1e3


def copy_bandwidth_gbs(device):
    n = (1 << 28) if device == "cuda" else (1 << 25)
    x = torch.randn(n, device=device)
    y = torch.empty_like(x)
    ms = _median_ms(lambda: y.copy_(x), device)
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
    return _median_ms(lambda: y.copy_(x), device)


class _Rotating:
    """Cycles through several copies of the inputs when they fit in L2."""

    def __init__(self, make, nbytes, device):
        copies = (
            1
            if device != "cuda" or nbytes > _L2_BYTES
            else min(16, max(2, (4 * _L2_BYTES) // max(nbytes, 1)))
        )
        self.sets = [make() for _ in range(copies)]
        self.i = 0

    def next(self):
        self.i = (self.i + 1) % len(self.sets)
        return self.sets[self.i]


def _nbytes(*tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def _row(name, kind, bytes_formula, nbytes, ms, ref_ms, compiled_ms, copy_gbs, extra=None):
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


_REFERENCES = True  # --robocache-only turns the eager and compiled timings off


def _graph_ms(fn):
    """Median GPU time of fn() replayed from a CUDA graph (no host launch cost),
    or None where fn cannot be captured."""
    import triton.testing

    try:
        return triton.testing.do_bench_cudagraph(fn, rep=100, return_mode="median")
    except Exception:  # noqa: BLE001 - a capture failure only means "not measured"
        return None


def _time_three(op, ref, args_source, device, compile_ref=True, backward=None, graphs=None):
    """(robocache ms, eager ms, compiled ms). With `graphs` (a dict) on CUDA,
    also records robocache's and the compiled reference's times under CUDA
    graphs there, which take the host's launch cost out of both."""
    ms = _median_ms(lambda: op(*args_source.next()), device)
    if graphs is not None and device == "cuda":
        graphs["graph_robocache_ms"] = _graph_ms(lambda: op(*args_source.next()))
    if not _REFERENCES:
        return ms, None, None
    ref_ms = _median_ms(lambda: ref(*args_source.next()), device)
    compiled_ms = None
    if compile_ref:
        compiled = torch.compile(ref, dynamic=False)
        for _ in range(3):
            compiled(*args_source.next())
        compiled_ms = _median_ms(lambda: compiled(*args_source.next()), device)
        if graphs is not None and device == "cuda":
            graphs["graph_compiled_ms"] = _graph_ms(lambda: compiled(*args_source.next()))
    return ms, ref_ms, compiled_ms


# ---------------------------------------------------------------------------
# resample / fuse
# ---------------------------------------------------------------------------


def _resample_inputs(B, S, T, D, dtype, device):
    values = torch.randn(B, S, D, device=device).to(dtype)
    times = torch.sort(torch.rand(B, S, device=device) * 10, dim=1).values
    query = torch.sort(torch.rand(B, T, device=device) * 10, dim=1).values
    return values, times, query


def bench_resample(B, S, T, D, dtype, device, copy_gbs, per_call=False):
    name = f"resample fwd (B={B}, S={S}, T={T}, D={D}) {str(dtype).replace('torch.', '')}"
    es = torch.empty((), dtype=dtype).element_size()
    nbytes = B * S * D * es + B * S * 4 + B * T * 4 + B * T * D * es
    formula = "values + times + query_times read once, output written once"
    src = _Rotating(lambda: _resample_inputs(B, S, T, D, dtype, device), nbytes, device)
    op = lambda v, t, q: robocache.resample(v, t, q)  # noqa: E731
    extra = {}
    ms, ref_ms, compiled_ms = _time_three(op, reference.resample, src, device, graphs=extra)
    if per_call and _REFERENCES:
        v, t, q = src.next()
        compiled = torch.compile(reference.resample, dynamic=False)
        compiled(v, t, q)
        extra.update(
            {
                "per_call_robocache_ms": _per_call_ms(lambda: robocache.resample(v, t, q), device),
                "per_call_eager_ms": _per_call_ms(lambda: reference.resample(v, t, q), device),
                "per_call_compiled_ms": _per_call_ms(lambda: compiled(v, t, q), device),
            }
        )
        extra["per_call_speedup_vs_compiled"] = (
            extra["per_call_compiled_ms"] / extra["per_call_robocache_ms"]
        )
    return _row(name, "resample", formula, nbytes, ms, ref_ms, compiled_ms, copy_gbs, extra)


def bench_resample_backward(B, S, T, D, dtype, device, copy_gbs):
    name = f"resample bwd (B={B}, S={S}, T={T}, D={D}) {str(dtype).replace('torch.', '')}"
    es = torch.empty((), dtype=dtype).element_size()
    # read grad_out, values (for the query slope), times, query; write grad_values, grad_query
    nbytes = B * T * D * es + B * S * D * es + B * S * 4 + B * T * 4 + B * S * D * es + B * T * 4
    formula = "grad_out + values + times + query read once; grad_values + grad_query written once"

    def make():
        v, t, q = _resample_inputs(B, S, T, D, dtype, device)
        return (
            v.requires_grad_(),
            t,
            q.requires_grad_(),
            torch.randn(B, T, D, device=device).to(dtype),
        )

    src = _Rotating(make, nbytes, device)

    def grads(fn):
        def run(v, t, q, g):
            return torch.autograd.grad(fn(v, t, q), (v, q), g)

        return run

    def forward_only(fn):
        def run(v, t, q, g):
            with torch.no_grad():
                return fn(v, t, q)

        return run

    # Each column is (forward + backward) - forward of the same implementation.
    ms = _median_ms(lambda: grads(robocache.resample)(*src.next()), device) - _median_ms(
        lambda: forward_only(robocache.resample)(*src.next()), device
    )
    if not _REFERENCES:
        return _row(name, "resample_backward", formula, nbytes, ms, None, None, copy_gbs)
    ref_ms = _median_ms(lambda: grads(reference.resample)(*src.next()), device) - _median_ms(
        lambda: forward_only(reference.resample)(*src.next()), device
    )
    compiled = torch.compile(reference.resample, dynamic=False)
    for _ in range(3):
        grads(compiled)(*src.next())
        forward_only(compiled)(*src.next())
    compiled_ms = _median_ms(lambda: grads(compiled)(*src.next()), device) - _median_ms(
        lambda: forward_only(compiled)(*src.next()), device
    )
    return _row(
        name,
        "resample_backward",
        formula,
        nbytes,
        ms,
        ref_ms,
        compiled_ms,
        copy_gbs,
        {"note": "backward = (forward+backward) - forward, for all three"},
    )


def bench_fuse(B, specs, T, device, copy_gbs):
    name = f"fuse (B={B}, streams (S,D)={specs}, T={T}) float32"
    nbytes = (
        sum(B * S * D * 4 + B * S * 4 for S, D in specs)
        + B * T * 4
        + B * T * sum(D for _, D in specs) * 4
    )
    formula = "every stream's values + times, query_times read once; output written once"

    def make():
        streams = []
        for S, D in specs:
            streams.append(
                (
                    torch.randn(B, S, D, device=device),
                    torch.sort(torch.rand(B, S, device=device), dim=1).values,
                )
            )
        query = torch.sort(torch.rand(B, T, device=device), dim=1).values
        return streams, query

    src = _Rotating(make, nbytes, device)
    extra = {}
    ms, ref_ms, compiled_ms = _time_three(
        lambda s, q: robocache.fuse(s, q),
        lambda s, q: reference.fuse(s, q),
        src,
        device,
        graphs=extra,
    )
    return _row(name, "fuse", formula, nbytes, ms, ref_ms, compiled_ms, copy_gbs, extra)


# ---------------------------------------------------------------------------
# voxelize
# ---------------------------------------------------------------------------


def bench_voxelize(name, points, features, grid, reduce, device, copy_gbs):
    B, N = points.shape[:2]
    C = 0 if features is None else features.shape[-1]
    cells = math.prod(grid)
    out_es = 4 if reduce in ("count", "occupancy") else features.element_size()
    nbytes = _nbytes(points, features) + B * max(C, 1) * cells * out_es
    formula = "points (+ features) read once; dense grid written once"
    vs = 1.0 / grid[0]

    def make():
        p = points + 1e-4 * torch.randn_like(points)
        f = None if features is None else torch.randn_like(features)
        return p, f

    src = _Rotating(make, nbytes, device)
    op = lambda p, f: robocache.voxelize(p, grid, vs, (0, 0, 0), features=f, reduce=reduce)  # noqa: E731
    ref = lambda p, f: reference.voxelize(p, grid, vs, (0, 0, 0), features=f, reduce=reduce)  # noqa: E731
    ms, ref_ms, compiled_ms = _time_three(op, ref, src, device)
    outside = 1 - float(robocache.voxelize(points, grid, vs, (0, 0, 0), reduce="count").sum()) / (
        B * N
    )
    extra = {"Gpts_per_s": B * N / ms / 1e6, "fraction_outside": outside}
    return _row(name, "voxelize", formula, nbytes, ms, ref_ms, compiled_ms, copy_gbs, extra)


# ---------------------------------------------------------------------------


def _cases(device, copy_gbs):
    """(name, thunk) for every case on this device; the names are what --only matches."""
    f32, bf16 = torch.float32, torch.bfloat16
    if device != "cuda":
        return [
            ("resample", lambda: bench_resample(64, 4096, 1024, 32, f32, device, copy_gbs)),
            (
                "voxelize",
                lambda: bench_voxelize(
                    "voxelize count, 8 x 100000 pts -> 128^3",
                    torch.rand(8, 100000, 3),
                    None,
                    (128, 128, 128),
                    "count",
                    device,
                    copy_gbs,
                ),
            ),
        ]
    return [
        ("resample", lambda: bench_resample(256, 2048, 2048, 64, f32, device, copy_gbs)),
        ("resample", lambda: bench_resample(256, 2048, 2048, 64, bf16, device, copy_gbs)),
        ("resample", lambda: bench_resample(64, 4096, 1024, 32, f32, device, copy_gbs)),
        ("resample", lambda: bench_resample(1024, 500, 100, 14, f32, device, copy_gbs)),
        ("resample", lambda: bench_resample(4, 10, 20, 8, f32, device, copy_gbs, per_call=True)),
        ("backward", lambda: bench_resample_backward(256, 2048, 2048, 64, f32, device, copy_gbs)),
        (
            "fuse",
            lambda: bench_fuse(256, [(90, 512), (300, 32), (3000, 16)], 150, device, copy_gbs),
        ),
        (
            "voxelize",
            lambda: bench_voxelize(
                "voxelize count, 8 x 307200 pts -> 100^3, uniform",
                torch.rand(8, 307200, 3, device=device),
                None,
                (100, 100, 100),
                "count",
                device,
                copy_gbs,
            ),
        ),
        (
            "voxelize",
            lambda: bench_voxelize(
                "voxelize count, 8 x 307200 pts -> 100^3, depth camera",
                depth_camera_cloud(8, device=device),
                None,
                (100, 100, 100),
                "count",
                device,
                copy_gbs,
            ),
        ),
        (
            "voxelize",
            lambda: bench_voxelize(
                "voxelize mean of 6 features, 8 x 65536 pts -> 100^3",
                torch.rand(8, 65536, 3, device=device),
                torch.randn(8, 65536, 6, device=device),
                (100, 100, 100),
                "mean",
                device,
                copy_gbs,
            ),
        ),
        (
            "voxelize",
            lambda: bench_voxelize(
                "voxelize occupancy, 32 x 100000 pts -> 128^3",
                torch.rand(32, 100000, 3, device=device),
                None,
                (128, 128, 128),
                "occupancy",
                device,
                copy_gbs,
            ),
        ),
    ]


def run(device, only=None):
    """Runs the cases (those whose kind is in `only`, if given) and returns the results."""
    torch.manual_seed(0)
    copy_gbs = copy_bandwidth_gbs(device)
    rows = [thunk() for kind, thunk in _cases(device, copy_gbs) if not only or kind in only]
    for r in rows:
        r["same_bytes_copy_ms"] = same_bytes_copy_ms(r["bytes"], device)
        r["pct_of_same_bytes_copy"] = 100 * r["same_bytes_copy_ms"] / r["robocache_ms"]
    return {
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "copy_GBps": copy_gbs,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }


def print_table(result):
    print(
        f"device: {result['device']}  torch {result['torch']}  threads {result['threads']}  "
        f"copy {result['copy_GBps']:.0f} GB/s  ({result['date']})"
    )
    hdr = f"{'case':<62} {'robocache':>10} {'eager':>10} {'compiled':>10} {'GB/s':>7} {'%copy':>6} {'x eager':>8} {'x comp':>7}"
    print(hdr)
    for r in result["rows"]:
        eager = f"{r['eager_ms']:10.4f}" if r["eager_ms"] else f"{'-':>10}"
        comp = f"{r['compiled_ms']:10.4f}" if r["compiled_ms"] else f"{'-':>10}"
        xe = f"{r['speedup_vs_eager']:8.2f}" if r["speedup_vs_eager"] else f"{'-':>8}"
        xc = f"{r['speedup_vs_compiled']:7.2f}" if r["speedup_vs_compiled"] else f"{'-':>7}"
        print(
            f"{r['case'][:62]:<62} {r['robocache_ms']:10.4f} {eager} {comp} "
            f"{r['GBps']:7.0f} {r['pct_of_copy']:6.1f} {xe} {xc}"
        )
        if "per_call_robocache_ms" in r:
            print(
                f"{'   per call from Python':<62} {r['per_call_robocache_ms']:10.4f} "
                f"{r['per_call_eager_ms']:10.4f} {r['per_call_compiled_ms']:10.4f} "
                f"{'':>7} {'':>6} {'':>8} {r['per_call_speedup_vs_compiled']:7.2f}"
            )
        if r.get("graph_robocache_ms") or r.get("graph_compiled_ms"):
            g, gc = r.get("graph_robocache_ms"), r.get("graph_compiled_ms")
            fmt = lambda x: f"{x:10.4f}" if x else f"{'-':>10}"  # noqa: E731
            ratio = f"{gc / g:7.2f}" if g and gc else f"{'-':>7}"
            print(
                f"{'   under CUDA graphs':<62} {fmt(g)} {'':>10} {fmt(gc)} {'':>7} {'':>6} {'':>8} {ratio}"
            )
        if "same_bytes_copy_ms" in r:
            print(
                f"{'   a copy moving the same bytes':<62} {r['same_bytes_copy_ms']:10.4f} "
                f"{'':>10} {'':>10} {'':>7} {r['pct_of_same_bytes_copy']:6.1f}"
            )
        if "Gpts_per_s" in r:
            print(
                f"{'   points':<62} {r['Gpts_per_s']:10.2f} Gpts/s, {100 * r['fraction_outside']:.0f}% outside"
            )
    print(
        "times in ms (medians); GB/s from the minimal bytes: inputs read once, outputs written once;\n"
        "%copy: of the large copy above; under each row, a copy moving that row's bytes and the row's\n"
        "time as a % of it (short kernels cannot reach the large copy's bandwidth)"
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json", help="write the results here as JSON")
    parser.add_argument(
        "--only", help="comma-separated kinds to run: resample, backward, fuse, voxelize"
    )
    parser.add_argument(
        "--robocache-only",
        action="store_true",
        help="time robocache alone (no eager or compiled reference)",
    )
    args = parser.parse_args(argv)
    global _REFERENCES
    _REFERENCES = not args.robocache_only
    only = None
    if args.only:
        only = set(args.only.split(","))
        unknown = only - {"resample", "backward", "fuse", "voxelize"}
        if unknown:
            parser.error(f"--only: unknown kind(s) {sorted(unknown)}")
    result = run(args.device, only)
    print_table(result)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
