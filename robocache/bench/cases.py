"""The benchmark's cases: each times robocache, the pure-PyTorch reference
in eager mode and the reference under torch.compile, on inputs made here,
and returns one row of results."""

import math
from dataclasses import dataclass

import torch

import robocache
from robocache import reference
from robocache.data.synthetic import depth_camera_cloud

from .timing import (
    Rotating,
    backward_call,
    make_row,
    nbytes_of,
    per_call_ms,
    repeat_ms,
    time_three,
)


@dataclass
class Context:
    """What every case needs: the device, the large copy's bandwidth (GB/s)
    that rows are measured against, and whether to time the references."""

    device: str
    copy_gbs: float
    references: bool = True


# ---------------------------------------------------------------------------
# resample / fuse
# ---------------------------------------------------------------------------


def resample_inputs(B, S, T, D, dtype, device):
    values = torch.randn(B, S, D, device=device).to(dtype)
    times = torch.sort(torch.rand(B, S, device=device) * 10, dim=1).values
    query = torch.sort(torch.rand(B, T, device=device) * 10, dim=1).values
    return values, times, query


def bench_resample(ctx, B, S, T, D, dtype, per_call=False):
    device, copy_gbs = ctx.device, ctx.copy_gbs
    name = f"resample fwd (B={B}, S={S}, T={T}, D={D}) {str(dtype).replace('torch.', '')}"
    es = torch.empty((), dtype=dtype).element_size()
    nbytes = B * S * D * es + B * S * 4 + B * T * 4 + B * T * D * es
    formula = "values + times + query_times read once, output written once"
    src = Rotating(lambda: resample_inputs(B, S, T, D, dtype, device), nbytes, device)
    op = lambda v, t, q: robocache.resample(v, t, q)  # noqa: E731
    extra = {}
    timings = time_three(op, reference.resample, src, device, ctx.references, graphs=extra)
    if per_call and ctx.references:
        v, t, q = src.next()
        compiled = torch.compile(reference.resample, dynamic=False)
        compiled(v, t, q)
        extra.update(
            {
                "per_call_robocache_ms": per_call_ms(lambda: robocache.resample(v, t, q), device),
                "per_call_eager_ms": per_call_ms(lambda: reference.resample(v, t, q), device),
                "per_call_compiled_ms": per_call_ms(lambda: compiled(v, t, q), device),
            }
        )
        extra["per_call_speedup_vs_compiled"] = (
            extra["per_call_compiled_ms"] / extra["per_call_robocache_ms"]
        )
    return make_row(name, "resample", formula, nbytes, *timings, copy_gbs, extra)


def bench_resample_backward(ctx, B, S, T, D, dtype):
    device, copy_gbs = ctx.device, ctx.copy_gbs
    name = f"resample bwd (B={B}, S={S}, T={T}, D={D}) {str(dtype).replace('torch.', '')}"
    es = torch.empty((), dtype=dtype).element_size()
    # read grad_out, values (for the query slope), times, query; write grad_values, grad_query
    nbytes = B * T * D * es + B * S * D * es + B * S * 4 + B * T * 4 + B * S * D * es + B * T * 4
    formula = "grad_out + values + times + query read once; grad_values + grad_query written once"

    def make():
        v, t, q = resample_inputs(B, S, T, D, dtype, device)
        grad_out = torch.randn(B, T, D, device=device).to(dtype)
        return (v.requires_grad_(), t, q.requires_grad_()), grad_out

    input_sets = Rotating(make, nbytes, device).sets

    def backward(forward):
        # The forward runs here, once a set; only the backward is timed.
        call = backward_call(forward, input_sets)
        for _ in range(3):  # the compiled reference compiles its backward at the first
            call()
        return repeat_ms(call, device)

    timing = backward(robocache.resample)
    note = {"note": "the backward alone: each input set's forward runs once, before the timing"}
    if not ctx.references:
        return make_row(
            name, "resample_backward", formula, nbytes, timing, None, None, copy_gbs, note
        )
    ref = backward(reference.resample)
    compiled = backward(torch.compile(reference.resample, dynamic=False))
    return make_row(
        name, "resample_backward", formula, nbytes, timing, ref, compiled, copy_gbs, note
    )


def bench_fuse(ctx, B, specs, T):
    device, copy_gbs = ctx.device, ctx.copy_gbs
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

    src = Rotating(make, nbytes, device)
    extra = {}
    timings = time_three(
        lambda s, q: robocache.fuse(s, q),
        lambda s, q: reference.fuse(s, q),
        src,
        device,
        ctx.references,
        graphs=extra,
    )
    return make_row(name, "fuse", formula, nbytes, *timings, copy_gbs, extra)


# ---------------------------------------------------------------------------
# voxelize
# ---------------------------------------------------------------------------


def bench_voxelize(ctx, name, points, features, grid, reduce):
    device, copy_gbs = ctx.device, ctx.copy_gbs
    B, N = points.shape[:2]
    C = 0 if features is None else features.shape[-1]
    cells = math.prod(grid)
    out_es = 4 if reduce in ("count", "occupancy") else features.element_size()
    nbytes = nbytes_of(points, features) + B * max(C, 1) * cells * out_es
    formula = "points (+ features) read once; dense grid written once"
    vs = 1.0 / grid[0]

    def make():
        p = points + 1e-4 * torch.randn_like(points)
        f = None if features is None else torch.randn_like(features)
        return p, f

    src = Rotating(make, nbytes, device)
    op = lambda p, f: robocache.voxelize(p, grid, vs, (0, 0, 0), features=f, reduce=reduce)  # noqa: E731
    ref = lambda p, f: reference.voxelize(p, grid, vs, (0, 0, 0), features=f, reduce=reduce)  # noqa: E731
    timings = time_three(op, ref, src, device, ctx.references)
    outside = 1 - float(robocache.voxelize(points, grid, vs, (0, 0, 0), reduce="count").sum()) / (
        B * N
    )
    extra = {"Gpts_per_s": B * N / timings[0].ms / 1e6, "fraction_outside": outside}
    return make_row(name, "voxelize", formula, nbytes, *timings, copy_gbs, extra)


# ---------------------------------------------------------------------------
# the suite, and the user's own shapes
# ---------------------------------------------------------------------------

KINDS = ("resample", "backward", "fuse", "voxelize")

SHAPE_HELP = """\
--shape KIND:SIZES times your own sizes (repeat it for several; only those run):
  resample:B,S,T,D[,DTYPE]    B trajectories of S samples of D channels, T queries each
  backward:B,S,T,D[,DTYPE]    the same, its backward alone
  fuse:B,T,SxD[,SxD...]       B rows, T queries, one SxD per sensor stream
  voxelize:B,N,G[,REDUCE[,C]] B clouds of N points in a G^3 grid; REDUCE count
                              (default), occupancy, sum, mean or max; C features
                              (default 6) for sum, mean and max
  DTYPE: float32 (default), float64, float16 or bfloat16"""

_DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_REDUCES = ("count", "occupancy", "sum", "mean", "max")


def _voxel_case(ctx, name, points, grid, reduce, features=0):
    """("voxelize", thunk): the clouds (`points()`) and `features` random
    features a point are made when the case runs; the grid is grid^3."""

    def run():
        p = points()
        f = torch.randn(*p.shape[:2], features, device=ctx.device) if features else None
        return bench_voxelize(ctx, name, p, f, (grid, grid, grid), reduce)

    return "voxelize", run


def suite(ctx):
    """(kind, thunk) for every case of the standard suite on ctx.device."""
    f32, bf16, dev = torch.float32, torch.bfloat16, ctx.device
    if dev != "cuda":  # smaller sizes: a CPU run takes a minute, not ten
        return [
            ("resample", lambda: bench_resample(ctx, 64, 4096, 1024, 32, f32)),
            ("backward", lambda: bench_resample_backward(ctx, 16, 1024, 1024, 16, f32)),
            ("fuse", lambda: bench_fuse(ctx, 32, [(90, 64), (300, 32), (3000, 16)], 150)),
            _voxel_case(
                ctx, "voxelize count, 8 x 100000 pts -> 128^3",
                lambda: torch.rand(8, 100000, 3), 128, "count",
            ),
        ]  # fmt: skip
    return [
        ("resample", lambda: bench_resample(ctx, 256, 2048, 2048, 64, f32)),
        ("resample", lambda: bench_resample(ctx, 256, 2048, 2048, 64, bf16)),
        ("resample", lambda: bench_resample(ctx, 64, 4096, 1024, 32, f32)),
        ("resample", lambda: bench_resample(ctx, 1024, 500, 100, 14, f32)),
        ("resample", lambda: bench_resample(ctx, 4, 10, 20, 8, f32, per_call=True)),
        ("backward", lambda: bench_resample_backward(ctx, 256, 2048, 2048, 64, f32)),
        ("fuse", lambda: bench_fuse(ctx, 256, [(90, 512), (300, 32), (3000, 16)], 150)),
        _voxel_case(
            ctx, "voxelize count, 8 x 307200 pts -> 100^3, uniform",
            lambda: torch.rand(8, 307200, 3, device=dev), 100, "count",
        ),
        _voxel_case(
            ctx, "voxelize count, 8 x 307200 pts -> 100^3, depth camera",
            lambda: depth_camera_cloud(8, device=dev), 100, "count",
        ),
        _voxel_case(
            ctx, "voxelize mean of 6 features, 8 x 65536 pts -> 100^3",
            lambda: torch.rand(8, 65536, 3, device=dev), 100, "mean", features=6,
        ),
        _voxel_case(
            ctx, "voxelize occupancy, 32 x 100000 pts -> 128^3",
            lambda: torch.rand(32, 100000, 3, device=dev), 128, "occupancy",
        ),
    ]  # fmt: skip


def parse_shape(spec):
    """(kind, args) of a --shape spec, or ValueError saying what is wrong."""
    kind, sep, sizes = spec.partition(":")
    if not sep or kind not in KINDS:
        raise ValueError(f"--shape {spec!r}: expected KIND:SIZES with KIND one of {list(KINDS)}")
    parts = sizes.split(",")

    def positive(text, what):
        try:
            value = int(text)
        except ValueError:
            value = 0
        if value < 1:
            raise ValueError(f"--shape {spec!r}: {what} must be a positive integer, got {text!r}")
        return value

    if kind in ("resample", "backward"):
        if len(parts) not in (4, 5):
            raise ValueError(f"--shape {spec!r}: expected {kind}:B,S,T,D[,DTYPE]")
        B, S, T, D = (positive(x, n) for x, n in zip(parts, "BSTD"))
        dtype = parts[4] if len(parts) == 5 else "float32"
        if dtype not in _DTYPES:
            raise ValueError(f"--shape {spec!r}: DTYPE must be one of {list(_DTYPES)}")
        return kind, (B, S, T, D, _DTYPES[dtype])
    if kind == "fuse":
        if len(parts) < 3:
            raise ValueError(f"--shape {spec!r}: expected fuse:B,T,SxD[,SxD...]")
        B, T = positive(parts[0], "B"), positive(parts[1], "T")
        specs = []
        for part in parts[2:]:
            S, x, D = part.partition("x")
            if not x:
                raise ValueError(f"--shape {spec!r}: a stream is SxD (e.g. 300x32), got {part!r}")
            specs.append((positive(S, "a stream's S"), positive(D, "a stream's D")))
        return kind, (B, specs, T)
    if len(parts) not in (3, 4, 5):
        raise ValueError(f"--shape {spec!r}: expected voxelize:B,N,G[,REDUCE[,C]]")
    B, N, G = (positive(x, n) for x, n in zip(parts, ("B", "N", "G")))
    reduce = parts[3] if len(parts) > 3 else "count"
    if reduce not in _REDUCES:
        raise ValueError(f"--shape {spec!r}: REDUCE must be one of {list(_REDUCES)}")
    C = positive(parts[4], "C") if len(parts) > 4 else 6
    return kind, (B, N, G, reduce, C)


def shape_case(ctx, kind, args):
    """(kind, thunk) timing the sizes parse_shape read."""
    if kind == "resample":
        return kind, lambda: bench_resample(ctx, *args)
    if kind == "backward":
        return kind, lambda: bench_resample_backward(ctx, *args)
    if kind == "fuse":
        return kind, lambda: bench_fuse(ctx, *args)
    B, N, G, reduce, C = args
    pooled = reduce in ("sum", "mean", "max")
    name = f"voxelize {f'{reduce} of {C} features' if pooled else reduce}, {B} x {N} pts -> {G}^3"
    return _voxel_case(
        ctx, name, lambda: torch.rand(B, N, 3, device=ctx.device), G, reduce, C if pooled else 0
    )
