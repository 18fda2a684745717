"""``robocache.sample_windows`` and ``robocache.anchor_windows``: windows cut
from packed streams (every episode's samples back to back).

The wrappers over ``torch.ops.robocache.sample_windows`` and
``anchor_windows``, and their autograd: both are linear in ``values``, so
the backward scatters with the forward's weights, and its adjoint is the
forward itself. ``WindowSampler`` cuts every batch with ``anchor_windows``.
"""

import math

from .._ops import (
    OPS,
    WINDOW_MODES,
    SingleLevelFunction,
    below_autograd,
    check_nanoseconds,
    check_tensor,
    register_autograd,
    require_kernels,
)

_SAMPLE = "robocache.sample_windows"
_ANCHOR = "robocache.anchor_windows"


def sample_windows(
    values,
    times,
    offsets,
    episode,
    query_times,
    mode="nearest",
    *,
    interval=0,
    tolerance=None,
    edge_tolerance=0,
):
    """Windows cut from a packed ragged stream, one launch for the batch.

    A packed stream holds every episode's samples back to back: episode ``e``
    owns rows ``offsets[e]:offsets[e + 1]`` of ``values`` and ``times``.

    Args:
        values: (N, *shape), any dtype (floating for ``linear`` and ``mean``).
        times: (N,) int64 nanoseconds, non-decreasing within each episode.
        offsets: (E + 1,) int64, non-decreasing, in [0, N].
        episode: (B,) int64, the episode of each window.
        query_times: (B, W) int64 nanoseconds, each window's query times.
        mode: ``"nearest"`` (a tie goes to the later sample) or
            ``"previous"`` (the last sample at or before the query): a pure
            gather, any dtype. Where several samples share one time t, a
            query at or after t reads the last of them, and a query before
            t that ``nearest`` rounds up to t reads the first of them; ``"linear"``: blended by time; ``"mean"``:
            the mean of the samples in ``(q - interval, q]``.
        interval: ns, > 0 for ``mean``.
        tolerance: ns or None. A query whose samples used lie farther than
            this from it is padding (a sensor drop-out is not held or
            interpolated across silently).
        edge_tolerance: ns. A query outside the episode's samples by more
            than this is padding; it takes the edge sample.

    Returns:
        (out, is_pad, age): out (B, W, *shape) in values' dtype; is_pad
        (B, W) bool; age (B, W) int64 ns, the query time minus the time of
        the sample read at or before it (for ``nearest`` the chosen sample;
        for ``mean`` the newest one averaged). An episode without samples
        gives zeros, padding and age 0.

    On the CPU, episode indices and offsets are checked; on CUDA nothing is
    read on the host, and an episode index outside [0, E) gives a window of
    zeros marked as padding. Gradients flow to ``values`` (floating dtypes).
    """
    for name, t in (
        ("values", values),
        ("times", times),
        ("offsets", offsets),
        ("episode", episode),
        ("query_times", query_times),
    ):
        check_tensor(t, name, _SAMPLE)
    if not isinstance(mode, str) or mode not in WINDOW_MODES:
        raise ValueError(
            f"{_SAMPLE}: mode must be 'nearest', 'previous', 'linear' or 'mean'; got {mode!r}"
        )
    interval = check_nanoseconds(interval, "interval", _SAMPLE)
    tolerance = check_nanoseconds(tolerance, "tolerance", _SAMPLE, allow_none=True)
    edge_tolerance = check_nanoseconds(edge_tolerance, "edge_tolerance", _SAMPLE)
    if values.dim() < 1:
        raise ValueError(f"{_SAMPLE}: values must be (N, *shape); got a 0-d tensor")
    require_kernels(_SAMPLE, values, times)
    shape = values.shape[1:]
    flat = values.reshape(values.shape[0], math.prod(shape))
    out, is_pad, age = OPS.sample_windows(
        flat, times, offsets, episode, query_times, mode, interval, tolerance, edge_tolerance
    )
    return out.reshape(*out.shape[:2], *shape), is_pad, age


class _SampleWindows(SingleLevelFunction):
    # Arguments: values, then the windows (times, offsets, episode,
    # query_times), then the rule (mode, interval, tolerance, edge_tolerance).
    @staticmethod
    def forward(*args):
        return below_autograd(OPS.sample_windows, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        values, times, offsets, episode, query_times = inputs[:5]
        ctx.args = inputs[5:]
        ctx.num_values = values.shape[0]
        ctx.save_for_backward(times, offsets, episode, query_times)
        ctx.save_for_forward(times, offsets, episode, query_times)
        ctx.mark_non_differentiable(output[1], output[2])

    @staticmethod
    def backward(ctx, grad, _is_pad, _age):
        grad_values = None
        if ctx.needs_input_grad[0]:
            grad_values = OPS._sample_windows_backward(
                grad.contiguous(), *ctx.saved_tensors, *ctx.args, ctx.num_values
            )
        return (grad_values,) + (None,) * 8

    @staticmethod
    def jvp(ctx, values_t, *rest):
        out_t, _, _ = OPS.sample_windows(values_t, *ctx.saved_tensors, *ctx.args)
        return out_t, None, None


class _SampleWindowsBackward(SingleLevelFunction):
    # Arguments: grad, the windows (4), the rule (4), num_values.
    @staticmethod
    def forward(*args):
        return below_autograd(OPS._sample_windows_backward, *args)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.args = inputs[5:9]
        ctx.save_for_backward(*inputs[1:5])

    @staticmethod
    def backward(ctx, up):
        # The backward scatters grad with the forward's weights; its adjoint
        # gathers with them: the forward itself.
        d_grad = None
        if ctx.needs_input_grad[0]:
            d_grad, _, _ = OPS.sample_windows(up, *ctx.saved_tensors, *ctx.args)
        return (d_grad,) + (None,) * 9


register_autograd("sample_windows", _SampleWindows)
register_autograd("_sample_windows_backward", _SampleWindowsBackward)


# ---------------------------------------------------------------------------
# anchor_windows
# ---------------------------------------------------------------------------


def _per_stream(x, K, name, convert):
    """None, one value for every stream, or a list of K."""
    if x is None:
        return []
    if isinstance(x, (list, tuple)):
        if len(x) != K:
            raise ValueError(
                f"{_ANCHOR}: {name} must hold one value per stream ({K}); got {len(x)}"
            )
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
            raise TypeError(f"{_ANCHOR}: {name} must be a list of tensors, one per stream")
        for k, t in enumerate(x):
            check_tensor(t, f"{name}[{k}]", _ANCHOR)
    K = len(values)
    if K == 0:
        raise ValueError(f"{_ANCHOR}: values must hold at least one stream")
    for name, t in (
        ("anchor_offsets", anchor_offsets),
        ("anchor_times", anchor_times),
        ("index", index),
    ):
        check_tensor(t, name, _ANCHOR)
    if isinstance(modes, str):
        modes = [modes]
    if not isinstance(modes, (list, tuple)) or len(modes) not in (1, K):
        raise ValueError(f"{_ANCHOR}: modes must be one mode or a list of one per stream ({K})")
    for mode in modes:
        if mode not in WINDOW_MODES:
            raise ValueError(
                f"{_ANCHOR}: modes must be 'nearest', 'previous', 'linear' or 'mean'; got {mode!r}"
            )
    intervals = _per_stream(
        intervals, K, "intervals", lambda v, n: check_nanoseconds(v, n, _ANCHOR)
    )
    tolerances = _per_stream(
        tolerances, K, "tolerances", lambda v, n: check_nanoseconds(v, n, _ANCHOR, allow_none=True)
    )
    edge_tolerance = check_nanoseconds(edge_tolerance, "edge_tolerance", _ANCHOR)
    anchor_rows = [] if anchor_rows is None else list(anchor_rows)
    for j, t in enumerate(anchor_rows):
        check_tensor(t, f"anchor_rows[{j}]", _ANCHOR)
    require_kernels(_ANCHOR, *values, *times)
    return OPS.anchor_windows(
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


class _AnchorWindows(SingleLevelFunction):
    # flat: K, R, then values, times, offsets, deltas (K each), anchor_offsets,
    # anchor_times, index, modes, intervals, tolerances, edge_tolerance, and
    # the R anchor_rows tables. Output: outs, pads, ages (K each), episode, rows (R).
    @staticmethod
    def forward(K, R, *flat):
        values, times = list(flat[:K]), list(flat[K : 2 * K])
        offsets, deltas = list(flat[2 * K : 3 * K]), list(flat[3 * K : 4 * K])
        anchors, rules = flat[4 * K : 4 * K + 3], flat[4 * K + 3 : 4 * K + 7]
        outs, pads, ages, episode, picked = below_autograd(
            OPS.anchor_windows,
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
            grad = OPS._sample_windows_backward(
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
    modes,
    intervals,
    tolerances,
    edge_tolerance,
):
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


register_autograd("anchor_windows", _AnchorWindows, _flatten_anchor_windows)
