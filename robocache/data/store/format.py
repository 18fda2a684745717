"""A store on disk: one safetensors file, ``store.safetensors``, every
tensor by name and the rest (keys, tasks, fps, info, checksums) in its
metadata, versioned.

Every tensor carries a CRC-32 in the metadata, and each stream's values one
a episode (``streams/<i>/checksums``, (E,)), so that a rank's shard verifies
only its own episodes' bytes. ``read`` checks the structure, then the
checksums of everything but the values, and names the file in every error;
the values' are checked as their episodes are first read (checks.py)."""

import json
import os
import warnings
import zlib
from dataclasses import replace

from safetensors import safe_open
from safetensors.torch import load_file, save_file

from ..errors import LoaderError
from ..frames import FrameEncoding
from .checks import EpisodeChecks
from .packed import PackedStream
from .rows import MappedRows, StoreFile, tensor_extents
from .validate import check_structure, episode_crc32, tensor_crc32, verify_checksums

FORMAT = "robocache.EpisodeStore"
VERSION = "1"
FILE = "store.safetensors"
# The checksums' entry for the metadata itself (keys, tasks, fps, info).
_METADATA = "metadata"
# Metadata a store written before they were added lacks (read as {}).
_OPTIONAL = ("info", "encodings")
_DESCRIBED = ("format", "version", "keys", "tasks", "fps", "info", "encodings")


def _metadata_crc32(meta):
    described = _DESCRIBED if "encodings" in meta else _DESCRIBED[:-1]  # an older store's
    return zlib.crc32(json.dumps([meta.get(k) for k in described]).encode())


def info_json(info):
    """``info`` as JSON, or a ValueError saying what is not JSON."""
    try:
        return json.dumps(info)
    except (TypeError, ValueError) as e:
        raise ValueError(
            f"EpisodeStore.save: info must hold JSON values (str, number, bool, None, "
            f"list, dict); {e}"
        ) from e


def write(directory, streams, episodes, tasks, fps, info):
    """Writes ``directory/store.safetensors`` (a new file renamed into
    place, so a store mapped from the old file keeps reading it, and a
    crash never leaves half a cache)."""
    meta_info = info_json(info)  # before any tensor is copied to the host
    os.makedirs(directory, exist_ok=True)
    tensors = {f"episodes/{k}": v.contiguous().cpu() for k, v in episodes.items()}
    # Streams are named by position (keys may hold any character); the keys
    # are in the metadata, in that order.
    encodings = {}
    for i, s in enumerate(streams.values()):
        values, offsets = s.values.contiguous().cpu(), s.offsets.contiguous().cpu()
        tensors[f"streams/{i}/values"] = values
        tensors[f"streams/{i}/times"] = s.times.contiguous().cpu()
        tensors[f"streams/{i}/offsets"] = offsets
        rows = offsets
        if s.encoding is not None:
            byte_offsets = s.byte_offsets.contiguous().cpu()
            tensors[f"streams/{i}/byte_offsets"] = byte_offsets
            encodings[str(i)] = s.encoding.to_json()
            rows = byte_offsets[offsets]  # each episode's bytes
        tensors[f"streams/{i}/checksums"] = episode_crc32(values, rows)
        for name, t in s.stats.items():
            tensors[f"streams/{i}/stats/{name}"] = t.contiguous().cpu()
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "keys": json.dumps(list(streams)),
        "tasks": json.dumps(tasks),
        "fps": json.dumps(fps),
        "info": meta_info,
        "encodings": json.dumps(encodings),
    }
    tensors = _unshared(tensors)
    checksums = {
        name: tensor_crc32(t) for name, t in tensors.items() if not name.endswith("/values")
    }
    checksums[_METADATA] = _metadata_crc32(meta)
    meta["checksums"] = json.dumps(checksums)
    path = os.path.join(directory, FILE)
    save_file(tensors, path + ".tmp", metadata=meta)
    os.replace(path + ".tmp", path)


def _unshared(tensors):
    """``tensors`` with each tensor whose bytes overlap an earlier one's (two
    keys of one tensor) copied: safetensors writes each tensor's bytes once
    and refuses tensors that share them."""
    taken, out = {}, {}  # storage -> the byte ranges of it already written
    for name, t in tensors.items():
        start = t.data_ptr()
        end = start + max(1, t.numel() * t.element_size())  # an empty one counts as a byte
        ranges = taken.setdefault(t.untyped_storage().data_ptr(), [])
        if any(start < b and a < end for a, b in ranges):
            t = t.clone()
        else:
            ranges.append((start, end))
        out[name] = t
    return out


def open_file(directory):
    """The store file in ``directory``, held open (a ``rows.StoreFile``)."""
    path = os.path.join(directory, FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"EpisodeStore.load: no {FILE} in {directory}")
    try:
        return StoreFile(path)
    except OSError as e:
        raise LoaderError(f"EpisodeStore.load({path}): cannot open it: {e}") from e


def read(file, verify=True):
    """(streams, episodes, tasks, fps, info, sums) of a store written by
    ``write`` (``file``: its StoreFile, from ``open_file``).

    The values map the file (nothing is read until used); the other tensors
    are read into memory. The structure is always checked; with ``verify``
    the checksums of every tensor but the values, and ``sums`` holds what
    checks the values' episodes when they are read (key -> (tensor name,
    (E,) CRCs, (E + 1,) bounds of the episodes' rows), for ``mapped_rows``;
    None without ``verify``, or for a file saved without checksums)."""
    path = file.path
    where = f"EpisodeStore.load({path})"
    try:
        tensors = load_file(path)
        with safe_open(path, framework="pt") as f:
            meta = f.metadata() or {}
    except Exception as e:  # safetensors' own error type, or the OS's
        raise LoaderError(f"{where}: not a readable safetensors file: {e}") from e
    if not file.is_at_path():  # the map and the descriptor must be of one file
        raise LoaderError(f"{where}: another file was put in its place while it was loaded")
    # Everything but the values (times, offsets, statistics, episodes, CRCs)
    # is read into memory now: a file cut after loading then never faults
    # where the sampler reads its index.
    tensors = {n: t if n.endswith("/values") else t.clone() for n, t in tensors.items()}
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise LoaderError(
            f"{where}: {path} is not an EpisodeStore of version {VERSION} "
            f"(format {meta.get('format')!r}, version {meta.get('version')!r})"
        )
    names = ("keys", "tasks", "fps", "info", "encodings")
    keys, tasks, fps, info, encodings = (_json(meta, n, where) for n in names)
    if not isinstance(keys, list) or not isinstance(tasks, list):
        raise LoaderError(f"{where}: the metadata's keys and tasks must be lists")
    streams = _streams(tensors, keys, _encodings(encodings, len(keys), where), where)
    episodes = {
        name[len("episodes/") :]: t for name, t in tensors.items() if name.startswith("episodes/")
    }
    check_structure(streams, episodes, tasks, where)
    sums = _verify(tensors, meta, streams, where) if verify else None
    return streams, episodes, tasks, fps, info, sums


def mapped_rows(file, keys, sums=None):
    """key -> MappedRows: where each stream's values lie in the store file
    (a StoreFile), with their episodes' checks where ``sums`` (``read``'s)
    holds them."""
    extents = tensor_extents(file)
    out = {}
    for i, key in enumerate(keys):
        name = f"streams/{i}/values"
        dtype, shape, begin, _ = extents[name]
        rows = MappedRows(file, begin, shape[0], dtype, tuple(shape[1:]))
        if sums is not None:
            _, crcs, bounds = sums[key]
            checks = EpisodeChecks(file, key, name, begin, rows.row_bytes, bounds, crcs)
            rows = replace(rows, checks=checks)
        out[key] = rows
    return out


def _json(meta, name, where):
    try:
        return json.loads(meta[name] if name not in _OPTIONAL else meta.get(name, "{}"))
    except (KeyError, ValueError) as e:
        raise LoaderError(f"{where}: the metadata's {name!r} is missing or not JSON: {e}") from e


def _encodings(encodings, count, where):
    """stream position -> FrameEncoding, from the metadata."""
    if not isinstance(encodings, dict):
        raise LoaderError(f"{where}: the metadata's encodings must be a dict")
    out = {}
    for i, d in encodings.items():
        if not i.isdigit() or int(i) >= count:
            raise LoaderError(f"{where}: the metadata encodes stream {i}, which is not one")
        try:
            out[int(i)] = FrameEncoding.from_json(d)
        except ValueError as e:
            raise LoaderError(f"{where}: stream {i}: {e}") from None
    return out


def _streams(tensors, keys, encodings, where):
    """key -> PackedStream; every stream tensor of the file must belong to a key."""
    streams = {}
    for i, key in enumerate(keys):
        prefix = f"streams/{i}/"
        needed = ("values", "times", "offsets") + (("byte_offsets",) if i in encodings else ())
        missing = [p for p in needed if prefix + p not in tensors]
        if missing:
            raise LoaderError(f"{where}: stream {key!r} has no tensor {prefix + missing[0]}")
        if i not in encodings and prefix + "byte_offsets" in tensors:
            raise LoaderError(f"{where}: stream {key!r} has byte offsets but no encoding")
        stats = {
            name[len(prefix) + 6 :]: t
            for name, t in tensors.items()
            if name.startswith(prefix + "stats/")
        }
        streams[key] = PackedStream(
            tensors[prefix + "values"],
            tensors[prefix + "times"],
            tensors[prefix + "offsets"],
            stats,
            tensors.get(prefix + "byte_offsets"),
            encodings.get(i),
        )
    known = {f"streams/{i}" for i in range(len(keys))}
    strays = sorted(
        {"/".join(n.split("/")[:2]) for n in tensors if n.startswith("streams/")} - known
    )
    if strays:
        raise LoaderError(
            f"{where}: the file holds {strays[0]}, but its metadata lists only {len(keys)} "
            "keys: it is corrupt or was not written by EpisodeStore.save"
        )
    return streams


def _verify(tensors, meta, streams, where):
    """Checks every tensor but the values against its CRC-32; returns
    ``read``'s ``sums``."""
    if "checksums" not in meta:
        warnings.warn(
            f"{where}: this store was saved without checksums (by an older robocache); its "
            "bytes cannot be verified. Save it again to add them",
            stacklevel=4,
        )
        return None
    expected = _json(meta, "checksums", where)
    if not isinstance(expected, dict) or expected.pop(_METADATA, None) != _metadata_crc32(meta):
        raise LoaderError(f"{where}: the metadata does not match its checksum: the file is corrupt")
    if any(n not in tensors for n in expected):
        raise LoaderError(f"{where}: the metadata's checksums do not name the file's tensors")
    unchecked = [n for n in tensors if n not in expected and not n.endswith("/values")]
    if unchecked:
        raise LoaderError(f"{where}: {unchecked[0]} has no checksum in the metadata")
    verify_checksums(tensors, expected, where)
    per_episode = {}
    for i, (key, s) in enumerate(streams.items()):
        sums = tensors[f"streams/{i}/checksums"]
        if sums.dim() != 1 or sums.numel() != s.offsets.numel() - 1:
            raise LoaderError(f"{where}: streams/{i}/checksums does not hold one CRC an episode")
        rows = s.offsets.cpu() if s.encoding is None else s.byte_offsets.cpu()[s.offsets.cpu()]
        per_episode[key] = (f"streams/{i}/values", sums.numpy(), rows.numpy())
    return per_episode
