"""Thin, documented Python wrappers over the ``torch.ops.robocache`` operators.

Also registers each operator's autograd formula. Every backward calls another
registered operator, so backward graphs trace under torch.compile.
"""
import torch

from . import reference

_BACKENDS = (None, "auto", "robocache", "cuda", "pytorch")


def is_cuda_available():
    """Whether robocache was built with its CUDA kernels (and they are registered)."""
    return torch._C._dispatch_has_kernel_for_dispatch_key("robocache::resample", "CUDA")


# ---------------------------------------------------------------------------
# resample
# ---------------------------------------------------------------------------

def _check_resample_data(values, times, lengths):
    """Value checks that need to read tensor data (a host sync on the GPU)."""
    B, S = values.shape[0], values.shape[1]
    if lengths is not None:
        bad = ((lengths < 1) | (lengths > S)).nonzero()
        if bad.numel():
            b = int(bad[0, 0])
            raise ValueError(f"robocache.resample: lengths[{b}] = {int(lengths[b])} is outside "
                             f"[1, S] with S = {S}")
    if S < 2:
        return
    t = times.expand(B, S)
    decreasing = t[:, 1:] < t[:, :-1]
    if lengths is not None:
        decreasing &= torch.arange(1, S, device=t.device) < lengths.view(B, 1)
    bad = decreasing.nonzero()
    if bad.numel():
        b, j = int(bad[0, 0]), int(bad[0, 1]) + 1
        row = f"times[{j}]" if times.dim() == 1 else f"times[{b}, {j}]"
        raise ValueError(f"robocache.resample: times must be non-decreasing within the valid "
                         f"samples; {row} = {t[b, j].item()} < the sample before it "
                         f"({t[b, j - 1].item()})")


def resample(values, times, query_times, lengths=None, mode="linear", *, check=False):
    """Resample batched trajectories onto new timestamps.

    Args:
        values: (B, S, D) samples; float32, float64, float16 or bfloat16.
        times: (B, S) sample times, or (S,) shared by the batch; float32,
            float64 or int64 (e.g. nanosecond stamps). Must be non-decreasing
            within each row's valid samples; this is not checked unless
            ``check=True``.
        query_times: (B, T) or (T,) times to sample at; same dtype as ``times``.
        lengths: optional (B,) int64, the number of valid leading samples per
            row (default S). Samples past it are ignored.
        mode: ``"linear"`` (interpolate), ``"nearest"`` (closest sample; a tie
            goes to the later one) or ``"previous"`` (zero-order hold: the last
            sample at or before the query).
        check: validate ``lengths`` and the order of ``times`` and raise on a
            violation. This reads tensor data, so on a GPU it synchronizes the
            host; it is meant for debugging, not for compiled graphs.

    Returns:
        (B, T, D) tensor in the dtype of ``values``.

    Queries outside the valid range take the first/last valid sample; a query
    exactly at a sample time returns that sample exactly; repeated times are
    right-continuous; a NaN query gives NaN. Weights are computed in the
    precision of the times (float64 for float64 and int64 times).

    Without ``check=True`` the CUDA kernel never reads ``lengths`` on the host:
    a row with length < 1 comes out as NaN and a length above S is treated as
    S. The CPU kernel raises for lengths outside [1, S].

    Gradients flow to ``values`` and ``query_times`` (for ``linear``, the
    slope: the right-hand slope at a knot, zero outside the range; zero for
    ``nearest`` and ``previous``). ``times`` and ``lengths`` get no gradient.
    """
    if check:
        _check_resample_data(values, times, lengths)
    return torch.ops.robocache.resample(values, times, query_times, lengths, mode)


def _resample_setup_context(ctx, inputs, output):
    values, times, query_times, lengths, mode = inputs
    ctx.mode = mode
    ctx.save_for_backward(values, times, query_times, lengths)


def _resample_backward(ctx, grad):
    values, times, query_times, lengths = ctx.saved_tensors
    need_values, need_query = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    grad_values, grad_query = torch.ops.robocache._resample_backward(
        grad, values, times, query_times, lengths, ctx.mode, need_values, need_query)
    return (grad_values if need_values else None, None,
            grad_query if need_query else None, None, None)


torch.library.register_autograd(
    "robocache::resample", _resample_backward, setup_context=_resample_setup_context)


# ---------------------------------------------------------------------------
# The earlier Python API, kept working as written.
# ---------------------------------------------------------------------------

def _use_reference(backend, *tensors):
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}; got {backend!r}")
    if backend == "cuda":
        if not is_cuda_available():
            raise RuntimeError("backend='cuda': robocache was built without its CUDA kernels")
        for t in tensors:
            if torch.is_tensor(t) and not t.is_cuda:
                raise ValueError("backend='cuda' needs CUDA tensors; got one on " + str(t.device))
    return backend == "pytorch"


def resample_trajectories(src, src_t, tgt_t, backend=None):
    """Linear resampling, as in robocache's first API (argument names kept).

    ``src`` is (B, S, D), ``src_t`` (B, S) or (S,), ``tgt_t`` (B, T) or (T,).
    ``backend="pytorch"`` runs the pure-PyTorch reference; None, "auto" or
    "robocache" run the operator; "cuda" runs the operator and insists on CUDA.
    """
    if _use_reference(backend, src, src_t, tgt_t):
        return reference.resample(src, src_t, tgt_t)
    return resample(src, src_t, tgt_t)
