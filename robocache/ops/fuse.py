"""``robocache.fuse``: several sensor streams aligned onto one timeline and
concatenated, in one kernel.

The wrapper over ``torch.ops.robocache.fuse``, its autograd and its vmap
rules. Tensor lists are spread out for autograd as ``(K, *values, *times,
query_times, lengths, modes)``.
"""

import torch

from .._ops import (
    OPS,
    SingleLevelFunction,
    batch_size,
    below_autograd,
    check_tensor,
    defined,
    fold_rows,
    on_meta,
    padded_in_dims,
    register_autograd,
    require_kernels,
    unfold_rows,
)
from . import _interp_grad as grad_terms
from ._fuse_streams import stack_lengths, unpack_streams
from .resample import check_times_data, fold_query, fold_stream, unfold_query_grad

_OP = "robocache.fuse"


def fuse(streams, query_times, *, modes="linear", check=False):
    """Align several sensor streams onto one timeline and concatenate them, in one kernel.

    The operator underneath is ``torch.ops.robocache.fuse(values, times,
    query_times, lengths=None, modes="linear")`` with ``lengths`` a (K, B)
    tensor (a row per stream) and ``modes`` one mode or K comma-separated.

    Args:
        streams: a sequence of ``(values, times)`` or ``(values, times, lengths)``
            tuples, or a mapping of name -> such a tuple (dicts keep their order).
            Stream k has values (B, S_k, D_k) and times (B, S_k) or (S_k,); S_k
            and D_k may differ between streams. All values share one dtype and
            all times (and ``query_times``) another, as for :func:`resample`.
        query_times: (B, T) or (T,) timeline to align onto.
        modes: ``"linear"``, ``"nearest"`` or ``"previous"`` for every stream;
            or one per stream: a sequence of K modes, a string of K
            comma-separated modes, or a mapping by stream name (streams it
            leaves out are linear).
        check: validate every stream as :func:`resample`'s ``check`` does (a
            host sync on the GPU); messages name the stream.

    Returns:
        (B, T, sum D_k): the streams' channels in the order given. Each stream
        follows exactly the semantics of :func:`resample`; use
        :func:`fuse_columns` to find a stream's columns.

    On CUDA one launch writes every stream into the output (up to 32 streams
    per launch). Gradients flow to every stream's values and to ``query_times``.
    """
    names, labels, values, times, lengths, modes = unpack_streams(streams, modes)
    check_tensor(query_times, "query_times", _OP)
    require_kernels(_OP, query_times, *values, *times, *lengths)
    stacked = stack_lengths(labels, values, lengths)
    modes = ",".join(modes)
    if check:
        OPS.fuse(*on_meta((values, times, query_times, stacked)), modes)  # shapes first
        for label, v, t, n in zip(labels, values, times, lengths):
            check_times_data(v, t, n, f"{_OP}: stream {label}")
    return OPS.fuse(values, times, query_times, stacked, modes)


def fuse_columns(streams):
    """Which output columns of :func:`fuse` belong to which stream.

    Returns a dict of name -> slice when ``streams`` is a mapping, otherwise a
    list of slices in stream order. Only the shapes of the values are read.
    """
    names, _, values, _, _, _ = unpack_streams(streams, "linear")
    slices = _columns(values)
    return dict(zip(names, slices)) if names is not None else slices


def _columns(values):
    slices, start = [], 0
    for v in values:
        slices.append(slice(start, start + v.shape[-1]))
        start += v.shape[-1]
    return slices


# ---------------------------------------------------------------------------
# autograd
# ---------------------------------------------------------------------------


def _per_stream(lengths, modes, K):
    """Per-stream lengths (or None) and modes, as the operator reads them."""
    names = [m.strip() for m in modes.split(",")]
    names = names * K if len(names) == 1 else names
    rows = [None] * K if lengths is None else [lengths[k] for k in range(K)]
    return rows, names


def _unpack_saved(saved, K, modes):
    """(values, times, query_times, per-stream lengths, per-stream modes)."""
    values, times = saved[:K], saved[K : 2 * K]
    query_times, lengths = saved[2 * K], saved[2 * K + 1]
    rows, names = _per_stream(lengths, modes, K)
    return values, times, query_times, rows, names


class _Fuse(SingleLevelFunction):
    @staticmethod
    def forward(K, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        return below_autograd(OPS.fuse, values, times, *flat[2 * K :])

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.K, ctx.modes = inputs[0], inputs[-1]
        ctx.save_for_backward(*inputs[1:-1])
        ctx.save_for_forward(*inputs[1:-1])

    @staticmethod
    def backward(ctx, grad):
        K, saved = ctx.K, ctx.saved_tensors
        values, times, query_times, rows, modes = _unpack_saved(saved, K, ctx.modes)
        needs = ctx.needs_input_grad  # (K, *values, *times, query, lengths, modes)
        need_values = [bool(n) for n in needs[1 : 1 + K]]
        need_query = bool(needs[1 + 2 * K])
        grad_values, grad_query = OPS._fuse_backward(
            grad,
            list(values),
            list(times),
            query_times,
            saved[2 * K + 1],
            ctx.modes,
            need_values,
            need_query,
        )
        cols = _columns(values)
        grad_times = []
        for k in range(K):
            g = None
            if needs[1 + K + k]:
                seg = grad_terms.Segments(values[k], times[k], query_times, rows[k], modes[k])
                g = grad_terms.times_grad(seg, grad[..., cols[k]], values[k], times[k])
            grad_times.append(g)
        return (
            None,
            *[g if n else None for g, n in zip(grad_values, need_values)],
            *grad_times,
            grad_query if need_query else None,
            None,
            None,
        )

    @staticmethod
    def jvp(ctx, K_t, *tangents):
        K = ctx.K
        values, times, query_times, rows, modes = _unpack_saved(ctx.saved_tensors, K, ctx.modes)
        parts = [
            grad_terms.stream_tangent(
                values[k],
                times[k],
                query_times,
                rows[k],
                modes[k],
                tangents[k],
                tangents[K + k],
                tangents[2 * K],
            )
            for k in range(K)
        ]
        return torch.cat(parts, dim=-1)


class _FuseBackward(SingleLevelFunction):
    @staticmethod
    def forward(K, grad_out, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        grad_values, grad_query = below_autograd(
            OPS._fuse_backward, grad_out, values, times, *flat[2 * K :]
        )
        return (*grad_values, grad_query)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.K = inputs[0]
        ctx.modes, ctx.values_grad, ctx.query_grad = inputs[-3], inputs[-2], inputs[-1]
        ctx.save_for_backward(*inputs[1:-3])
        ctx.save_for_forward(*inputs[1:-3])

    @staticmethod
    def unflatten_output(out, flat):
        return list(out[:-1]), out[-1]

    @staticmethod
    def _unpack(ctx):
        saved = ctx.saved_tensors
        values, times, query_times, rows, modes = _unpack_saved(saved[1:], ctx.K, ctx.modes)
        return saved[0], values, times, query_times, rows, modes, _columns(values)

    @staticmethod
    def backward(ctx, *ups):
        K = ctx.K
        grad_out, values, times, query_times, rows, modes, cols = _FuseBackward._unpack(ctx)
        needs = ctx.needs_input_grad  # (K, grad_out, *values, *times, query, ...)
        up_query = ups[K] if ctx.query_grad and defined(ups[K]) else None
        d_grads, d_values, d_times, d_query = [], [], [], None
        for k in range(K):
            up_values = ups[k] if ctx.values_grad[k] and defined(ups[k]) else None
            g_k, v_k, t_k, q_k = grad_terms.stream_adjoint(
                grad_out[..., cols[k]],
                values[k],
                times[k],
                query_times,
                rows[k],
                modes[k],
                up_values,
                up_query,
                (True, needs[2 + k], needs[2 + K + k], needs[2 + 2 * K]),
            )
            d_grads.append(g_k)
            d_values.append(v_k)
            d_times.append(t_k)
            if q_k is not None:
                d_query = q_k if d_query is None else d_query + q_k
        d_grad = torch.cat(d_grads, dim=-1) if needs[1] else None
        return (None, d_grad, *d_values, *d_times, d_query, None, None, None, None)

    @staticmethod
    def jvp(ctx, K_t, grad_t, *tangents):
        K = ctx.K
        grad_out, values, times, query_times, rows, modes, cols = _FuseBackward._unpack(ctx)
        d_values, d_query = [], None
        for k in range(K):
            v_k, q_k = grad_terms.stream_backward_tangent(
                grad_out[..., cols[k]],
                values[k],
                times[k],
                query_times,
                rows[k],
                modes[k],
                None if grad_t is None else grad_t[..., cols[k]],
                tangents[k],
                tangents[K + k],
                tangents[2 * K],
                ctx.values_grad[k],
                ctx.query_grad,
            )
            d_values.append(v_k)
            if ctx.query_grad:
                d_query = q_k if d_query is None else d_query + q_k
        return (*d_values, d_query if d_query is not None else query_times.new_empty(0))


def _flatten_fuse(values, times, query_times, lengths, modes):
    return (len(values), *values, *times, query_times, lengths, modes)


def _flatten_fuse_backward(
    grad_out, values, times, query_times, lengths, modes, values_grad, query_grad
):
    return (
        len(values),
        grad_out,
        *values,
        *times,
        query_times,
        lengths,
        modes,
        list(values_grad),
        query_grad,
    )


register_autograd("fuse", _Fuse, _flatten_fuse)
register_autograd("_fuse_backward", _FuseBackward, _flatten_fuse_backward)


# ---------------------------------------------------------------------------
# vmap
# ---------------------------------------------------------------------------


def _fold_fuse(values, times, query_times, lengths, in_dims, V, expand_shared=False):
    v_dims, t_dims, q_dim, l_dim = in_dims
    v_dims = v_dims if isinstance(v_dims, (list, tuple)) else [v_dims] * len(values)
    t_dims = t_dims if isinstance(t_dims, (list, tuple)) else [t_dims] * len(times)
    B = batch_size(values[0], v_dims[0])
    streams = [
        fold_stream(v, vd, t, td, V, B) for v, vd, t, td in zip(values, v_dims, times, t_dims)
    ]
    if lengths is not None:  # (K, B) -> (K, V*B)
        per_stream = lengths if l_dim is None else lengths.movedim(l_dim, 1)  # (K, [V,] B)
        lengths = torch.stack(
            [fold_rows(row, None if l_dim is None else 0, V, B, True) for row in per_stream]
        )
    return (
        [s[0] for s in streams],
        [s[1] for s in streams],
        fold_query(query_times, q_dim, V, B, expand_shared),
        lengths,
    )


@torch.library.register_vmap("robocache::fuse")
def _fuse_vmap(info, in_dims, values, times, query_times, lengths=None, modes="linear"):
    V = info.batch_size
    folded = _fold_fuse(values, times, query_times, lengths, padded_in_dims(in_dims)[:4], V)
    return unfold_rows(OPS.fuse(*folded, modes), V), 0


@torch.library.register_vmap("robocache::_fuse_backward")
def _fuse_backward_vmap(
    info, in_dims, grad_out, values, times, query_times, lengths, modes, values_grad, query_grad
):
    V = info.batch_size
    in_dims = padded_in_dims(in_dims)
    values_rows, times_rows, query, lengths = _fold_fuse(
        values, times, query_times, lengths, tuple(in_dims[1:5]), V, expand_shared=True
    )
    B = values_rows[0].shape[0] // V
    grad_values, grad_query = OPS._fuse_backward(
        fold_rows(grad_out, in_dims[0], V, B, True),
        values_rows,
        times_rows,
        query,
        lengths,
        modes,
        values_grad,
        query_grad,
    )
    grad_values = [unfold_rows(g, V) if need else g for g, need in zip(grad_values, values_grad)]
    if query_grad:
        grad_query = unfold_query_grad(grad_query, V, query_times, in_dims[3])
    out_dims = ([0 if need else None for need in values_grad], 0 if query_grad else None)
    return (grad_values, grad_query), out_dims
