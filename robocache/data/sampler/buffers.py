"""The memory a batch's mapped rows pass through on their way to a GPU: a
ring of pinned buffers that the native reader reads them into
(``PinnedRing``), and the device buffers that the sampler's CUDA graphs cut
them from (``StaticRows``), each as large as a batch's rows can be
(``capacity``)."""

import torch

# Pinned buffers of a ring past the read_ahead + 1 batches read or waited
# for: those whose copies to the GPU may still be queued.
RING_SPARE = 2


def ring_slots(depth):
    """The slots of the ring of an iteration reading ``depth`` batches ahead."""
    return depth + 1 + RING_SPARE


def slot_sizes(finders, batch_size):
    """The bytes of each finder's buffer in a slot: the most a batch reads."""
    return [f.buffer_bytes(batch_size) for f in finders]


class PinnedRing:
    """Pinned buffers that batches' mapped rows land in, made once: batch b
    of an iteration in slot ``b % slots`` (one buffer a finder, as many
    bytes as a batch reads at most). ``used(b, cuda_stream)`` says the work
    queued on ``cuda_stream`` (default: ``device``'s current stream) copies
    batch b's rows; the slot is read into again once that work is done
    (waited for on the host only where it is not). ``busy``: an iteration
    reads into it."""

    def __init__(self, finders, batch_size, slots, device):
        self.slots, self.busy, self.device = slots, False, device
        self.buffers = [
            [torch.empty(size, dtype=torch.uint8, pin_memory=True)
             for size in slot_sizes(finders, batch_size)]
            for _ in range(slots)
        ]  # fmt: skip
        self.copied = [None] * slots

    def take(self, b):
        """Batch b's buffers, once the GPU is done copying from them."""
        slot = b % self.slots
        copied = self.copied[slot]
        if copied is not None and not copied.query():
            copied.synchronize()
        return self.buffers[slot]

    def used(self, b, cuda_stream=None):
        slot = b % self.slots
        if self.copied[slot] is None:
            self.copied[slot] = torch.cuda.Event()
        self.copied[slot].record(cuda_stream or torch.cuda.current_stream(self.device))


class StaticRows:
    """Device buffers that a sampler's CUDA graphs cut mapped keys from:
    ``streams``, key position -> (values, times, offsets), each holding as
    many rows as a batch reads at most. Rows past a batch's own are never
    read: its offsets end at its rows.

    ``stage(streams)`` copies a batch's rows (read ahead into pinned memory)
    into them on a CUDA stream of their own, once the last batch's cut has
    read them (``cut()`` marks that), so that the copy runs beside the
    caller's step on the last batch; the current stream waits for the copy
    on the GPU. Nothing waits on the host."""

    def __init__(self, finders, batch_size, device):
        self.device = device
        self.streams = {}
        for finder in finders:
            rows = capacity(finder, batch_size)
            times = torch.zeros(rows, dtype=finder.times.dtype, device=device)
            offsets = torch.zeros_like(finder.offsets, device=device)
            for key in finder.keys:
                shape, dtype = key.rows.shape, key.rows.dtype
                values = torch.zeros((rows, *shape), dtype=dtype, device=device)
                self.streams[key.position] = (values, times, offsets)
        self.copy_stream = torch.cuda.Stream(device)
        # The last cut's reads of the buffers; first, their zero fill, queued
        # on the current stream, which the first copy must not overtake.
        self.read = torch.cuda.Event()
        self.read.record(torch.cuda.current_stream(device))
        self.copied = torch.cuda.Event()

    def stage(self, streams):
        caller = torch.cuda.current_stream(self.device)
        device = torch.cuda.current_device()
        copy = self.copy_stream
        copy.wait_event(self.read)
        torch.cuda.set_stream(copy)  # which makes its device current
        try:
            staged = set()
            for position, (values, times, offsets) in streams.items():
                into = self.streams[position]
                into[0][: values.shape[0]].copy_(values, non_blocking=True)
                if id(times) not in staged:  # keys of one finder share them
                    staged.add(id(times))
                    into[1][: times.shape[0]].copy_(times, non_blocking=True)
                    into[2].copy_(offsets, non_blocking=True)
            self.copied.record(copy)
        finally:
            torch.cuda.set_stream(caller)
            if torch.cuda.current_device() != device:
                torch.cuda.set_device(device)
        caller.wait_event(self.copied)

    def cut(self):
        """The current stream has queued the cut that reads the buffers."""
        self.read.record(torch.cuda.current_stream(self.device))


def capacity(finder, batch_size):
    """The most rows a batch of ``batch_size`` reads through ``finder``
    (None where its mode has no bound: "mean" reads every row of each
    query's interval): each window's row at or before each query and the
    row after it, and its episode's first and last rows."""
    if finder.plan.mode == "mean":
        return None
    return min(finder.times.numel(), batch_size * (2 * len(finder.deltas) + 2))
