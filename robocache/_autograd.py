"""Autograd, forward-mode AD and vmap for the ``torch.ops.robocache`` operators.

Each operator gets an Autograd kernel that runs an ``autograd.Function`` with
``setup_context``, so the ops work under ``torch.func`` (``grad``, ``jacrev``,
``jacfwd``, ``vmap``) as well as under plain autograd and ``torch.compile``.
Every backward calls registered operators (or ordinary torch ops), so backward
graphs trace, and the backward operators have autograd kernels of their own:
double backward is exact, never silently zero.

The terms the operators do not compute themselves (gradients with respect
to the sample times, tangents, and the derivatives of the backward) are
written with ordinary torch ops in ``_interp_grad.py``.
"""

import torch
from torch._C._functorch import TransformType
from torch._functorch.utils import enable_single_level_autograd_function
from torch.autograd import forward_ad
from torch.autograd.function import _SingleLevelFunction

from . import _interp_grad as ig
from ._interp_grad import Segments

_LIB = torch.library.Library("robocache", "IMPL")
_OPS = torch.ops.robocache


def _python_any_requires_grad(*args):
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


# torch._C._any_requires_grad checks in C++ where torch has it (2.6 does not).
_any_requires_grad = getattr(torch._C, "_any_requires_grad", _python_any_requires_grad)


def _below_autograd(op, *args):
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def _register(opname, function, flatten=None):
    """Registers ``function`` (an autograd.Function) as ``robocache::opname``'s
    Autograd kernel. ``flatten`` turns the op's arguments into ``apply``'s
    (tensor lists spread out, so autograd sees every tensor) and back."""
    op = getattr(_OPS, opname).default

    def kernel(keyset, *args):
        flat = flatten(*args) if flatten else args
        if torch.is_grad_enabled() and (_any_requires_grad(*flat) or _any_tangent(flat)):
            out = _apply(function, flat)
            if hasattr(function, "unflatten_output"):  # the op's outputs from apply's flat ones
                return function.unflatten_output(out, flat)
            return out
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIB.impl(opname, kernel, "Autograd", with_keyset=True)


def _any_tangent(args):
    """Whether forward-mode AD carries a tangent on any tensor argument."""
    if forward_ad._current_level < 0:
        return False
    return any(torch.is_tensor(a) and forward_ad.unpack_dual(a).tangent is not None for a in args)


def _refuse_nested_differentiation(function):
    """The Function records its graph at one functorch level; an enclosing
    grad or jvp level would see the op as a constant and get a silently zero
    derivative. Nested transforms (hessian, jacfwd(jacrev), grad(grad)) raise."""
    levels = [
        i
        for i in torch._C._functorch.get_interpreter_stack() or []
        if i.key() in (TransformType.Grad, TransformType.Jvp)
    ]
    if len(levels) > 1:
        name = function.__name__.lstrip("_").lower()
        raise NotImplementedError(
            f"robocache ({name}): nested torch.func differentiation (hessian, jacfwd(jacrev), "
            "grad(grad), ...) is not supported; one level of grad, vjp, jacrev, jvp or jacfwd "
            "is, under any vmap. For higher orders use torch.autograd.grad(..., "
            "create_graph=True), which supports double backward."
        )


def _apply(function, args):
    """``function.apply(*args)`` from inside a dispatcher kernel.

    Under torch.func the transforms have already unwrapped the tensors to
    this level by the time the Autograd key runs, so the Function records an
    ordinary single-level graph here (as a C++ autograd kernel would), rather
    than re-entering the functorch interpreter stack. That is why the
    operators' Functions are ``_SingleLevelFunction``s: a ``Function``'s apply
    hands itself to functorch whenever transforms are active, which from
    inside a kernel cannot work."""
    if torch._C._are_functorch_transforms_active():
        _refuse_nested_differentiation(function)
        with enable_single_level_autograd_function():
            return function.apply(*args)
    return function.apply(*args)


def _defined(x):
    return x is not None and x.numel() > 0


# ---------------------------------------------------------------------------
# resample
# ---------------------------------------------------------------------------


class _Resample(_SingleLevelFunction):
    @staticmethod
    def forward(values, times, query_times, lengths, mode):
        return _below_autograd(_OPS.resample, values, times, query_times, lengths, mode)

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
        grad_values, grad_query = _OPS._resample_backward(
            grad, values, times, query_times, lengths, ctx.mode, need_values, need_query
        )
        grad_times = None
        if need_times:
            seg = Segments(values, times, query_times, lengths, ctx.mode)
            grad_times = ig.times_grad(seg, grad, values, times)
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
        return _stream_tangent(
            values, times, query_times, lengths, ctx.mode, values_t, times_t, query_t
        )


def _stream_tangent(values, times, query_times, lengths, mode, values_t, times_t, query_t):
    """The forward's tangent for one stream: (B, T, D)."""
    out = None
    if values_t is not None:
        out = _OPS.resample(values_t, times, query_times, lengths, mode)
    if mode == "linear" and (query_t is not None or times_t is not None):
        seg = Segments(values, times, query_times, lengths, mode)
        out = ig.forward_tangent(seg, values, values_t, out, query_t, times_t)
    if out is None:
        out = values.new_zeros(values.shape[0], query_times.shape[-1], values.shape[-1])
    return out


class _ResampleBackward(_SingleLevelFunction):
    @staticmethod
    def forward(grad_out, values, times, query_times, lengths, mode, values_grad, query_grad):
        return _below_autograd(
            _OPS._resample_backward,
            grad_out,
            values,
            times,
            query_times,
            lengths,
            mode,
            values_grad,
            query_grad,
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        grad_out, values, times, query_times, lengths, mode, values_grad, query_grad = inputs
        ctx.mode, ctx.values_grad, ctx.query_grad = mode, values_grad, query_grad
        ctx.save_for_backward(grad_out, values, times, query_times, lengths)
        ctx.save_for_forward(grad_out, values, times, query_times, lengths)

    @staticmethod
    def backward(ctx, up_values, up_query):
        grad_out, values, times, query_times, lengths = ctx.saved_tensors
        needs = ctx.needs_input_grad
        up_values = up_values if ctx.values_grad and _defined(up_values) else None
        up_query = up_query if ctx.query_grad and _defined(up_query) else None
        d_grad, d_values, d_times, d_query = _stream_adjoint(
            grad_out,
            values,
            times,
            query_times,
            lengths,
            ctx.mode,
            up_values,
            up_query,
            (needs[0], needs[1], needs[2], needs[3]),
        )
        return d_grad, d_values, d_times, d_query, None, None, None, None

    @staticmethod
    def jvp(ctx, grad_t, values_t, times_t, query_t, *rest):
        grad_out, values, times, query_times, lengths = ctx.saved_tensors
        return _stream_backward_tangent(
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


def _stream_adjoint(
    grad_out, values, times, query_times, lengths, mode, up_values, up_query, needs
):
    """The backward's adjoint for one stream (grad_out holds that stream's
    columns): (d_grad_out, d_values, d_times, d_query), each None when not
    needed or zero, except d_grad_out, which is zeros when needed."""
    seg = None
    if mode == "linear" and (up_query is not None or up_values is not None):
        seg = Segments(values, times, query_times, lengths, mode)
    resample_up = query_grad_of_up = None
    if up_values is not None:
        up_values = up_values.to(values.dtype)
        if needs[0]:
            resample_up = _OPS.resample(up_values, times, query_times, lengths, mode)
        if seg is not None:
            query_grad_of_up = seg.per_query(grad_out, up_values)
    d_grad, d_values, d_times, d_query = resample_up, None, None, None
    if seg is not None:
        d_grad, d_values, d_times, d_query = ig.backward_adjoint(
            seg, grad_out, values, times, up_query, resample_up, query_grad_of_up, needs
        )
    if needs[0]:
        d_grad = grad_out.new_zeros(grad_out.shape) if d_grad is None else d_grad.to(grad_out.dtype)
    if d_query is not None:
        d_query = d_query.to(query_times.dtype)
    return d_grad, d_values, d_times, d_query


def _stream_backward_tangent(
    grad_out,
    values,
    times,
    query_times,
    lengths,
    mode,
    grad_t,
    values_t,
    times_t,
    query_t,
    values_grad,
    query_grad,
):
    """Tangents of one stream's (grad_values, grad_query)."""
    seg = Segments(values, times, query_times, lengths, mode)
    values_grad_of_t = None
    if grad_t is not None and values_grad:
        values_grad_of_t = _OPS._resample_backward(
            grad_t, values, times, query_times, lengths, mode, True, False
        )[0]
    query_grad_of_t = None
    if grad_t is not None:
        query_grad_of_t = seg.per_query(grad_t, values)
    if values_t is not None:
        term = seg.per_query(grad_out, values_t)
        query_grad_of_t = term if query_grad_of_t is None else query_grad_of_t + term
    d_values, d_query = ig.backward_tangent(
        seg, grad_out, values, query_t, times_t, values_grad_of_t, query_grad_of_t
    )
    d_values = d_values.to(values.dtype) if values_grad else values.new_empty(0)
    d_query = d_query.to(query_times.dtype) if query_grad else query_times.new_empty(0)
    return d_values, d_query


# ---------------------------------------------------------------------------
# fuse: tensor lists are spread out for autograd as (K, *values, *times, ...)
# ---------------------------------------------------------------------------


def _fuse_columns(values):
    cols, start = [], 0
    for v in values:
        cols.append(slice(start, start + v.shape[-1]))
        start += v.shape[-1]
    return cols


def _fuse_split(lengths, modes, K):
    """Per-stream lengths (or None) and modes, as the operator reads them."""
    names = [m.strip() for m in modes.split(",")]
    names = names * K if len(names) == 1 else names
    rows = [None] * K if lengths is None else [lengths[k] for k in range(K)]
    return rows, names


class _Fuse(_SingleLevelFunction):
    @staticmethod
    def forward(K, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        query_times, lengths, modes = flat[2 * K :]
        return _below_autograd(_OPS.fuse, values, times, query_times, lengths, modes)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.K, ctx.modes = inputs[0], inputs[-1]
        ctx.save_for_backward(*inputs[1:-1])
        ctx.save_for_forward(*inputs[1:-1])

    @staticmethod
    def _unpack(ctx):
        K = ctx.K
        saved = ctx.saved_tensors
        values, times = saved[:K], saved[K : 2 * K]
        query_times, lengths = saved[2 * K], saved[2 * K + 1]
        rows, modes = _fuse_split(lengths, ctx.modes, K)
        return values, times, query_times, lengths, rows, modes

    @staticmethod
    def backward(ctx, grad):
        K = ctx.K
        values, times, query_times, lengths, rows, modes = _Fuse._unpack(ctx)
        needs = ctx.needs_input_grad  # (K, *values, *times, query, lengths, modes)
        need_values = [bool(n) for n in needs[1 : 1 + K]]
        need_query = bool(needs[1 + 2 * K])
        grad_values, grad_query = _OPS._fuse_backward(
            grad,
            list(values),
            list(times),
            query_times,
            lengths,
            ctx.modes,
            need_values,
            need_query,
        )
        cols = _fuse_columns(values)
        grad_times = []
        for k in range(K):
            g = None
            if needs[1 + K + k]:
                seg = Segments(values[k], times[k], query_times, rows[k], modes[k])
                g = ig.times_grad(seg, grad[..., cols[k]], values[k], times[k])
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
        values, times, query_times, lengths, rows, modes = _Fuse._unpack(ctx)
        parts = [
            _stream_tangent(
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


class _FuseBackward(_SingleLevelFunction):
    @staticmethod
    def forward(K, grad_out, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        query_times, lengths, modes, values_grad, query_grad = flat[2 * K :]
        grad_values, grad_query = _below_autograd(
            _OPS._fuse_backward,
            grad_out,
            values,
            times,
            query_times,
            lengths,
            modes,
            values_grad,
            query_grad,
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
        K = ctx.K
        saved = ctx.saved_tensors
        grad_out = saved[0]
        values, times = saved[1 : 1 + K], saved[1 + K : 1 + 2 * K]
        query_times, lengths = saved[1 + 2 * K], saved[2 + 2 * K]
        rows, modes = _fuse_split(lengths, ctx.modes, K)
        return grad_out, values, times, query_times, rows, modes, _fuse_columns(values)

    @staticmethod
    def backward(ctx, *ups):
        K = ctx.K
        grad_out, values, times, query_times, rows, modes, cols = _FuseBackward._unpack(ctx)
        needs = ctx.needs_input_grad  # (K, grad_out, *values, *times, query, ...)
        up_query = ups[K] if ctx.query_grad and _defined(ups[K]) else None
        d_grads, d_values, d_times, d_query = [], [], [], None
        for k in range(K):
            up_values = ups[k] if ctx.values_grad[k] and _defined(ups[k]) else None
            g_k, v_k, t_k, q_k = _stream_adjoint(
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
            v_k, q_k = _stream_backward_tangent(
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


def _flatten_fuse(values, times, query_times, lengths=None, modes="linear"):
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


# ---------------------------------------------------------------------------
# voxelize
# ---------------------------------------------------------------------------


class _Voxelize(_SingleLevelFunction):
    @staticmethod
    def forward(
        points, features, lengths, grid_size, voxel_size, origin, reduce, voxel_t, origin_t
    ):
        return _below_autograd(
            _OPS.voxelize,
            points,
            features,
            lengths,
            grid_size,
            voxel_size,
            origin,
            reduce,
            voxel_t,
            origin_t,
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        points, features, lengths, grid_size, voxel_size, origin, reduce, voxel_t, origin_t = inputs
        ctx.args = (grid_size, voxel_size, origin, reduce)
        result = output if reduce == "max" else None
        ctx.save_for_backward(points, features, lengths, result, voxel_t, origin_t)
        ctx.save_for_forward(points, features, lengths, voxel_t, origin_t)

    @staticmethod
    def backward(ctx, grad):
        points, features, lengths, result, voxel_t, origin_t = ctx.saved_tensors
        grid_size, voxel_size, origin, reduce = ctx.args
        grad_features = None
        if ctx.needs_input_grad[1]:
            if result is None:
                result = grad  # only max reads it; this keeps the schema's shape check simple
            grad_features = _OPS._voxelize_backward(
                grad,
                points,
                features,
                lengths,
                grid_size,
                voxel_size,
                origin,
                reduce,
                result,
                voxel_t,
                origin_t,
            )
        # points, voxel sizes and origins: the result is piecewise constant in
        # them, so their gradient is zero wherever it exists.
        return None, grad_features, None, None, None, None, None, None, None

    @staticmethod
    def jvp(ctx, points_t, features_t, *rest):
        points, features, lengths, voxel_t, origin_t = ctx.saved_tensors
        grid_size, voxel_size, origin, reduce = ctx.args
        if features_t is None:
            features_t = torch.zeros_like(features) if features is not None else None
        if features_t is None:  # occupancy, count: no float result to carry a tangent
            return None
        if reduce == "max":
            raise RuntimeError(
                "robocache.voxelize: forward-mode AD (torch.func.jvp, jacfwd) is "
                "not supported for reduce='max'; use reverse mode (jacrev)"
            )
        return _OPS.voxelize(
            points, features_t, lengths, grid_size, voxel_size, origin, reduce, voxel_t, origin_t
        )


class _VoxelizeBackward(_SingleLevelFunction):
    @staticmethod
    def forward(
        grad,
        points,
        features,
        lengths,
        grid_size,
        voxel_size,
        origin,
        reduce,
        result,
        voxel_t,
        origin_t,
    ):
        return _below_autograd(
            _OPS._voxelize_backward,
            grad,
            points,
            features,
            lengths,
            grid_size,
            voxel_size,
            origin,
            reduce,
            result,
            voxel_t,
            origin_t,
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        grad, points, features, lengths, grid_size, voxel_size, origin, reduce = inputs[:8]
        ctx.args = (grid_size, voxel_size, origin, reduce)
        ctx.save_for_backward(points, lengths, inputs[9], inputs[10])

    @staticmethod
    def backward(ctx, up):
        points, lengths, voxel_t, origin_t = ctx.saved_tensors
        grid_size, voxel_size, origin, reduce = ctx.args
        if reduce == "max":
            raise RuntimeError(
                "robocache.voxelize: double backward is not supported for reduce='max' (the "
                "gradient's routing to each voxel's winning point is not differentiable); "
                "use reduce='sum' or 'mean', or do not differentiate the gradient"
            )
        # sum and mean: grad_features = grad gathered at each point's voxel
        # (divided by its count for mean), linear in grad and independent of
        # the features and results. Its adjoint scatters back: voxelize itself.
        d_grad = None
        if ctx.needs_input_grad[0]:
            d_grad = _OPS.voxelize(
                points, up, lengths, grid_size, voxel_size, origin, reduce, voxel_t, origin_t
            )
        return (d_grad,) + (None,) * 10


def _flatten_voxelize(
    points,
    features=None,
    lengths=None,
    grid_size=(),
    voxel_size=(),
    origin=(),
    reduce="occupancy",
    voxel_size_tensor=None,
    origin_tensor=None,
):
    return (
        points,
        features,
        lengths,
        grid_size,
        voxel_size,
        origin,
        reduce,
        voxel_size_tensor,
        origin_tensor,
    )


def _flatten_voxelize_backward(
    grad,
    points,
    features,
    lengths,
    grid_size,
    voxel_size,
    origin,
    reduce,
    result,
    voxel_size_tensor=None,
    origin_tensor=None,
):
    return (
        grad,
        points,
        features,
        lengths,
        grid_size,
        voxel_size,
        origin,
        reduce,
        result,
        voxel_size_tensor,
        origin_tensor,
    )


def _flatten_resample(values, times, query_times, lengths=None, mode="linear"):
    return (values, times, query_times, lengths, mode)


_register("resample", _Resample, _flatten_resample)
_register("_resample_backward", _ResampleBackward)
_register("fuse", _Fuse, _flatten_fuse)
_register("_fuse_backward", _FuseBackward, _flatten_fuse_backward)
_register("voxelize", _Voxelize, _flatten_voxelize)
_register("_voxelize_backward", _VoxelizeBackward, _flatten_voxelize_backward)
