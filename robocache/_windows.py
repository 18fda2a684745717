"""``robocache.sample_windows``: windows cut from packed ragged streams.

The wrapper over ``torch.ops.robocache.sample_windows`` and its autograd
(reverse, forward and double backward: the op is linear in ``values``).
"""

import math
import numbers

import torch

from ._autograd import _below_autograd, _register, _SingleLevelFunction
from ._ops import _require_kernels, _tensor

_OPS = torch.ops.robocache
_WINDOW_MODES = ("nearest", "previous", "linear", "mean")
_OP = "robocache.sample_windows"


def _nanoseconds(x, name, *, allow_none=False):
    if x is None and allow_none:
        return -1
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0:
        raise ValueError(
            f"{_OP}: {name} must be a non-negative int of nanoseconds"
            f"{' or None' if allow_none else ''}; got {x!r}"
        )
    return int(x)


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
            gather, any dtype; ``"linear"``: blended by time; ``"mean"``:
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
        _tensor(t, name, _OP)
    if not isinstance(mode, str) or mode not in _WINDOW_MODES:
        raise ValueError(
            f"{_OP}: mode must be 'nearest', 'previous', 'linear' or 'mean'; got {mode!r}"
        )
    interval = _nanoseconds(interval, "interval")
    tolerance = _nanoseconds(tolerance, "tolerance", allow_none=True)
    edge_tolerance = _nanoseconds(edge_tolerance, "edge_tolerance")
    if values.dim() < 1:
        raise ValueError(f"{_OP}: values must be (N, *shape); got a 0-d tensor")
    _require_kernels(_OP, values)
    shape = values.shape[1:]
    flat = values.reshape(values.shape[0], math.prod(shape))
    out, is_pad, age = _OPS.sample_windows(
        flat, times, offsets, episode, query_times, mode, interval, tolerance, edge_tolerance
    )
    return out.reshape(*out.shape[:2], *shape), is_pad, age


class _SampleWindows(_SingleLevelFunction):
    @staticmethod
    def forward(values, times, offsets, episode, query_times, mode, interval, tol, edge_tol):
        return _below_autograd(
            _OPS.sample_windows,
            values,
            times,
            offsets,
            episode,
            query_times,
            mode,
            interval,
            tol,
            edge_tol,
        )

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
        times, offsets, episode, query_times = ctx.saved_tensors
        grad_values = None
        if ctx.needs_input_grad[0]:
            grad_values = _OPS._sample_windows_backward(
                grad.contiguous(),
                times,
                offsets,
                episode,
                query_times,
                *ctx.args,
                ctx.num_values,
            )
        return (grad_values,) + (None,) * 8

    @staticmethod
    def jvp(ctx, values_t, *rest):
        times, offsets, episode, query_times = ctx.saved_tensors
        out_t, _, _ = _OPS.sample_windows(values_t, times, offsets, episode, query_times, *ctx.args)
        return out_t, None, None


class _SampleWindowsBackward(_SingleLevelFunction):
    @staticmethod
    def forward(grad, times, offsets, episode, query_times, mode, interval, tol, edge_tol, n):
        return _below_autograd(
            _OPS._sample_windows_backward,
            grad,
            times,
            offsets,
            episode,
            query_times,
            mode,
            interval,
            tol,
            edge_tol,
            n,
        )

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
            d_grad, _, _ = _OPS.sample_windows(up, *ctx.saved_tensors, *ctx.args)
        return (d_grad,) + (None,) * 9


def _flatten_sample_windows(
    values,
    times,
    offsets,
    episode,
    query_times,
    mode="nearest",
    interval=0,
    tolerance=-1,
    edge_tolerance=0,
):
    # The dispatcher drops trailing arguments equal to the schema's defaults.
    return (values, times, offsets, episode, query_times, mode, interval, tolerance, edge_tolerance)


_register("sample_windows", _SampleWindows, _flatten_sample_windows)
_register("_sample_windows_backward", _SampleWindowsBackward)
