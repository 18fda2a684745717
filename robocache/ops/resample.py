"""``robocache.resample``: batched trajectories onto new timestamps.

The wrapper over ``torch.ops.robocache.resample``, its autograd (reverse,
forward and double backward) and its vmap rules.
"""

import numbers

import torch

from .._ops import (
    OPS,
    SingleLevelFunction,
    batch_size,
    below_autograd,
    check_mode,
    check_tensor,
    defined,
    fold_rows,
    logical_dim,
    on_meta,
    padded_in_dims,
    register_autograd,
    require_kernels,
    unfold_rows,
)
from . import _interp_grad as grad_terms
from .windows import sample_windows

_OP = "robocache.resample"


def resample(
    values, times, query_times, lengths=None, mode="linear", *, interval=None, check=False
):
    """Resample batched trajectories onto new timestamps.

    Args:
        values: (B, S, D) samples; float32, float64, float16 or bfloat16.
        times: (B, S) sample times, or (S,) shared by the batch; float32,
            float64 or int64 (e.g. nanosecond stamps). Must be finite and
            non-decreasing within each row's valid samples; this is not
            checked unless ``check=True``.
        query_times: (B, T) or (T,) times to sample at; same dtype as ``times``.
        lengths: optional (B,) int64 tensor, the number of valid leading
            samples per row (default S). Samples past it are ignored.
        mode: ``"linear"`` (interpolate), ``"nearest"`` (closest sample; a tie
            goes to the later one), ``"previous"`` (zero-order hold: the last
            sample at or before the query) or ``"mean"`` (the mean of the
            samples in ``(q - interval, q]``: downsampling without aliasing;
            int64 times, run by ``sample_windows``; an empty interval holds
            the previous sample).
        interval: for ``"mean"``, the interval in the times' unit (int; e.g.
            the query timeline's step in nanoseconds).
        check: validate the shapes, then ``lengths`` and the times (finite,
            non-decreasing, and for float32 fine enough to resolve their own
            spacing), and raise on a violation. This reads tensor data, so on
            a GPU it synchronizes the host; it is meant for debugging, not for
            compiled graphs.

    Returns:
        (B, T, D) tensor in the dtype of ``values``.

    Queries outside the valid range take the first/last valid sample; a query
    exactly at a sample time returns that sample exactly; repeated times are
    right-continuous; a NaN query gives NaN. Weights are computed in the
    precision of the times (float64 for float64 and int64 times). Non-finite
    values follow numpy.interp (docs/ops.md).

    Without ``check=True`` the CUDA kernel never reads ``lengths`` on the host:
    a row with length < 1 comes out as NaN and a length above S is treated as
    S. The CPU kernel raises for lengths outside [1, S].

    Gradients flow to ``values``, ``query_times`` and floating ``times``
    (for ``linear``, the slope: the right-hand slope at a knot, zero outside
    the range; zero for ``nearest`` and ``previous``), to any order; for
    ``mean``, to ``values`` only.
    """
    check_tensor(values, "values", _OP)
    check_tensor(times, "times", _OP)
    check_tensor(query_times, "query_times", _OP)
    check_tensor(lengths, "lengths", _OP, optional=True)
    if mode == "mean":
        if check:
            check_times_data(values, times, lengths, _OP)
        return _resample_mean(values, times, query_times, lengths, interval)
    check_mode(mode, "mode", _OP)
    if interval is not None:
        raise ValueError(f"{_OP}: interval is for mode 'mean' only; got mode {mode!r}")
    require_kernels(_OP, values, times, query_times, lengths)
    if check:
        OPS.resample(*on_meta((values, times, query_times, lengths)), mode)  # shapes first
        check_times_data(values, times, lengths, _OP)
    return OPS.resample(values, times, query_times, lengths, mode)


def check_times_data(values, times, lengths, op):
    """check=True: lengths in [1, S], and finite, non-decreasing times that
    resolve their own sampling period. Reads tensor data (a host sync on the GPU)."""
    B, S = values.shape[0], values.shape[1]
    if lengths is not None:
        bad = ((lengths < 1) | (lengths > S)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(
                f"{op}: lengths[{b}] = {int(lengths[b])} is outside [1, S] with S = {S}"
            )
    t = times.expand(B, S)
    limit = lengths.view(B, 1) if lengths is not None else torch.full((B, 1), S, device=t.device)
    valid = torch.arange(S, device=t.device) < limit

    def where(b, j):
        return f"times[{j}]" if times.dim() == 1 else f"times[{b}, {j}]"

    if t.is_floating_point():
        bad = (~torch.isfinite(t) & valid).nonzero()
        if bad.numel():
            b, j = int(bad[0, 0]), int(bad[0, 1])
            raise ValueError(f"{op}: times must be finite; {where(b, j)} = {t[b, j].item()}")
    if S < 2:
        return
    decreasing = (t[:, 1:] < t[:, :-1]) & valid[..., 1:]
    bad = decreasing.nonzero()
    if bad.numel():
        b, j = int(bad[0, 0]), int(bad[0, 1]) + 1
        raise ValueError(
            f"{op}: times must be non-decreasing within the valid samples; "
            f"{where(b, j)} = {t[b, j].item()} < the sample before it "
            f"({t[b, j - 1].item()})"
        )
    if t.dtype == torch.float32:
        _check_time_resolution(t, valid, op)


def _check_time_resolution(t, valid, op):
    """float32 times too coarse for their own spacing (e.g. unix-epoch seconds:
    at 1.7e9 a float32 step is 128 s, so 100 Hz samples collapse)."""
    n = valid.sum(1)
    rows = (n >= 2).nonzero().flatten()
    if rows.numel() == 0:
        return
    big = torch.finfo(t.dtype).max
    first = torch.where(valid, t, big).amin(1)
    last = torch.where(valid, t, -big).amax(1)
    magnitude = torch.maximum(first.abs(), last.abs())
    step = torch.nextafter(magnitude, torch.full_like(magnitude, torch.inf)) - magnitude
    period = (last - first) / (n - 1).clamp(min=1)
    bad = ((period < 4 * step) & (n >= 2)).nonzero()
    if bad.numel():
        b = int(bad[0, 0])
        raise ValueError(
            f"{op}: float32 times cannot resolve their own sampling period in row {b}: near "
            f"{magnitude[b].item():.6g} a float32 step is {step[b].item():.3g}, but the samples "
            f"are {period[b].item():.3g} apart on average. Use float64 or int64 nanosecond "
            "times, or subtract the episode's start time first"
        )


def _resample_mean(values, times, query_times, lengths, interval):
    """resample's interval mean through sample_windows: each row is an
    episode of a packed stream (its padding past ``lengths`` another, never
    read)."""
    if times.dtype != torch.int64 or query_times.dtype != torch.int64:
        raise TypeError(
            f"{_OP}: mode 'mean' needs int64 times and query_times (e.g. nanoseconds); got "
            f"{times.dtype} and {query_times.dtype}"
        )
    if isinstance(interval, bool) or not isinstance(interval, numbers.Integral) or interval <= 0:
        raise ValueError(f"{_OP}: mode 'mean' needs interval, a positive int; got {interval!r}")
    if values.dim() != 3:
        raise ValueError(f"{_OP}: values must be 3-D (B, S, D); got shape {list(values.shape)}")
    B, S, D = values.shape
    if S == 0:
        raise ValueError(f"{_OP}: values has no source samples (S == 0); resampling needs one")
    if times.shape not in ((S,), (B, S)) or query_times.dim() not in (1, 2):
        raise ValueError(
            f"{_OP}: times must be (B, S) or (S,) and query_times (B, T) or (T,); got values "
            f"{list(values.shape)}, times {list(times.shape)}, query_times "
            f"{list(query_times.shape)}"
        )
    device = values.device
    starts = torch.arange(B, device=device) * S
    if lengths is None:
        offsets = torch.cat([starts, torch.full((1,), B * S, device=device)])
        episode = torch.arange(B, device=device)
    else:
        if not values.is_cuda and bool(((lengths < 1) | (lengths > S)).any()):
            raise ValueError(f"{_OP}: lengths must lie in [1, S = {S}]; got {lengths.tolist()}")
        ends = starts + lengths.clamp(0, S)
        offsets = torch.cat(
            [torch.stack([starts, ends], 1).reshape(-1), starts.new_full((1,), B * S)]
        )
        episode = 2 * torch.arange(B, device=device)
    query = query_times.expand(B, query_times.shape[-1]).contiguous()
    flat_times = times.expand(B, S).reshape(B * S)
    out, _, _ = sample_windows(
        values.reshape(B * S, D), flat_times, offsets, episode, query, "mean", interval=interval
    )
    if lengths is not None:  # a row without samples is NaN, as in the other modes
        out = torch.where((lengths < 1).view(B, 1, 1), torch.full_like(out, torch.nan), out)
    return out


# ---------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------


class _Resample(SingleLevelFunction):
    @staticmethod
    def forward(values, times, query_times, lengths, mode):
        return below_autograd(OPS.resample, values, times, query_times, lengths, mode)

    @staticmethod
    def setup_context(ctx, inputs, output):
        values, times, query_times, lengths, mode = inputs
        ctx.mode = mode
        ctx.save_for_backward(values, times, query_times, lengths)
        ctx.save_for_forward(values, times, query_times, lengths)

    @staticmethod
    def backward(ctx, grad):
        values, times, query_times, lengths = ctx.saved_tensors
        need_values, need_times, need_query = ctx.needs_input_grad[:3]
        grad_values, grad_query = OPS._resample_backward(
            grad, values, times, query_times, lengths, ctx.mode, need_values, need_query
        )
        grad_times = None
        if need_times:
            seg = grad_terms.Segments(values, times, query_times, lengths, ctx.mode)
            grad_times = grad_terms.times_grad(seg, grad, values, times)
        return (
            grad_values if need_values else None,
            grad_times,
            grad_query if need_query else None,
            None,
            None,
        )

    @staticmethod
    def jvp(ctx, values_t, times_t, query_t, lengths_t, mode_t):
        values, times, query_times, lengths = ctx.saved_tensors
        return grad_terms.stream_tangent(
            values, times, query_times, lengths, ctx.mode, values_t, times_t, query_t
        )


class _ResampleBackward(SingleLevelFunction):
    @staticmethod
    def forward(grad_out, values, times, query_times, lengths, mode, values_grad, query_grad):
        args = (grad_out, values, times, query_times, lengths, mode, values_grad, query_grad)
        return below_autograd(OPS._resample_backward, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        grad_out, values, times, query_times, lengths, mode, values_grad, query_grad = inputs
        ctx.mode, ctx.values_grad, ctx.query_grad = mode, values_grad, query_grad
        ctx.save_for_backward(grad_out, values, times, query_times, lengths)
        ctx.save_for_forward(grad_out, values, times, query_times, lengths)

    @staticmethod
    def backward(ctx, up_values, up_query):
        grad_out, values, times, query_times, lengths = ctx.saved_tensors
        up_values = up_values if ctx.values_grad and defined(up_values) else None
        up_query = up_query if ctx.query_grad and defined(up_query) else None
        needs = tuple(ctx.needs_input_grad[:4])
        d_grad, d_values, d_times, d_query = grad_terms.stream_adjoint(
            grad_out, values, times, query_times, lengths, ctx.mode, up_values, up_query, needs
        )
        return d_grad, d_values, d_times, d_query, None, None, None, None

    @staticmethod
    def jvp(ctx, grad_t, values_t, times_t, query_t, *rest):
        grad_out, values, times, query_times, lengths = ctx.saved_tensors
        return grad_terms.stream_backward_tangent(
            grad_out,
            values,
            times,
            query_times,
            lengths,
            ctx.mode,
            grad_t,
            values_t,
            times_t,
            query_t,
            ctx.values_grad,
            ctx.query_grad,
        )


register_autograd("resample", _Resample)
register_autograd("_resample_backward", _ResampleBackward)


# ---------------------------------------------------------------------------
# vmap: the vmapped dimension folds into the batch
# ---------------------------------------------------------------------------


def fold_stream(values, v_dim, times, t_dim, V, B, expand_shared=False):
    """A stream's (values, times) as V*B rows; (S,) times stay shared."""
    return (
        fold_rows(values, v_dim, V, B, True),
        fold_rows(times, t_dim, V, B, logical_dim(times, t_dim) == 2, expand_shared),
    )


def fold_query(query, q_dim, V, B, expand_shared=False):
    return fold_rows(query, q_dim, V, B, logical_dim(query, q_dim) == 2, expand_shared)


def unfold_query_grad(grad_query, V, query, q_dim):
    """The backward's (V*B, T) query gradient, summed over B for a shared query."""
    grad_query = unfold_rows(grad_query, V)
    return grad_query.sum(1) if logical_dim(query, q_dim) == 1 else grad_query


@torch.library.register_vmap("robocache::resample")
def _resample_vmap(info, in_dims, values, times, query_times, lengths=None, mode="linear"):
    V = info.batch_size
    v_dim, t_dim, q_dim, l_dim = padded_in_dims(in_dims)[:4]
    B = batch_size(values, v_dim)
    values, times = fold_stream(values, v_dim, times, t_dim, V, B)
    query = fold_query(query_times, q_dim, V, B)
    out = OPS.resample(values, times, query, fold_rows(lengths, l_dim, V, B, True), mode)
    return unfold_rows(out, V), 0


@torch.library.register_vmap("robocache::_resample_backward")
def _resample_backward_vmap(
    info, in_dims, grad_out, values, times, query_times, lengths, mode, values_grad, query_grad
):
    V = info.batch_size
    g_dim, v_dim, t_dim, q_dim, l_dim = padded_in_dims(in_dims)[:5]
    B = batch_size(values, v_dim)
    values_rows, times_rows = fold_stream(values, v_dim, times, t_dim, V, B)
    grad_values, grad_query = OPS._resample_backward(
        fold_rows(grad_out, g_dim, V, B, True),
        values_rows,
        times_rows,
        fold_query(query_times, q_dim, V, B, expand_shared=True),
        fold_rows(lengths, l_dim, V, B, True),
        mode,
        values_grad,
        query_grad,
    )
    if values_grad:
        grad_values = unfold_rows(grad_values, V)
    if query_grad:
        grad_query = unfold_query_grad(grad_query, V, query_times, q_dim)
    return (grad_values, grad_query), (0 if values_grad else None, 0 if query_grad else None)
