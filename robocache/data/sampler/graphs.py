"""WindowSampler batches replayed from CUDA graphs: a batch costs the host
one index copy and one replay.

A graph writes every batch of its size into the same buffers. A buffer is
written again only when nothing outside the ring refers to it any more: no
Python reference to the batch's tensors, no view of them, no autograd graph
that saved them. Where one still does, the ring grows (up to a bound), and
past it the batch is cut without a graph; so a batch kept, however long,
never changes under its holder."""

import sys

import torch

# The graphs one batch size may hold at most; past them a batch whose ring
# slots are all in use is made without a graph.
MAX_GRAPHS_PER_SIZE = 16
# Whether this torch lets the ring count a batch's references (else a slot is
# written again in turn, and a batch holds until `buffers` more are drawn).
COUNTS_REFERENCES = hasattr(torch.Tensor, "_use_count") and hasattr(torch._C, "_storage_Use_Count")


def _references(tensor):
    """(Python references, TensorImpl references, storage references)."""
    return (
        sys.getrefcount(tensor),
        tensor._use_count(),
        torch._C._storage_Use_Count(tensor.untyped_storage()._cdata),
    )


class _Slot:
    def __init__(self, static_index, graph, batch):
        self.static_index, self.graph, self.batch = static_index, graph, batch
        self.free = None  # the references of an unheld batch, read after capture

    def held(self):
        """Whether anything outside the slot still refers to its batch: more
        references to any of its tensors than when it was last free."""
        if not COUNTS_REFERENCES:
            return False
        counts = [_references(t) for t in self.batch.values()]
        if self.free is None:
            self.free = counts
            return False
        if any(c > f for now, then in zip(counts, self.free) for c, f in zip(now, then)):
            return True
        self.free = counts  # fewer than at capture (its own temporaries gone): the new floor
        return False


class BatchGraphs:
    """``make_batch(index)`` captured in CUDA graphs: a ring of graphs per
    batch size, each with its own index and output buffers, starting at
    ``buffers`` and growing while its batches are held."""

    def __init__(self, make_batch, example_rows, buffers):
        self.make_batch, self.example_rows, self.buffers = make_batch, example_rows, buffers
        self.rings = {}  # batch size -> [slots, the next slot]

    def __call__(self, index):
        size = index.numel()
        ring = self.rings.get(size)
        if ring is None:
            ring = self.rings[size] = [[self._capture(size) for _ in range(self.buffers)], 0]
        slots, start = ring
        for step in range(len(slots)):
            k = (start + step) % len(slots)
            if not slots[k].held():
                ring[1] = (k + 1) % len(slots)
                return self._replay(slots[k], index)
        if len(slots) < max(MAX_GRAPHS_PER_SIZE, self.buffers):
            slots.insert(start, self._capture(size))
            ring[1] = (start + 1) % len(slots)
            return self._replay(slots[start], index)
        return self.make_batch(index)  # every graph's batch is still held

    @staticmethod
    def _replay(slot, index):
        slot.static_index.copy_(index)
        slot.graph.replay()
        return dict(slot.batch)

    def _capture(self, size):
        rows = self.example_rows
        device = rows.device
        static_index = rows[torch.arange(size, device=device) % rows.numel()]
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # lazy initialisation happens outside the graph
            self.make_batch(static_index)
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            batch = self.make_batch(static_index)
        slot = _Slot(static_index, graph, batch)
        slot.held()
        return slot


_WHERE = "WindowSampler"


def make_graphs(sampler, cuda_graph, graph_buffers, on_gpu):
    """A WindowSampler's BatchGraphs, or None: ``cuda_graph`` checked, its
    default (on where every key is read on the GPU, batches go there and no
    augmentation draws on the host) applied."""
    if cuda_graph is not None and not isinstance(cuda_graph, bool):
        raise ValueError(
            f"{_WHERE}: cuda_graph must be True or False, or None for the default; "
            f"got {cuda_graph!r}"
        )
    if graph_buffers is None:
        graph_buffers = 2 + sampler.prefetch
    if isinstance(graph_buffers, bool) or not isinstance(graph_buffers, int) or graph_buffers < 1:
        raise ValueError(f"{_WHERE}: graph_buffers must be an int >= 1; got {graph_buffers!r}")
    if cuda_graph is None:  # on where it is safe: the GPU, and batches kept stay kept
        cuda_graph = on_gpu and COUNTS_REFERENCES and sampler._augmentation is None
    if not cuda_graph:
        return None
    if sampler._augmentation is not None:
        raise ValueError(
            f"{_WHERE}: cuda_graph=True with augment: each batch's augmentation is drawn "
            "on the host, outside any CUDA graph; use cuda_graph=False"
        )
    if sampler._frame_keys:
        raise ValueError(
            f"{_WHERE}: cuda_graph=True: {sampler._frame_keys[0].plan.key!r} holds encoded "
            "frames, which are decoded per batch outside any CUDA graph; use "
            "cuda_graph=False (or a store built with frames='raw')"
        )
    if sampler._anchors.device.type != "cuda" or sampler.device.type != "cuda":
        raise ValueError(
            f"{_WHERE}: cuda_graph=True needs the store and the batches on a CUDA device "
            f"(store.to('cuda'), or every key placed 'cuda' or 'pinned'); the store is on "
            f"{sampler.store.device}"
        )
    return BatchGraphs(sampler._batch, sampler._anchors, graph_buffers)
