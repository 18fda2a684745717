"""``robocache.anchor_windows``: windows of several packed streams around
anchor rows, in one launch.

The wrapper over ``torch.ops.robocache.anchor_windows`` and its autograd
(reverse mode: each stream's gradient is ``sample_windows``' backward at the
same queries). WindowSampler cuts every batch with it.
"""

import math

import torch

from ._autograd import _below_autograd, _register, _SingleLevelFunction
from ._ops import _require_kernels, _tensor
from ._windows import _WINDOW_MODES, _nanoseconds

_OPS = torch.ops.robocache
_OP = "robocache.anchor_windows"


def _per_stream(x, K, name, convert):
    """None, one value for every stream, or a list of K."""
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        if len(x) != K:
            raise ValueError(f"{_OP}: {name} must hold one value per stream ({K}); got {len(x)}")
        return [convert(v, f"{name}[{k}]") for k, v in enumerate(x)]
    return [convert(x, name)]


def anchor_windows(
    values,
    times,
    offsets,
    deltas,
    anchor_offsets,
    anchor_times,
    index,
    modes="nearest",
    *,
    intervals=None,
    tolerances=None,
    edge_tolerance=0,
    anchor_rows=None,
):
    """Windows of K packed streams around B anchor rows, one launch a batch.

    Row ``index[b]`` of an anchor stream (``anchor_offsets``,
    ``anchor_times``: episode ``e`` owns its rows
    ``anchor_offsets[e]:anchor_offsets[e + 1]``) lies in episode
    ``episode[b]``; stream k is sampled at ``anchor_times[index[b]] +
    deltas[k]`` among that episode's samples, exactly as
    :func:`robocache.sample_windows` samples it (same modes, padding, age).

    Args:
        values, times, offsets: per stream, lists of K: values (N_k, *shape_k)
            in any dtype (floating for ``linear`` and ``mean``), times
            (N_k,) int64 ns sorted within each episode, offsets (E + 1,)
            int64; every stream has the anchor stream's E episodes.
        deltas: K int64 tensors (W_k >= 1,), ns from the anchor time.
        anchor_offsets: (E + 1,) int64; anchor_times: (N_anchor,) int64 ns.
        index: (B,) int64 rows of the anchor stream.
        modes: one mode for every stream or a list of K (see
            sample_windows).
        intervals: ns, one or a list of K (> 0 for ``mean``); default 0.
        tolerances: ns or None, one or a list of K; default None.
        edge_tolerance: ns, for every stream.
        anchor_rows: tables with a row per anchor-stream row (N_anchor,
            *shape_j), any dtype, gathered at ``index`` in the same launch
            (per-frame metadata).

    Returns:
        (out, is_pad, age, episode, rows): lists of K tensors (B, W_k,
        *shape_k), (B, W_k) bool and (B, W_k) int64 ns; episode (B,) int64;
        and the anchor_rows tables' rows at index, (B, *shape_j) each.

    On the CPU, index and offsets are checked; on CUDA nothing is read on
    the host, and an index outside the anchor stream's episodes gives
    episode -1 and windows of zeros marked as padding. Gradients flow to
    floating ``values``.
    """
    lists = {"values": values, "times": times, "offsets": offsets, "deltas": deltas}
    for name, x in lists.items():
        if not isinstance(x, (list, tuple)):
            raise TypeError(f"{_OP}: {name} must be a list of tensors, one per stream")
        for k, t in enumerate(x):
            _tensor(t, f"{name}[{k}]", _OP)
    K = len(values)
    if K == 0:
        raise ValueError(f"{_OP}: values must hold at least one stream")
    for name, t in (
        ("anchor_offsets", anchor_offsets),
        ("anchor_times", anchor_times),
        ("index", index),
    ):
        _tensor(t, name, _OP)
    if isinstance(modes, str):
        modes = [modes]
    if not isinstance(modes, (list, tuple)) or len(modes) not in (1, K):
        raise ValueError(f"{_OP}: modes must be one mode or a list of one per stream ({K})")
    for mode in modes:
        if mode not in _WINDOW_MODES:
            raise ValueError(
                f"{_OP}: modes must be 'nearest', 'previous', 'linear' or 'mean'; got {mode!r}"
            )
    intervals = _per_stream(intervals, K, "intervals", _nanoseconds)
    tolerances = _per_stream(
        tolerances, K, "tolerances", lambda v, n: _nanoseconds(v, n, allow_none=True)
    )
    edge_tolerance = _nanoseconds(edge_tolerance, "edge_tolerance")
    anchor_rows = [] if anchor_rows is None else list(anchor_rows)
    for j, t in enumerate(anchor_rows):
        _tensor(t, f"anchor_rows[{j}]", _OP)
    _require_kernels(_OP, *values)
    return _OPS.anchor_windows(
        list(values),
        list(times),
        list(offsets),
        list(deltas),
        anchor_offsets,
        anchor_times,
        index,
        anchor_rows,
        ",".join(modes),
        intervals,
        tolerances,
        edge_tolerance,
    )


def _stream_args(modes, intervals, tolerances, K):
    """Each stream's (mode, interval, tolerance), as the operator reads them."""
    names = modes.replace(" ", "").split(",")

    def pick(x, k, fallback):
        return fallback if not x else x[0 if len(x) == 1 else k]

    return [
        (names[0 if len(names) == 1 else k], pick(intervals, k, 0), pick(tolerances, k, -1))
        for k in range(K)
    ]


class _AnchorWindows(_SingleLevelFunction):
    # flat: K, R, then values, times, offsets, deltas (K each), anchor_offsets,
    # anchor_times, index, modes, intervals, tolerances, edge_tolerance, and
    # the R anchor_rows tables. Output: outs, pads, ages (K each), episode, rows (R).
    @staticmethod
    def forward(K, R, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        offsets, deltas = list(flat[2 * K : 3 * K]), list(flat[3 * K : 4 * K])
        anchors, rules = flat[4 * K : 4 * K + 3], flat[4 * K + 3 : 4 * K + 7]
        outs, pads, ages, episode, picked = _below_autograd(
            _OPS.anchor_windows,
            values,
            times,
            offsets,
            deltas,
            *anchors,
            list(flat[4 * K + 7 :]),
            *rules,
        )
        return (*outs, *pads, *ages, episode, *picked)

    @staticmethod
    def setup_context(ctx, inputs, output):
        K = ctx.K = inputs[0]
        flat = inputs[2:]
        anchor_times, index = flat[4 * K + 1], flat[4 * K + 2]
        ctx.args = flat[4 * K + 3 : 4 * K + 7]  # modes, intervals, tolerances, edge_tolerance
        ctx.shapes = [v.shape for v in flat[:K]]
        ctx.row_shapes = [t.shape for t in flat[4 * K + 7 :]]
        ctx.save_for_backward(*flat[K : 4 * K], anchor_times, index, output[3 * K])
        ctx.mark_non_differentiable(*output[K : 3 * K + 1])

    @staticmethod
    def backward(ctx, *grads):
        K = ctx.K
        saved = ctx.saved_tensors
        times, offsets, deltas = saved[:K], saved[K : 2 * K], saved[2 * K : 3 * K]
        anchor_times, index, episode = saved[3 * K :]
        modes, intervals, tolerances, edge = ctx.args
        anchor_time = anchor_times[index].unsqueeze(1)
        grad_values = []
        for k, (mode, interval, tol) in enumerate(_stream_args(modes, intervals, tolerances, K)):
            g = grads[k]
            if not ctx.needs_input_grad[2 + k] or g is None:
                grad_values.append(None)
                continue
            shape = ctx.shapes[k]
            flat_grad = g.reshape(g.shape[0], g.shape[1], math.prod(shape[1:])).contiguous()
            grad = _OPS._sample_windows_backward(
                flat_grad,
                times[k],
                offsets[k],
                episode,
                anchor_time + deltas[k],
                mode,
                interval,
                tol,
                edge,
                shape[0],
            )
            grad_values.append(grad.reshape(shape))
        grad_rows = []
        for j, g in enumerate(grads[3 * K + 1 :]):  # a gather's gradient: a scatter-add
            needed = ctx.needs_input_grad[2 + 4 * K + 7 + j] and g is not None
            grad_rows.append(
                g.new_zeros(ctx.row_shapes[j]).index_add_(0, index, g) if needed else None
            )
        return (None, None, *grad_values) + (None,) * (3 * K + 7) + tuple(grad_rows)

    @staticmethod
    def unflatten_output(out, flat):
        K = flat[0]
        return (
            list(out[:K]),
            list(out[K : 2 * K]),
            list(out[2 * K : 3 * K]),
            out[3 * K],
            list(out[3 * K + 1 :]),
        )


def _flatten_anchor_windows(
    values,
    times,
    offsets,
    deltas,
    anchor_offsets,
    anchor_times,
    index,
    anchor_rows,
    modes="nearest",
    intervals=(),
    tolerances=(),
    edge_tolerance=0,
):
    # The dispatcher drops trailing arguments equal to the schema's defaults.
    return (
        len(values),
        len(anchor_rows),
        *values,
        *times,
        *offsets,
        *deltas,
        anchor_offsets,
        anchor_times,
        index,
        modes,
        list(intervals),
        list(tolerances),
        edge_tolerance,
        *anchor_rows,
    )


_register("anchor_windows", _AnchorWindows, _flatten_anchor_windows)
