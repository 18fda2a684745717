"""CUDA-graph replay: a batch function captured once per batch size, then
replayed, so that a batch costs the host one graph launch.

A graph writes every batch into the same buffers. A ring of graphs per batch
function lets batches be kept: a graph is replayed only when nothing outside
the ring refers to its last batch any more (no Python reference to its
tensors, no view of them, no autograd graph that saved them). Where one
still does, the ring grows, up to a bound, and past it the batch is made
without a graph; so a batch kept, however long, never changes under its
holder."""

import gc
import operator
import sys

import torch

# The graphs one ring holds at most; past them a batch whose slots are all
# in use is made without a graph.
MAX_GRAPHS_PER_RING = 16
# Whether this torch lets the ring count a batch's references (else a slot is
# written again in turn, and a batch holds until the ring has gone round).
COUNTS_REFERENCES = hasattr(torch.Tensor, "_use_count") and hasattr(torch._C, "_storage_Use_Count")

_refcount = sys.getrefcount
_tensor_use_count = getattr(torch.Tensor, "_use_count", None)
_storage_use_count = getattr(torch._C, "_storage_Use_Count", None)
# The launch itself (CUDAGraph.replay adds a Python frame around it).
_launch = getattr(getattr(torch._C, "_CUDAGraph", None), "replay", None)


class _Slot:
    """One captured graph and the batch its replays write."""

    def __init__(self, graph, batch):
        self.graph, self.batch = graph, batch
        self.tensors = list(batch.values())
        self.storages = [t.untyped_storage()._cdata for t in self.tensors]
        # The reference counts of the batch when nothing outside the slot
        # held it: Python references, TensorImpl and storage uses, per tensor.
        self.floor = None

    def _counts(self):
        return (
            list(map(_refcount, self.tensors)),
            list(map(_tensor_use_count, self.tensors)),
            list(map(_storage_use_count, self.storages)),
        )

    def held(self):
        """Whether anything outside the slot refers to its batch: more
        references to one of its tensors than when it was last free."""
        if not COUNTS_REFERENCES:
            return False
        counts = self._counts()
        if counts == self.floor:
            return False
        if self.floor is not None:
            for now, then in zip(counts, self.floor):
                if any(map(operator.gt, now, then)):
                    return True
        # The first count, or fewer than before (its own temporaries gone): the new floor.
        self.floor = counts
        return False


class GraphRing:
    """``make()`` captured in a ring of CUDA graphs on ``device``: ``ring()``
    replays a graph whose batch is free and returns that batch (a new dict
    of the graph's tensors). ``make`` reads its inputs from tensors it holds
    (a static index, a cursor on the device), never from arguments."""

    def __init__(self, make, buffers, device, state=()):
        self.make, self.buffers, self.device, self.state = make, buffers, device, state
        self.slots, self.next = [], 0

    def __call__(self):
        slots = self.slots
        if not slots:
            slots.extend(self._capture() for _ in range(self.buffers))
        count = len(slots)
        for step in range(count):
            k = (self.next + step) % count
            slot = slots[k]
            if not slot.held():
                self.next = (k + 1) % count
                _launch(slot.graph)
                return dict(slot.batch)
        if count < max(MAX_GRAPHS_PER_RING, self.buffers):
            slot = self._capture()
            slots.insert(self.next, slot)
            self.next = (self.next + 1) % len(slots)
            _launch(slot.graph)
            return dict(slot.batch)
        return self.make()  # every graph's batch is still held

    def _capture(self):
        """A new slot. Its graph is captured on a stream of its own after one
        run outside it (lazy initialisation stays out of the graph); the
        device state that run advanced (``state``: a step cursor) is put
        back. No host synchronization (``torch.cuda.graph`` synchronizes
        the device first)."""
        device = self.device
        caller = torch.cuda.current_stream(device)
        side = torch.cuda.Stream(device)
        side.wait_stream(caller)
        with torch.cuda.stream(side):
            saved = [t.clone() for t in self.state]
            self.make()
            for t, before in zip(self.state, saved):
                t.copy_(before)
            graph = torch.cuda.CUDAGraph()
            # Garbage collected during the capture (an abandoned sampler's
            # graphs, freed) would end it: collect first, and not meanwhile.
            gc.collect()
            collecting = gc.isenabled()
            gc.disable()
            try:
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    batch = self.make()
                finally:
                    graph.capture_end()
            finally:
                if collecting:
                    gc.enable()
        caller.wait_stream(side)
        slot = _Slot(graph, batch)
        slot.held()  # the floor: the counts of a batch nobody else holds
        return slot


class BatchGraphs:
    """The rings of one sampler, by what they make (a batch size, fed by a
    static index or by a cursor)."""

    def __init__(self, buffers, device):
        self.buffers, self.device = buffers, device
        self.rings = {}

    def ring(self, name, make, state=()):
        """The ring named ``name``, made the first time the name is seen (its
        graphs are captured at its first call): ``make`` advances the device
        tensors ``state``."""
        ring = self.rings.get(name)
        if ring is None:
            ring = self.rings[name] = GraphRing(make, self.buffers, self.device, state)
        return ring

    def replay(self, name, make, state=()):
        """A batch from the ring named ``name`` (see ``ring``)."""
        return self.ring(name, make, state)()

    def ring_sizes(self):
        """name -> graphs in its ring."""
        return {name: len(ring.slots) for name, ring in self.rings.items()}


_WHERE = "WindowSampler"


def check_graph_options(cuda_graph, graph_buffers, prefetch):
    """(cuda_graph, graph_buffers) checked; graph_buffers' default is 2 more
    than ``prefetch`` (the batch a loop's variable holds, those in flight
    and the one being made)."""
    if cuda_graph is not None and not isinstance(cuda_graph, bool):
        raise ValueError(
            f"{_WHERE}: cuda_graph must be True or False, or None for the default; "
            f"got {cuda_graph!r}"
        )
    if graph_buffers is None:
        graph_buffers = 2 + prefetch
    if isinstance(graph_buffers, bool) or not isinstance(graph_buffers, int) or graph_buffers < 1:
        raise ValueError(f"{_WHERE}: graph_buffers must be an int >= 1; got {graph_buffers!r}")
    return cuda_graph, graph_buffers
