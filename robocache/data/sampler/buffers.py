"""The memory a batch's mapped rows pass through on their way to a GPU: a
ring of pinned buffers that the native reader reads them into
(``PinnedRing``), and the device buffers that the sampler's CUDA graphs cut
them from (``StaticRows``), each as large as a batch's rows can be
(``capacity``)."""

import torch

# Pinned buffers of a ring past the read_ahead + 1 batches read or waited
# for: those whose copies to the GPU may still be queued (one of them, with
# the native feed's thread, a batch copied and not yet taken).
RING_SPARE = 2


def ring_slots(depth):
    """The slots of the ring of an iteration reading ``depth`` batches ahead."""
    return depth + 1 + RING_SPARE


def slot_sizes(finders, batch_size):
    """The bytes of each finder's buffer in a slot: the most a batch reads."""
    return [f.buffer_bytes(batch_size) for f in finders]


class PinnedRing:
    """Pinned buffers that batches' mapped rows land in, made once: batch b
    of an iteration in slot ``b % slots`` (one buffer a finder, laid out for
    the most rows a batch reads, ``rooms``). ``used(b, cuda_stream)`` says
    the work queued on ``cuda_stream`` (default: ``device``'s current
    stream) copies batch b's rows; the slot is read into again once that
    work is done (waited for on the host only where it is not). ``native``:
    the slots and their events (``torch.classes.robocache.RowRing``).
    ``busy``: an iteration reads into it."""

    def __init__(self, finders, batch_size, slots, device):
        self.slots, self.busy, self.device = slots, False, device
        self.rooms = [capacity(f, batch_size) for f in finders]
        self.buffers = [
            [torch.empty(size, dtype=torch.uint8, pin_memory=True)
             for size in slot_sizes(finders, batch_size)]
            for _ in range(slots)
        ]  # fmt: skip
        index = device.index if device.index is not None else torch.cuda.current_device()
        self.native = torch.classes.robocache.RowRing(self.buffers, index)

    def take(self, b):
        """Batch b's buffers, once the GPU is done copying from them."""
        self.native.take(b % self.slots)
        return self.buffers[b % self.slots]

    def used(self, b, cuda_stream=None):
        self.native.used(b % self.slots, -1 if cuda_stream is None else cuda_stream.cuda_stream)


class StaticRows:
    """Device buffers that a sampler's CUDA graphs cut mapped keys from, one
    a finder, laid out as a PinnedRing's slot: ``streams``, key position ->
    (values, times, offsets), views of them holding as many rows as a batch
    reads at most. Rows past a batch's own are never read: its offsets end
    at its rows.

    ``stage(ring, b, sizes)`` copies batch b's rows (read ahead into
    ``ring``; the first ``sizes[k]`` bytes of finder k's buffer) into them,
    in one native call, on a CUDA stream of their own, once the last
    batch's cut has read them (``cut()``, which the graphs capture, marks
    that), so that the copy runs beside the caller's step on the last
    batch; the current stream waits for the copy on the GPU (as the graphs
    do: ``copied()``), and the ring's slot is free once it is done. Nothing
    waits on the host."""

    def __init__(self, finders, batch_size, device):
        self.device = device
        self.streams = {}
        buffers = []
        for finder in finders:
            rows = capacity(finder, batch_size)
            buffer = torch.zeros(finder.buffer_bytes(batch_size), dtype=torch.uint8, device=device)
            self.streams.update(finder.views(buffer, rows, rows))
            buffers.append(buffer)
        # Made after the buffers' zero fill, which the first copy waits for.
        self.staging = torch.classes.robocache.RowStaging(buffers)

    def stage(self, ring, b, sizes):
        ring.native.stage(b % ring.slots, self.staging, sizes)

    def copied(self):
        """``streams``, once the last copy into them is done: the current
        stream waits for it. Captured in a CUDA graph, each launch waits for
        the copy queued last before it."""
        self.staging.await_copy()
        return self.streams

    def cut(self):
        """The current stream has queued the cut that reads the buffers: the
        next copy waits for it. Captured in a CUDA graph, each launch marks
        its cut."""
        self.staging.cut()


def capacity(finder, batch_size):
    """The most rows a batch of ``batch_size`` reads through ``finder``
    (None where its mode has no bound: "mean" reads every row of each
    query's interval): each window's row at or before each query and the
    row after it, and its episode's first and last rows."""
    if finder.plan.mode == "mean":
        return None
    return min(finder.times.numel(), batch_size * (2 * len(finder.deltas) + 2))
