"""Derivative terms of resample/fuse that the operators do not compute
themselves: gradients with respect to the sample times, forward-mode
tangents, and the derivatives of the backward (double backward).

For a query of row b that lands on segment (i0, i1) of its row, with weight
w = (q - t0) / dt, the forward is ``out = v0 + w (v1 - v0)`` and its backward
is ``grad_values[i0] += (1 - w) g``, ``grad_values[i1] += w g``,
``grad_query = g . (v1 - v0) / dt``. Only a linear query strictly inside the
valid range ("live") depends on q or the times; for every other query w and
1/dt are 0 here, which makes every term below vanish, as it should.

The derivative of w is dw = e / dt with e = dq - (1 - w) dt0 - w dt1 (dq, dt0
and dt1 the changes of the query and of the two sample times).
"""

import torch

from .._ops import OPS


def batch_rows(x, B):
    """A (T,) or (S,) tensor shared by the batch as (B, T); (B, T) unchanged."""
    return x if x.dim() == 2 else x.expand(B, x.shape[-1])


class Segments:
    """Where every query of one stream lands, as the operators locate it."""

    def __init__(self, values, times, query_times, lengths, mode):
        B, S, D = values.shape
        self.B, self.S, self.D, self.T = B, S, D, query_times.shape[-1]
        self.times_shared = times.dim() == 1
        self.query_shared = query_times.dim() == 1
        self.i0, self.i1, self.w, dt = _locate(times, query_times, lengths, S, B, mode)
        live = dt != 0
        self.inv_dt = torch.where(live, 1 / torch.where(live, dt, torch.ones_like(dt)), dt)

    def rows(self, x, index):
        """Rows ``index`` (B, T) of x (B, S, D): (B, T, D)."""
        return x.gather(1, index.unsqueeze(-1).expand(self.B, self.T, x.shape[-1]))

    def slope(self, values):
        """(B, T, D): (v1 - v0) / dt for live queries, else 0."""
        scale = self.inv_dt.to(values.dtype).unsqueeze(-1)
        return (self.rows(values, self.i1) - self.rows(values, self.i0)) * scale

    def per_query(self, grad_out, values):
        """(B, T): g . (v1 - v0) / dt, the query gradient before any sum over B."""
        return (grad_out.to(values.dtype) * self.slope(values)).sum(-1).to(self.w.dtype)

    def effective_query_change(self, query_t, times_t):
        """(B, T): e = dq - (1 - w) dt0 - w dt1 (times_t or query_t may be None)."""
        e = torch.zeros_like(self.w)
        if query_t is not None:
            e = e + batch_rows(query_t, self.B).to(e.dtype)
        if times_t is not None:
            tt = batch_rows(times_t, self.B).to(e.dtype)
            e = e - (1 - self.w) * tt.gather(1, self.i0) - self.w * tt.gather(1, self.i1)
        return e

    def scatter_rows(self, at_i0, at_i1, like):
        """(B, S, D) sums of (B, T, D) contributions into rows i0 and i1."""
        out = torch.zeros(self.B, self.S, self.D, dtype=like.dtype, device=like.device)
        index0 = self.i0.unsqueeze(-1).expand(self.B, self.T, self.D)
        index1 = self.i1.unsqueeze(-1).expand(self.B, self.T, self.D)
        return out.scatter_add(1, index0, at_i0.to(like.dtype)).scatter_add(
            1, index1, at_i1.to(like.dtype)
        )

    def scatter_times(self, at_i0, at_i1, times):
        """A gradient shaped like times from (B, T) contributions to samples i0 and i1."""
        out = torch.zeros(self.B, self.S, dtype=self.w.dtype, device=self.w.device)
        out = out.scatter_add(1, self.i0, at_i0).scatter_add(1, self.i1, at_i1)
        return (out.sum(0) if self.times_shared else out).to(times.dtype)

    def sum_query(self, x):
        """A (B, T) gradient reduced to the query's own shape."""
        return x.sum(0) if self.query_shared else x


def times_grad(seg, grad_out, values, times):
    """d out / d times, applied to grad_out: -(1 - w) p to t0 and -w p to t1,
    with p the per-query gradient g . slope."""
    p = seg.per_query(grad_out, values)
    return seg.scatter_times(-(1 - seg.w) * p, -seg.w * p, times)


def forward_tangent(seg, values, values_t, out_from_values_t, query_t, times_t):
    """The forward's tangent: resample(values_t) + slope * e."""
    out = out_from_values_t
    if query_t is not None or times_t is not None:
        e = seg.effective_query_change(query_t, times_t)
        term = seg.slope(values) * e.to(values.dtype).unsqueeze(-1)
        out = term if out is None else out + term
    return out


def backward_adjoint(seg, grad_out, values, times, up_query, resample_up, query_grad_of_up, needs):
    """Gradients of sum(up_values * grad_values) + sum(up_query * grad_query)
    with respect to (grad_out, values, times, query_times); None where not
    needed or zero. The caller passes up_values' share: ``resample_up``, the
    operator's resample(up_values), and ``query_grad_of_up``, the per-query
    (B, T) g . (u1 - u0) / dt (both None when up_values is None)."""
    need_grad, need_values, need_times, need_query = needs
    d_grad = d_values = d_times = d_query = None
    uq = None if up_query is None else batch_rows(up_query, seg.B).to(seg.w.dtype)
    if need_grad:
        d_grad = resample_up
        if uq is not None:
            term = seg.slope(values) * uq.to(values.dtype).unsqueeze(-1)
            d_grad = term if d_grad is None else d_grad + term
    if need_values and uq is not None:
        c = (uq * seg.inv_dt).to(values.dtype).unsqueeze(-1) * grad_out.to(values.dtype)
        d_values = seg.scatter_rows(-c, c, values)
    if need_query and query_grad_of_up is not None:
        d_query = seg.sum_query(query_grad_of_up)
    if need_times:
        at_i0 = torch.zeros_like(seg.w)
        at_i1 = torch.zeros_like(seg.w)
        if query_grad_of_up is not None:
            at_i0 = at_i0 - (1 - seg.w) * query_grad_of_up
            at_i1 = at_i1 - seg.w * query_grad_of_up
        if uq is not None:
            p = seg.per_query(grad_out, values) * uq * seg.inv_dt
            at_i0, at_i1 = at_i0 + p, at_i1 - p
        d_times = seg.scatter_times(at_i0, at_i1, times)
    return d_grad, d_values, d_times, d_query


def backward_tangent(seg, grad_out, values, query_t, times_t, values_grad_of_t, query_grad_of_t):
    """Tangents of the backward's (grad_values, grad_query) given tangents of
    (grad_out, values, query_times, times). ``values_grad_of_t`` is the
    operator's grad_values for grad_out_t; ``query_grad_of_t`` the per-query
    (B, T) query gradient for (grad_out_t, values) plus (grad_out, values_t)."""
    e = seg.effective_query_change(query_t, times_t)
    dw = (e * seg.inv_dt).to(values.dtype).unsqueeze(-1) * grad_out.to(values.dtype)
    d_values = seg.scatter_rows(-dw, dw, values)
    if values_grad_of_t is not None:
        d_values = d_values + values_grad_of_t
    d_query = torch.zeros_like(seg.w) if query_grad_of_t is None else query_grad_of_t
    if times_t is not None:
        tt = batch_rows(times_t, seg.B).to(seg.w.dtype)
        change = tt.gather(1, seg.i1) - tt.gather(1, seg.i0)
        d_query = d_query - seg.per_query(grad_out, values) * change * seg.inv_dt
    return d_values, seg.sum_query(d_query)


def _locate(times, query_times, lengths, S, B, mode):
    """Where every query lands among its row's valid samples, as the operators
    locate it: (i0, i1, w, dt), each (B, T). ``w`` and ``dt`` are 0 except
    for a linear query strictly between two valid samples of its row: the
    only queries whose result depends on the query and the sample times."""
    T = query_times.shape[-1]
    times = times.expand(B, S)
    q = query_times.expand(B, T)
    limit = torch.full((B, 1), S, device=times.device) if lengths is None else lengths.view(B, 1)
    limit = limit.clamp(0, S)
    valid = torch.arange(S, device=times.device) < limit
    # Padding past a row's length sorts after every query.
    top = torch.inf if times.is_floating_point() else torch.iinfo(times.dtype).max
    k = torch.searchsorted(torch.where(valid, times, top).contiguous(), q.contiguous(), right=True)
    k = torch.minimum(k, limit)
    last = (limit - 1).clamp(min=0)
    i0 = torch.minimum((k - 1).clamp(min=0), last)
    i1 = torch.minimum(k, last)
    wdt = torch.float32 if times.dtype == torch.float32 else torch.float64
    zero = torch.zeros(q.shape, dtype=wdt, device=q.device)
    live = (k > 0) & (k < limit) & (i0 != i1)
    if q.is_floating_point():
        live = live & ~torch.isnan(q)
    if mode != "linear":
        if mode == "nearest":
            t0, t1 = times.gather(1, i0), times.gather(1, i1)
            later = (k > 0) & (k < limit) & ((t1 - q) <= (q - t0))  # a tie goes to the later
            i0 = torch.where(later, i1, i0)
        return i0, i0, zero, zero
    t0, t1 = times.gather(1, i0), times.gather(1, i1)
    dt = torch.where(live, (t1 - t0).to(wdt), zero)
    w = torch.where(live, (q - t0).to(wdt) / torch.where(live, dt, zero + 1), zero)
    return i0, i1, w, dt


def stream_tangent(values, times, query_times, lengths, mode, values_t, times_t, query_t):
    """The forward's tangent for one stream: (B, T, D)."""
    out = None
    if values_t is not None:
        out = OPS.resample(values_t, times, query_times, lengths, mode)
    if mode == "linear" and (query_t is not None or times_t is not None):
        seg = Segments(values, times, query_times, lengths, mode)
        out = forward_tangent(seg, values, values_t, out, query_t, times_t)
    if out is None:
        out = values.new_zeros(values.shape[0], query_times.shape[-1], values.shape[-1])
    return out


def stream_adjoint(grad_out, values, times, query_times, lengths, mode, up_values, up_query, needs):
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
            resample_up = OPS.resample(up_values, times, query_times, lengths, mode)
        if seg is not None:
            query_grad_of_up = seg.per_query(grad_out, up_values)
    d_grad, d_values, d_times, d_query = resample_up, None, None, None
    if seg is not None:
        d_grad, d_values, d_times, d_query = backward_adjoint(
            seg, grad_out, values, times, up_query, resample_up, query_grad_of_up, needs
        )
    if needs[0]:
        d_grad = grad_out.new_zeros(grad_out.shape) if d_grad is None else d_grad.to(grad_out.dtype)
    if d_query is not None:
        d_query = d_query.to(query_times.dtype)
    return d_grad, d_values, d_times, d_query


def stream_backward_tangent(
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
        values_grad_of_t = OPS._resample_backward(
            grad_t, values, times, query_times, lengths, mode, True, False
        )[0]
    query_grad_of_t = None
    if grad_t is not None:
        query_grad_of_t = seg.per_query(grad_t, values)
    if values_t is not None:
        term = seg.per_query(grad_out, values_t)
        query_grad_of_t = term if query_grad_of_t is None else query_grad_of_t + term
    d_values, d_query = backward_tangent(
        seg, grad_out, values, query_t, times_t, values_grad_of_t, query_grad_of_t
    )
    d_values = d_values.to(values.dtype) if values_grad else values.new_empty(0)
    d_query = d_query.to(query_times.dtype) if query_grad else query_times.new_empty(0)
    return d_values, d_query
