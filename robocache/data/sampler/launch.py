"""How one store's batches are launched (``StoreBatches``): made ahead on a
side stream, or replayed from CUDA graphs, chosen from where its keys lie
and how they are read."""

from .graphs import COUNTS_REFERENCES, BatchGraphs, check_graph_options

_WHERE = "WindowSampler"


def prefetch_depth(batches, prefetch, on_gpu):
    """The batches that ``batches`` (a StoreBatches) makes ahead on a side
    stream: ``prefetch`` where its batches are cut on the GPU; by default
    only where a key's batch is made on the host when asked for (read from
    the file outside a graph, or decoded then), whose copy then overlaps
    the step. Not where every key is on the GPU or pinned, or decoded ahead
    by the GPU decoder's queue (from bytes wherever they lie): their cut is
    one kernel (a graph), and a side stream's events cost the host more
    than the overlap saves the step."""
    if not on_gpu:
        return 0
    if prefetch is None:
        decoded_ahead = batches.reader.decoded_ahead(batches.options.read_ahead)
        graphed = _mapped_in_graphs(batches)
        made_on_host = any(
            p.key not in decoded_ahead
            and (p.encoded or p.place not in ("cuda", "pinned"))
            and not (graphed and p.place == "mapped")
            for p in batches.plans
        )
        return 1 if made_on_host else 0
    return prefetch


def _mapped_in_graphs(batches):
    """Whether the mapped keys' batches are cut in CUDA graphs by
    default, their rows copied beside the step (no side stream needed)."""
    options = batches.options
    return (
        options.cuda_graph is not False
        and options.read_ahead >= 1
        and batches.reader.mapped_graphable
        and batches.augmentation is None
        and COUNTS_REFERENCES
    )


def batch_graphs(batches, options, on_gpu):
    """The BatchGraphs of ``batches`` (a StoreBatches, its prefetch chosen),
    or None (see WindowSampler's cuda_graph)."""
    cuda_graph, buffers = check_graph_options(
        options.cuda_graph, options.graph_buffers, batches.prefetch
    )
    # Frames decoded on the GPU: their slot's frames are gathered in the
    # graph, decoded ahead by the iteration's queue.
    decoded_ahead = batches.reader.decoded_ahead(options.read_ahead)
    graphable_frames = not batches.reader.frames and all(
        f.plan.key in decoded_ahead for f in batches.reader.gpu_frames
    )
    # Mapped keys: each batch's rows, read ahead, are copied into the
    # buffers the graphs cut them from.
    graphable_mapped = not batches.reader.mapped or (
        batches.reader.mapped_graphable and options.read_ahead >= 1
    )
    graphable = graphable_frames and graphable_mapped
    if cuda_graph is None:  # on where it is safe: the GPU, and batches kept stay kept
        cuda_graph = on_gpu and COUNTS_REFERENCES and batches.augmentation is None and graphable
    if not cuda_graph:
        return None
    if batches.augmentation is not None:
        raise ValueError(
            f"{_WHERE}: cuda_graph=True with augment: each batch's augmentation is drawn "
            "on the host, outside any CUDA graph; use cuda_graph=False"
        )
    if not graphable_mapped:
        raise ValueError(
            f"{_WHERE}: cuda_graph=True: {batches.reader.mapped[0].plan.key!r} is mapped from "
            "the store's file, and its batches' rows are read outside any CUDA graph "
            "(with read_ahead=0, a key in mode 'mean', or batches kept on the host); use "
            "cuda_graph=False, read_ahead >= 1, or place the key 'pinned' or 'cuda'"
        )
    if not graphable_frames:
        key = (batches.reader.frames or batches.reader.gpu_frames)[0].plan.key
        raise ValueError(
            f"{_WHERE}: cuda_graph=True: {key!r} holds encoded frames decoded per batch "
            "outside any CUDA graph (on the host, or with read_ahead=0); use "
            "cuda_graph=False, the GPU decoder with read_ahead >= 1, or a store built "
            "with frames='raw'"
        )
    if not on_gpu:
        raise ValueError(
            f"{_WHERE}: cuda_graph=True needs the store and the batches on a CUDA device "
            f"(store.to('cuda'), or every key placed 'cuda' or 'pinned'); the store is on "
            f"{batches.store.device}"
        )
    return BatchGraphs(buffers, batches.device)
