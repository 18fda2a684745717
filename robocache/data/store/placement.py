"""Where each key of a store lives: on the GPU, in pinned host memory, mapped
from the store's file, or in ordinary host memory.

- ``"cuda"``: the whole stream on the GPU.
- ``"pinned"``: its values in page-locked host memory, which a CUDA kernel
  reads directly (unified addressing); its times, offsets and statistics on
  the GPU.
- ``"mapped"``: its values read from the saved file on demand (a store that
  ``EpisodeStore.load`` mapped); its times, offsets and statistics on the
  host, where its windows are cut.
- ``"cpu"``: the whole stream in ordinary host memory.

``"auto"`` keeps the times, offsets, statistics and the smallest streams on
the GPU within a byte budget, and moves the largest streams' values to
pinned memory first.
"""

import fnmatch

import torch

PLACES = ("cuda", "pinned", "mapped", "cpu")
# "auto"'s default GPU budget: this share of the memory free when it is asked.
AUTO_SHARE_OF_FREE = 0.5
_WHERE = "EpisodeStore.place"


def current_place(stream, mapped):
    """Where a stream's values are now (``mapped``: whether they still map
    the store's file)."""
    if stream.values.is_cuda:
        return "cuda"
    if mapped:
        return "mapped"
    if torch.cuda.is_available() and stream.values.is_pinned():
        return "pinned"
    return "cpu"


def resolve(placement, streams, current, mappable, budget=None):
    """key -> place for every key: ``placement`` is one place for all keys,
    ``"auto"``, or a dict of fnmatch patterns -> place (the first pattern a
    key matches wins; keys no pattern matches stay where they are)."""
    keys = list(streams)
    if placement == "auto":
        return auto(streams, mappable, budget)
    if isinstance(placement, str):
        placement = {"*": placement}
    if not isinstance(placement, dict) or not placement:
        raise TypeError(
            f"{_WHERE}: placement must be 'auto', one of {PLACES}, or a dict of key patterns "
            f"-> place; got {placement!r}"
        )
    plan = dict(current)
    claimed = set()
    for pattern, place in placement.items():
        if not isinstance(pattern, str):
            raise TypeError(
                f"{_WHERE}: placement's keys are key patterns (str, fnmatch); got {pattern!r} "
                f"({type(pattern).__name__}); the keys are {keys}"
            )
        if place not in PLACES:
            raise ValueError(
                f"{_WHERE}: placement[{pattern!r}] must be one of {PLACES}; got {place!r}"
            )
        matched = [k for k in keys if fnmatch.fnmatchcase(k, pattern)]
        if not matched:
            raise ValueError(
                f"{_WHERE}: the pattern {pattern!r} matches no key; the keys are {keys}"
            )
        for key in matched:
            if key not in claimed:
                plan[key] = place
                claimed.add(key)
    for key, place in plan.items():
        check_place(key, place, mappable.get(key, False))
    return plan


def check_place(key, place, mappable):
    if place in ("cuda", "pinned") and not torch.cuda.is_available():
        raise RuntimeError(
            f"{_WHERE}: {key!r} cannot be {place!r}: torch {torch.__version__} sees no CUDA "
            "device ('pinned' memory serves a GPU). Use 'cpu', or 'mapped' for a store loaded "
            "from its file"
        )
    if place == "mapped" and not mappable:
        raise ValueError(
            f"{_WHERE}: {key!r} cannot be 'mapped': its values are not mapped from a store "
            "file. Save the store, then EpisodeStore.load(directory, placement=...)"
        )


def index_nbytes(stream):
    """The bytes of a stream that stay with the sampler's index: its times,
    offsets and statistics."""
    tensors = (stream.times, stream.offsets, *stream.stats.values())
    return sum(t.numel() * t.element_size() for t in tensors)


def values_nbytes(stream):
    return stream.values.numel() * stream.values.element_size()


def auto(streams, mappable, budget):
    """The smallest streams on the GPU within ``budget`` bytes (default: a
    share of the free GPU memory), after every stream's index; the rest
    pinned, and encoded frames (JPEG, PNG) pinned whatever their size: the
    decoders read their bytes from host memory."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{_WHERE}: placement='auto' places keys on a GPU, and torch {torch.__version__} "
            "sees none; use 'cpu' (or 'mapped' for a loaded store)"
        )
    if budget is None:
        free, _ = torch.cuda.mem_get_info()
        budget = int(free * AUTO_SHARE_OF_FREE)
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise ValueError(f"{_WHERE}: budget must be a number of bytes >= 0; got {budget!r}")
    needed = sum(index_nbytes(s) for s in streams.values())
    if needed > budget:
        raise ValueError(
            f"{_WHERE}: the GPU budget of {budget} bytes cannot hold the times, offsets and "
            f"statistics every placement keeps there ({needed} bytes); give a larger budget"
        )
    plan, left = {}, budget - needed
    for key in sorted(streams, key=lambda k: values_nbytes(streams[k])):
        if streams[key].encoding is not None:
            plan[key] = "pinned"  # encoded frames are decoded from host memory
            continue
        size = values_nbytes(streams[key])
        plan[key] = "cuda" if size <= left else "pinned"
        left -= size if plan[key] == "cuda" else 0
    return plan


def place_stream(stream, place, read=False):
    """The stream where ``place`` says (a new PackedStream; tensors already
    there are not copied, but ``read`` copies mapped values into memory)."""
    cuda = torch.device("cuda") if place in ("cuda", "pinned") else None
    host = torch.device("cpu")
    index_device = cuda if cuda is not None else host

    def index(t):
        return t.to(index_device)

    if place == "cuda":
        values = stream.values.to(cuda)
    elif place == "pinned":
        values = stream.values if stream.values.is_pinned() else stream.values.cpu().pin_memory()
    elif place == "mapped":
        values = stream.values  # the mapping itself
    else:
        values = stream.values.clone() if read else stream.values.to(host)
    stats = {k: index(v) for k, v in stream.stats.items()}
    byte_offsets = None if stream.byte_offsets is None else index(stream.byte_offsets)
    return stream.with_values(
        values, index(stream.times), index(stream.offsets), stats, byte_offsets
    )
