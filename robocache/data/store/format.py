"""A store on disk: one safetensors file, ``store.safetensors``, every
tensor by name and the rest (keys, tasks, fps, info) in its metadata,
versioned."""

import json
import os

from safetensors import safe_open
from safetensors.torch import load, load_file, save_file

from .packed import PackedStream

FORMAT = "robocache.EpisodeStore"
VERSION = "1"
FILE = "store.safetensors"


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
    for i, s in enumerate(streams.values()):
        tensors[f"streams/{i}/values"] = s.values.contiguous().cpu()
        tensors[f"streams/{i}/times"] = s.times.contiguous().cpu()
        tensors[f"streams/{i}/offsets"] = s.offsets.contiguous().cpu()
        for name, t in s.stats.items():
            tensors[f"streams/{i}/stats/{name}"] = t.contiguous().cpu()
    meta = {
        "format": FORMAT,
        "version": VERSION,
        "keys": json.dumps(list(streams)),
        "tasks": json.dumps(tasks),
        "fps": json.dumps(fps),
        "info": meta_info,
    }
    path = os.path.join(directory, FILE)
    save_file(tensors, path + ".tmp", metadata=meta)
    os.replace(path + ".tmp", path)


def read(directory, mmap=True):
    """(streams, episodes, tasks, fps, info) of a store written by ``write``.
    With ``mmap`` the tensors map the file (nothing is read until used)."""
    path = os.path.join(directory, FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"EpisodeStore.load: no {FILE} in {directory}")
    if mmap:
        tensors = load_file(path)
    else:
        with open(path, "rb") as f:
            tensors = load(f.read())
    with safe_open(path, framework="pt") as f:
        meta = f.metadata() or {}
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise ValueError(
            f"EpisodeStore.load: {path} is not an EpisodeStore of version {VERSION} "
            f"(format {meta.get('format')!r}, version {meta.get('version')!r})"
        )
    streams = {}
    for i, key in enumerate(json.loads(meta["keys"])):
        prefix = f"streams/{i}/"
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
        )
    episodes = {
        name[len("episodes/") :]: t for name, t in tensors.items() if name.startswith("episodes/")
    }
    info = json.loads(meta.get("info", "{}"))
    return streams, episodes, json.loads(meta["tasks"]), json.loads(meta["fps"]), info
