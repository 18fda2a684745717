"""WindowSampler batches replayed from CUDA graphs: a batch costs the host
one index copy and one replay."""

import torch


class BatchGraphs:
    """``make_batch(index)`` captured in CUDA graphs, a ring of ``buffers``
    graphs per batch size, each with its own index and output buffers.

    A batch's tensors are its graph's outputs: they hold that batch until
    ``buffers`` more batches of its size have been drawn."""

    def __init__(self, make_batch, example_rows, buffers):
        self.make_batch, self.example_rows, self.buffers = make_batch, example_rows, buffers
        self.rings = {}  # batch size -> [slots, the next slot]

    def __call__(self, index):
        size = index.numel()
        ring = self.rings.get(size)
        if ring is None:
            ring = self.rings[size] = [[self._capture(size) for _ in range(self.buffers)], 0]
        slots, k = ring
        ring[1] = (k + 1) % len(slots)
        static_index, graph, batch = slots[k]
        static_index.copy_(index)
        graph.replay()
        return dict(batch)

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
        return static_index, graph, batch
