"""Random inputs for the tests: fresh on every call, never zeros;
`CountedCalls`, which counts the calls made of a native object's method;
and `run_session`, for commands that start processes of their own
(`scheduling` and `scheduling_kept`, for code that may change the caller's
CPU scheduling, live with the fixtures that need them)."""

import os
import signal
import subprocess

import torch
from fixtures.scheduling import scheduling, scheduling_kept  # noqa: F401  (the tests use both)


def _normal_scheduling():
    os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))


def run_session(command, timeout, **kwargs):
    """subprocess.run for a command that starts processes of its own (torchrun
    and its ranks): it runs in a session of its own, under the normal CPU
    scheduling policy whatever the caller's (see `scheduling_kept`), and at
    the timeout the whole session is killed (a rank left alive would hold the
    output pipes open, and the wait would never end), then TimeoutExpired is
    raised."""
    real_time = hasattr(os, "sched_getscheduler") and scheduling()[0] in (
        os.SCHED_FIFO,
        os.SCHED_RR,
    )
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        preexec_fn=_normal_scheduling if real_time else None,
        **kwargs,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def sorted_times(B, S, dtype=torch.float64, device="cpu", shared=False, start=0.0, span=10.0):
    """Strictly increasing, irregularly spaced sample times, (B, S) or (S,)."""
    rows = 1 if shared else B
    gaps = torch.rand(rows, S, dtype=torch.float64, device=device) + 0.05
    t = start + torch.cumsum(gaps, dim=1) / gaps.sum(dim=1, keepdim=True) * span
    if dtype == torch.int64:
        t = (t * 1e6).round()
        t = t + torch.arange(S, device=device, dtype=torch.float64)  # keep them strictly increasing
    t = t.to(dtype)
    return t[0] if shared else t


def query_times(B, T, dtype=torch.float64, device="cpu", shared=False, lo=-1.0, hi=11.0):
    """Queries spread over, and a little past, the sampled range."""
    rows = 1 if shared else B
    q = lo + torch.rand(rows, T, dtype=torch.float64, device=device) * (hi - lo)
    if dtype == torch.int64:
        q = (q * 1e6).round()
    q = q.to(dtype)
    return q[0] if shared else q


class CountedCalls:
    """Stands in for ``native`` (a torch.classes object, whose methods cannot
    be patched), appending to ``calls`` each time its method ``name`` is
    looked up: the calls of it that the code under test makes."""

    def __init__(self, native, name, calls):
        self.native, self._name, self._calls = native, name, calls

    def __getattr__(self, name):
        if name == self._name:
            self._calls.append(1)
        return getattr(self.native, name)
