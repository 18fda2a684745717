"""Diffusion Policy replay buffers (zarr; zarr 3 reads the v2 stores):
``data/<key>`` arrays, time-major, and ``meta/episode_ends`` (cumulative).

What zarr leaves unchecked, the loader checks before it reads a row: zarr
reads a chunk missing from the store as ``fill_value``, skips a folder
without ``.zarray`` with only a warning, and Blosc decodes a truncated chunk
into other values (its decoder takes the length from the chunk's header).
"""

import numpy as np

from ._common import LoaderError, frame_times, packed_store, reading, skipping

__all__ = ["load_zarr"]

# Names in a zarr folder that are metadata, not members or chunks.
_METADATA = {".zgroup", ".zattrs", ".zarray", ".zmetadata", "zarr.json"}


def load_zarr(
    path,
    fps,
    keys=None,
    *,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of a replay buffer, one episode per ``episode_ends`` entry.

    Args:
        path: the .zarr directory (or any store zarr.open_group takes).
        fps: the rate the buffer was recorded at (frame k is at k / fps).
        keys: arrays under ``data/`` to load (default: all of them).
        frames, jpeg_quality, resize: image streams kept raw, as JPEG or as
            PNG, and resized once, as ``EpisodeStore.from_episodes`` takes them.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Each episode's rows are read as one slice per key (chunked reads), so
    memory holds one episode at a time besides the store being built.

    Checked before any row is read, each failure a LoaderError naming the
    array and the chunk: every member of ``data/`` is an array (or ``keys``
    leaves it out); every chunk of every array read is in the store, and none
    lies outside the array's shape; every Blosc chunk is as long as its header
    says; ``meta/episode_ends`` is whole, non-decreasing, from 0, and ends at
    every array's last row. A chunk that fails to decode is named too; with
    ``skip_bad``, a missing or undecodable chunk skips the episodes it holds.

    Refused as well, though zarr would read them: a buffer written by zarr 3
    without ``write_empty_chunks=True`` (it leaves out every chunk equal to
    ``fill_value``: missing chunks), chunks wider than the array on an axis
    after the first (zarr picks none; a shape shrunk by a changed digit in
    ``.zarray`` would read fewer columns), and a dtype not in the machine's
    byte order (a ``<`` changed to ``>``).

    zarr v2 chunks carry no checksum of their own: a changed byte inside a
    chunk is found only where the codec checks its output (Zstd with
    ``checksum=True``, a CRC32 filter), never in raw chunks and mostly not in
    Blosc ones (Diffusion Policy's default).

    The checks list each array's chunks and read each Blosc chunk's 16-byte
    header: about 3% of a load (each array is opened once, not once an
    episode, which more than pays for them).
    """
    import zarr

    where = f"load_zarr({path})"
    try:
        root = zarr.open_group(str(path), mode="r")
    except Exception as e:  # zarr raises several types for a missing or foreign store
        raise LoaderError(f"{where}: cannot open as a zarr group: {e}") from e
    with reading(where, "the group's members"):
        has = "data" in root and "meta/episode_ends" in root
    if not has:
        raise LoaderError(f"{where}: needs data/<key> arrays and meta/episode_ends")
    with reading(where, "data/"):
        data = root["data"]
        available, unreadable = _data_arrays(data)
    keys = list(keys) if keys is not None else available + unreadable
    for key in keys:
        if key in unreadable:
            raise LoaderError(
                f"{where}: data/{key} is not a readable zarr array (no .zarray, or a group); "
                f"the arrays are {available} (keys= can leave it out)"
            )
        if key not in available:
            raise LoaderError(f"{where}: no data/{key}; the arrays are {available}")

    with reading(where, "meta/episode_ends"):
        ends_array = root["meta/episode_ends"]
    if not isinstance(ends_array, zarr.Array):
        raise LoaderError(f"{where}: meta/episode_ends is not a readable zarr array")
    bad = _bad_chunks(ends_array, "meta/episode_ends", where)
    if bad:
        raise LoaderError(bad[0][2])
    ends = _read(ends_array, "meta/episode_ends", where)
    if ends.ndim != 1 or ends.dtype.kind not in "iu":
        raise LoaderError(
            f"{where}: meta/episode_ends must be 1-D integers; got {ends.dtype} {ends.shape}"
        )
    ends = ends.astype(np.int64)
    if ends.size and (ends[0] < 0 or np.any(np.diff(ends) < 0)):
        raise LoaderError(
            f"{where}: meta/episode_ends must be non-decreasing and >= 0; got {ends[:8]}..."
        )
    total = int(ends[-1]) if ends.size else 0

    arrays, bad_chunks = {}, {}
    for key in keys:
        with reading(where, f"data/{key}"):
            arrays[key] = data[key]
        rows = arrays[key].shape[0] if arrays[key].ndim else 0
        if rows < total:
            raise LoaderError(
                f"{where}, key {key!r}: {rows} rows, but episode_ends reaches {total} (truncated?)"
            )
        if rows > total:
            raise LoaderError(
                f"{where}, key {key!r}: {rows} rows, but episode_ends ends at {total} "
                "(meta/episode_ends lost entries, or an episode was never closed)"
            )
        bad_chunks[key] = _bad_chunks(arrays[key], f"data/{key}", where)
        if bad_chunks[key] and not skip_bad:
            raise LoaderError(bad_chunks[key][0][2])
    starts = np.concatenate([[0], ends[:-1]])

    def episode(e):
        a, z = int(starts[e]), int(ends[e])
        out = {"episode_index": e, "length": z - a}
        for key in keys:
            for first, stop, message in bad_chunks[key]:
                if first < z and a < stop:
                    raise LoaderError(f"{message} (episode {e} has rows {a}-{z - 1})")
            values = _read(arrays[key], f"data/{key}", f"{where}, episode {e}", a, z)
            out[key] = (values, frame_times(z - a, fps, where))
        return out

    episodes = skipping(
        ((f"episode {e}", lambda e=e: episode(e)) for e in range(len(ends))), skip_bad, where
    )
    return packed_store(
        where,
        episodes,
        fps=fps,
        progress=progress,
        total=len(ends),
        device=device,
        frames=frames,
        jpeg_quality=jpeg_quality,
        resize=resize,
    )


def _data_arrays(data):
    """The names of the members of data/ that are arrays, and of those that
    are not (a folder without .zarray, a group): zarr skips the latter with
    only a warning; the loader refuses them."""
    import warnings

    from zarr.core.sync import sync

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # what zarr cannot read is the caller's error
        arrays = sorted(name for name, _ in data.arrays())

    async def listing():
        return {name async for name in data.store.list_dir(data.path)}

    others = sorted(name for name in sync(listing()) - _METADATA if name not in arrays)
    return arrays, others


def _bad_chunks(array, name, where):
    """(first row, stop row, message) of each chunk of the array that is not
    in the store, or (Blosc) shorter or longer than its header says. Metadata
    that cannot be the array's raises at once."""
    per = array.shards or array.chunks  # the objects the store holds
    if any(c <= 0 for c in per):
        raise LoaderError(f"{where}: {name}: chunks {array.chunks} (the metadata is corrupt?)")
    wider = [i for i in range(1, array.ndim) if array.chunks[i] > array.shape[i]]
    if wider:
        # zarr's writers chunk no wider than the array unless told to; a shape
        # shrunk within its one chunk (a changed digit in .zarray) would read
        # fewer columns.
        raise LoaderError(
            f"{where}: {name}: chunks {array.chunks} are wider than the shape {array.shape} "
            f"on axis {wider[0]} (the metadata is corrupt?)"
        )
    if not np.dtype(array.dtype).isnative:
        raise LoaderError(
            f"{where}: {name}: dtype {array.dtype} is not in this machine's byte order "
            "(a '<' in .zarray changed to '>'?); the store holds native values"
        )
    store, prefix = array.store, array.store_path.path
    with reading(where, f"{name}'s chunk list"):
        stored = _stored_keys(store, prefix)
    grid = tuple(-(-n // c) for n, c in zip(array.shape, per))
    keys = {f"{prefix}/{array.metadata.encode_chunk_key(c)}": c for c in np.ndindex(*grid)}
    outside = sorted(k for k in stored - set(keys) if k.rsplit("/", 1)[-1] not in _METADATA)
    if outside:
        raise LoaderError(
            f"{where}: {name}: chunk {outside[0][len(prefix) + 1 :]} is in the store but "
            f"outside the shape {array.shape} in chunks of {per} (the metadata is corrupt?)"
        )

    def bad(key, why):
        chunk = key[len(prefix) + 1 :]
        if not array.ndim:
            return 0, 2**62, f"{where}: {name}: chunk {chunk} {why}"
        first = keys[key][0] * per[0]
        rows = f"rows {first}-{min(first + per[0], array.shape[0]) - 1}"
        return first, first + per[0], f"{where}: {name}: chunk {chunk} ({rows}) {why}"

    out = [
        bad(
            key,
            "is missing from the store (zarr would read fill_value; zarr 3 writes no "
            "chunk equal to fill_value unless write_empty_chunks=True)",
        )
        for key in keys
        if key not in stored
    ]
    if any(_is_blosc(codec) for codec in array.compressors):
        present = [key for key in keys if key in stored]
        with reading(where, f"{name}'s chunks"):
            lengths = _blosc_lengths(store, present)
        out += [
            bad(key, f"holds {size} bytes, but its Blosc header says {claimed} (truncated?)")
            for key, (size, claimed) in zip(present, lengths)
            if size != claimed
        ]
    return sorted(out)


def _is_blosc(codec):
    from numcodecs import Blosc

    return isinstance(codec, Blosc)


def _local_root(store):
    """The folder of a zarr LocalStore, None for other stores. Its files are
    read here directly: through zarr's async store API each small read costs
    about 0.3 ms, enough to make the checks a fifth of a load."""
    from zarr.storage import LocalStore

    return str(store.root) if isinstance(store, LocalStore) else None


def _stored_keys(store, prefix):
    """The keys the store holds under ``prefix/``."""
    import os

    from zarr.core.sync import sync

    root = _local_root(store)
    if root is not None:
        top = os.path.join(root, prefix)
        return {
            f"{prefix}/{os.path.relpath(os.path.join(d, f), top).replace(os.sep, '/')}"
            for d, _, names in os.walk(top)
            for f in names
        }

    async def listing():
        return {key async for key in store.list_prefix(prefix + "/")}

    return sync(listing())


def _blosc_lengths(store, keys):
    """(stored size, the size its Blosc header claims) of each chunk."""
    import asyncio
    import os

    from numcodecs import blosc
    from zarr.abc.store import RangeByteRequest
    from zarr.core.buffer import default_buffer_prototype
    from zarr.core.sync import sync

    # blosc_cbuffer_sizes: public in numcodecs < 0.16, private since.
    sizes = getattr(blosc, "cbuffer_sizes", None) or blosc._cbuffer_sizes

    def claimed(head):
        return sizes(head)[1] if len(head) == 16 else None

    root = _local_root(store)
    if root is not None:
        out = []
        for key in keys:
            with open(os.path.join(root, key), "rb") as f:
                out.append((os.fstat(f.fileno()).st_size, claimed(f.read(16))))
        return out
    prototype = default_buffer_prototype()

    async def one(key):
        head = await store.get(key, prototype=prototype, byte_range=RangeByteRequest(0, 16))
        return await store.getsize(key), claimed(head.to_bytes() if head is not None else b"")

    async def every():
        return await asyncio.gather(*(one(key) for key in keys))

    return sync(every())


def _read(array, name, where, start=None, stop=None):
    """Rows start:stop of the array (all of it by default); a chunk that fails
    to decode is a LoaderError naming it."""
    try:
        return np.asarray(array[start:stop] if array.ndim else array[()])
    except Exception as e:  # a codec's error for a corrupt chunk, of any type
        chunk = _failing_chunk(array, start, stop)
        raise LoaderError(
            f"{where}: {name}{f', chunk {chunk}' if chunk else ''}: cannot be decoded: "
            f"{type(e).__name__}: {e}"
        ) from e


def _failing_chunk(array, start, stop):
    """The key of the first chunk in rows start:stop that fails to decode."""
    if not array.ndim:
        return None
    per = array.shards or array.chunks
    grid = [-(-n // c) for n, c in zip(array.shape, per)]
    first = (start or 0) // per[0]
    last = -(-(array.shape[0] if stop is None else stop) // per[0])
    for coords in np.ndindex(last - first, *grid[1:]):
        coords = (coords[0] + first, *coords[1:])
        try:
            array[tuple(slice(c * p, (c + 1) * p) for c, p in zip(coords, per))]
        except Exception:  # the error the caller reports
            return array.metadata.encode_chunk_key(coords)
    return None
