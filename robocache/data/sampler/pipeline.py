"""Batches made ahead on a CUDA stream of the sampler's own, ordered by
events, while the caller's step runs.

When the caller asks for batch j, an event is recorded on its stream and
the side stream waits for it before making batch j + depth: whatever the
caller had queued by then (its steps on earlier batches, which it has let
go) comes first, so memory a let-go batch held (a graph's buffers, or the
allocator's blocks) is written again only after the caller's last read of
it. Batch j + depth then runs beside the caller's step j. The batch handed
out is ready on the caller's stream: it waits on the batch's event, on the
GPU. Nothing waits on the host, and no tensor needs ``record_stream``."""

from collections import deque

import torch


class CallerStream:
    """Batches made when asked for, on the caller's stream (``prefetch=0``)."""

    def run(self, make_batch, items):
        for item in items:
            yield make_batch(item)


def batch_stream(device, depth):
    """Where a sampler makes its batches: ahead on a side stream (``depth``
    batches), or on the caller's stream (0)."""
    return SideStream(device, depth) if depth else CallerStream()


class SideStream:
    """A sampler's CUDA stream and the events that order it with the caller's."""

    def __init__(self, device, depth):
        self.device, self.depth = device, depth
        self.cuda_stream = torch.cuda.Stream(device)
        # Re-recorded in turn: each one's last wait was queued long before.
        self.released = [torch.cuda.Event() for _ in range(depth + 2)]
        self.ready = [torch.cuda.Event() for _ in range(depth + 2)]
        self.count = 0

    def make(self, make_batch, item, caller):
        """``make_batch(item)`` on the side stream, after what ``caller``
        has queued; (batch, its ready event). The current device is as it was."""
        k = self.count % len(self.ready)
        self.count += 1
        released, ready = self.released[k], self.ready[k]
        released.record(caller)
        self.cuda_stream.wait_event(released)
        device = torch.cuda.current_device()
        torch.cuda.set_stream(self.cuda_stream)  # which makes its device current
        try:
            batch = make_batch(item)
            ready.record(self.cuda_stream)
        finally:
            torch.cuda.set_stream(caller)
            if torch.cuda.current_device() != device:
                torch.cuda.set_device(device)
        return batch, ready

    def run(self, make_batch, items):
        """Yields ``make_batch(item)`` for each item, each made ``depth``
        batches ahead on the side stream. An error making a batch is raised
        where that batch is asked for, after the batches made before it."""
        device = self.device
        pending = deque()
        ahead = iter(items)

        def fill(caller):
            """Makes the next item's batch; False when none is left or it failed."""
            item = next(ahead, _END)
            if item is _END:
                return False
            try:
                pending.append(self.make(make_batch, item, caller))
            except Exception as e:  # raised in its turn
                pending.append((None, e))
                return False
            return True

        caller = torch.cuda.current_stream(device)
        while len(pending) < self.depth and fill(caller):
            pass
        while pending:
            batch, ready = pending.popleft()
            if batch is None:
                raise ready
            caller = torch.cuda.current_stream(device)
            caller.wait_event(ready)
            if not pending or pending[-1][0] is not None:
                fill(caller)
            yield batch


_END = object()
