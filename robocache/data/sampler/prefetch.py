"""Batches prepared ahead on a CUDA stream of the sampler's own, ordered by
events: batch k + depth is enqueued while the caller's step k runs."""

from collections import deque

import torch


def prefetched(make_batch, indices, cuda_stream, depth):
    """Yields ``make_batch(item)`` for each of ``indices``, each made ``depth``
    batches ahead on ``cuda_stream``. A batch handed out is ready on the
    caller's current stream (it waits on the batch's event, on the GPU), and
    its tensors are marked as used there, so that their memory is not given
    to a later batch while the caller's kernels still read it."""
    consumer = torch.cuda.current_stream(cuda_stream.device)
    # The indices (and anything else the caller queued) come first.
    cuda_stream.wait_stream(consumer)
    pending = deque()

    def enqueue(index):
        with torch.cuda.stream(cuda_stream):
            batch = make_batch(index)
            ready = torch.cuda.Event()
            ready.record(cuda_stream)
        pending.append((batch, ready))

    ahead = iter(indices)
    for index in ahead:
        enqueue(index)
        if len(pending) >= depth:
            break
    while pending:
        batch, ready = pending.popleft()
        consumer = torch.cuda.current_stream(cuda_stream.device)
        consumer.wait_event(ready)
        for t in batch.values():
            t.record_stream(consumer)
        yield batch
        index = next(ahead, None)
        if index is not None:
            enqueue(index)
