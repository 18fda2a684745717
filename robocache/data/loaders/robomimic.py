"""robomimic HDF5 datasets (h5py): ``data/demo_N`` groups holding
``actions``, ``rewards``, ``dones``, ``states``, ``obs/<key>`` and
``next_obs/<key>``, each with ``num_samples`` rows; splits in
``mask/<filter_key>``. There are no timestamps: frame k is at k / fps."""

import json
import re

from ._common import LoaderError, frame_times, packed_store, reading, skipping

__all__ = ["load_robomimic"]


def _datasets(group, where, prefix=""):
    """Paths of every dataset under a demo group, in file order. An object
    h5py cannot open is an error (``group.items()`` would give None for it,
    and the key would be dropped)."""
    import h5py

    out = []
    for name in group:
        path = f"{prefix}{name}"
        item = group[name]
        if isinstance(item, h5py.Dataset):
            out.append(path)
        elif isinstance(item, h5py.Group):
            out += _datasets(item, where, path + "/")
        else:
            raise LoaderError(f"{where}: {path} is neither a dataset nor a group")
    return out


def _demo_number(name):
    match = re.fullmatch(r"demo_(\d+)", name)
    return int(match.group(1)) if match else None


def load_robomimic(
    path,
    fps,
    keys=None,
    filter_key=None,
    *,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of a robomimic HDF5 file, one episode per demo.

    Args:
        path: the .hdf5 file.
        fps: the rate the demos were recorded at (robomimic stores none).
        keys: stream names to load, as paths in a demo group (``"actions"``,
            ``"obs/robot0_joint_pos"``); default: every dataset of every demo
            loaded, which every demo must then hold.
        filter_key: load only the demos listed in ``mask/<filter_key>``.
        frames, jpeg_quality, resize: image streams kept raw, as JPEG or as
            PNG, and resized once, as ``EpisodeStore.from_episodes`` takes them.
        skip_bad: skip demos that fail a check (reported in a warning)
            instead of raising; where every demo is skipped, a LoaderError
            lists them and why.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Demos load in the order of their numbers; ``episode_index`` is N of
    ``demo_N``. Each demo is read whole, one at a time. The environment's
    description, ``data.attrs["env_args"]`` (JSON), is ``store.info["env_args"]``
    (a dict; the raw string where it is not JSON).

    A demo without one of the keys (named, or held by another demo) is a
    LoaderError naming the demo and the key; ``skip_bad`` skips it.

    Any h5py error (a truncated file, a damaged group, object header or
    chunk) is a LoaderError naming the file, the demo and the key; so is an
    object h5py cannot open, which a walk of the group would skip. HDF5
    verifies a dataset's fletcher32 checksum, where it has one, as it reads.
    What that leaves unchecked depends on the writer: robomimic's files (h5py's
    defaults: the oldest file format, no filters) carry no checksum at all, so
    a changed byte in a dataset's values reads as a changed value. Files
    written with ``libver="latest"`` and ``fletcher32=True`` have their
    metadata and every chunk checked, all but the global heap (variable-length
    strings such as ``env_args``), where HDF5 may even loop forever on a
    damaged object size (HDFGroup/hdf5#1707). The checks cost nothing
    measurable; fletcher32 itself is HDF5's cost, paid on read.
    """
    import h5py

    where = f"load_robomimic({path})"
    try:
        f = h5py.File(path, "r")
    except Exception as e:  # OSError mostly; h5py raises others for some damage
        raise LoaderError(f"{where}: cannot open the file: {type(e).__name__}: {e}") from e
    with f:
        with reading(where, "the list of demos"):
            if "data" not in f:
                raise LoaderError(f"{where}: no 'data' group (not a robomimic file)")
            data = f["data"]
            names = sorted((n for n in data if _demo_number(n) is not None), key=_demo_number)
        if filter_key is not None:
            with reading(where, f"mask/{filter_key}"):
                if f"mask/{filter_key}" not in f:
                    masks = sorted(f["mask"]) if "mask" in f else []
                    raise LoaderError(f"{where}: no mask/{filter_key}; the masks are {masks}")
                wanted = {
                    n.decode() if isinstance(n, bytes) else str(n)
                    for n in f[f"mask/{filter_key}"][()]
                }
            names = [n for n in names if n in wanted]
        if not names:
            raise LoaderError(f"{where}: no demos to load")
        holder = {}  # key -> the first demo holding it, where keys is None
        unreadable = {}  # with skip_bad: demo -> the error walking its group
        if keys is None:
            for name in names:
                try:
                    with reading(where, f"the datasets of {name}"):
                        for key in _datasets(data[name], f"{where}, {name}"):
                            holder.setdefault(key, name)
                except LoaderError as e:
                    if not skip_bad:
                        raise
                    unreadable[name] = e
            keys = holder
        keys = list(keys)

        def demo(name):
            here = f"{where}, {name}"
            if name in unreadable:
                raise unreadable[name]
            with reading(here, "the group and its num_samples"):
                group = data[name]
                n = group.attrs.get("num_samples")
                n = None if n is None else int(n)
            episode = {"episode_index": _demo_number(name)}
            for key in keys:
                with reading(here, f"key {key!r}"):
                    if key not in group:
                        held = f" ({holder[key]} holds it)" if key in holder else ""
                        raise LoaderError(f"{here}: no key {key!r}{held}")
                    dataset = group[key]
                    shape = dataset.shape
                rows = shape[0] if shape else 0
                if n is None:
                    n = rows
                if not shape or rows != n:  # before the read: a damaged shape can be huge
                    raise LoaderError(f"{here}, key {key!r}: {rows} rows, but num_samples is {n}")
                try:
                    # HDF5 verifies a dataset's fletcher32 checksums as it reads;
                    # a mismatch is "filter returned failure during read".
                    values = dataset[()]
                except MemoryError:
                    raise
                except Exception as e:  # h5py's types vary with the damage
                    with reading(here, f"key {key!r}"):
                        checked = " (fletcher32)" if dataset.fletcher32 else ""
                    raise LoaderError(
                        f"{here}: cannot read key {key!r}{checked}: {type(e).__name__}: {e}"
                    ) from e
                episode[key] = (values, frame_times(n, fps, where))
            episode["length"] = n
            return episode

        demo_names = {_demo_number(n): n for n in names}
        episodes = skipping(((n, lambda n=n: demo(n)) for n in names), skip_bad, where)
        info = {}
        with reading(where, "data's env_args attribute"):
            if "env_args" in data.attrs:
                info["env_args"] = _env_args(data.attrs["env_args"])
        return packed_store(
            where,
            episodes,
            place=lambda episode: f"{where}, {demo_names[episode['episode_index']]}",
            fps=fps,
            progress=progress,
            total=len(names),
            device=device,
            info=info,
            frames=frames,
            jpeg_quality=jpeg_quality,
            resize=resize,
        )


def _env_args(raw):
    """robomimic's env_args attribute: a JSON string (bytes in some files)."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    try:
        return json.loads(text)
    except ValueError:
        return text
