"""CALVIN splits (numpy): one ``episode_XXXXXXX.npz`` per frame (``rgb_static``,
``rgb_gripper``, ``depth_*``, ``actions``, ``rel_actions``, ``robot_obs``,
``scene_obs``), episodes cut by ``ep_start_end_ids.npy`` (inclusive frame
ids), language in ``lang_annotations/auto_lang_ann.npy``."""

import io
import math
import os
import zipfile

import numpy as np

from ._common import LoaderError, frame_times, packed_store, reading, skipping

__all__ = ["load_calvin"]

CALVIN_FPS = 30


def _language(directory, where):
    path = os.path.join(directory, "lang_annotations", "auto_lang_ann.npy")
    if not os.path.isfile(path):
        return None
    # The annotation file is a pickled dict, as CALVIN writes it.
    with reading(where, "lang_annotations/auto_lang_ann.npy"):
        ann = np.load(path, allow_pickle=True).item()
    try:
        pairs = list(zip(ann["info"]["indx"], ann["language"]["ann"], strict=True))
        return [((int(a), int(b)), str(text)) for (a, b), text in pairs]
    except (KeyError, TypeError, ValueError) as e:
        raise LoaderError(
            f"{where}: {path} lacks info/indx or language/ann, or they do not pair up: {e}"
        ) from e


def _ranges(path, where):
    """ep_start_end_ids.npy: (n, 2) inclusive frame ids. A plain .npy has no
    checksum: what can be checked is that it is whole (no bytes past its
    array: a shape shrunk in the header), integral, and that its episodes
    neither run backwards nor overlap."""
    name = os.path.basename(path)
    with reading(where, name), open(path, "rb") as f:
        ids = np.load(f, allow_pickle=False)
        extra = os.fstat(f.fileno()).st_size - f.tell()
    if extra:
        raise LoaderError(f"{where}: {name} holds {extra} bytes past its {ids.shape} array")
    if ids.ndim != 2 or ids.shape[1] != 2 or ids.dtype.kind not in "iu":
        raise LoaderError(f"{where}: {name} must be (n, 2) integers; got {ids.dtype} {ids.shape}")
    order = np.argsort(ids[:, 0], kind="stable")
    for e in range(len(ids)):
        if ids[e, 1] < ids[e, 0]:
            raise LoaderError(
                f"{where}, episode {e}: ends ({ids[e, 1]}) before it starts ({ids[e, 0]})"
            )
    for a, b in zip(order[:-1], order[1:]):
        if ids[b, 0] <= ids[a, 1]:
            raise LoaderError(
                f"{where}: {name}: episodes {a} ({ids[a, 0]}-{ids[a, 1]}) and {b} "
                f"({ids[b, 0]}-{ids[b, 1]}) overlap"
            )
    return [(int(a), int(b), "") for a, b in ids]


def _read_npz(path, keys, where):
    """The arrays ``keys`` of an npz, each member read whole, so zipfile
    checks its CRC-32 (numpy's npz reader stops at the array's last byte,
    before the check, so a header whose shape shrank went unnoticed); each
    array views its member's bytes. Returns (arrays, every name)."""
    name = os.path.basename(path)
    with reading(where, name), zipfile.ZipFile(path) as npz:
        members = {m[:-4] if m.endswith(".npy") else m: m for m in npz.namelist()}
        missing = [k for k in keys if k not in members] if keys is not None else []
        if missing:
            raise LoaderError(f"{where}, {name}: no key {missing[0]!r}")
        out = {}
        for key in keys if keys is not None else sorted(members):
            data = npz.read(members[key])  # BadZipFile on a CRC-32 mismatch
            out[key] = _npy(data, f"{where}, {name}, key {key!r}")
        return out, sorted(members)


def _npy(data, where):
    """The array of a .npy file's bytes, a view of them; its header must
    account for every byte."""
    fmt = np.lib.format
    header = io.BytesIO(data)
    version = fmt.read_magic(header)
    if version not in ((1, 0), (2, 0)):  # 3.0: utf-8 field names, which numpy's reader parses
        header.seek(0)
        values = fmt.read_array(header, allow_pickle=False)
        if header.tell() != len(data):
            raise LoaderError(f"{where}: {len(data) - header.tell()} bytes past its array")
        return values
    read_header = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
    shape, fortran_order, dtype = read_header(header)
    if dtype.hasobject:
        raise LoaderError(f"{where}: holds Python objects (a pickle), not an array")
    count = math.prod(shape)
    extra = len(data) - header.tell() - count * dtype.itemsize
    if extra:
        raise LoaderError(
            f"{where}: its header says {dtype} {shape}, but {abs(extra)} bytes are "
            f"{'left over' if extra > 0 else 'missing'}"
        )
    values = np.frombuffer(data, dtype=dtype, count=count, offset=header.tell())
    return values.reshape(shape[::-1]).T if fortran_order else values.reshape(shape)


def load_calvin(
    directory,
    split=None,
    *,
    keys=None,
    episodes="ranges",
    fps=CALVIN_FPS,
    frames="raw",
    jpeg_quality=90,
    resize=None,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of a CALVIN split.

    Args:
        directory: the dataset root, or the split's folder itself.
        split: ``"training"`` or ``"validation"`` under ``directory`` (None:
            ``directory`` is the split).
        keys: arrays of each frame's npz to load (default: all of those in
            the first frame read; every frame must hold them).
        episodes: ``"ranges"``: the play episodes of ``ep_start_end_ids.npy``;
            ``"language"``: the annotated windows, each an episode whose task
            is its instruction.
        fps: CALVIN records at 30 Hz; frame k of an episode is at k / fps.
        frames, jpeg_quality, resize: image streams kept raw, as JPEG or as
            PNG, and resized once, as ``EpisodeStore.from_episodes`` takes them.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Each episode's frames are read and stacked one episode at a time.

    Checked, each failure a LoaderError naming the file (and the episode and
    key): every array read from a frame's npz is read whole, so zipfile verifies
    its CRC-32 (a changed or missing byte anywhere in an array, its header
    included), and its header must account for every byte; every frame holds
    the keys; ``ep_start_end_ids.npy`` is whole, integral, and its episodes
    neither run backwards nor overlap. Not checkable: that file and the
    language annotations (a pickle) carry no checksum, so a changed value
    there that still passes those checks moves an episode's bounds (into a
    gap between episodes) or changes an instruction. The checks cost nothing
    measurable (the CRC was computed before too; the arrays now view the
    members' bytes instead of copying them).
    """
    root = os.path.join(directory, split) if split else directory
    where = f"load_calvin({root})"
    if not os.path.isdir(root):
        raise LoaderError(f"{where}: no such directory")
    if episodes == "ranges":
        path = os.path.join(root, "ep_start_end_ids.npy")
        if not os.path.isfile(path):
            raise LoaderError(f"{where}: no ep_start_end_ids.npy")
        ranges = _ranges(path, where)
    elif episodes == "language":
        language = _language(root, where)
        if language is None:
            raise LoaderError(
                f"{where}: episodes='language' needs lang_annotations/auto_lang_ann.npy"
            )
        ranges = [(a, b, text) for (a, b), text in language]
    else:
        raise ValueError(f"{where}: episodes must be 'ranges' or 'language'; got {episodes!r}")
    # Without keys, the first frame read names them; every frame must hold them all.
    names = list(keys) if keys is not None else None

    def frame(i, e):
        nonlocal names
        path = os.path.join(root, f"episode_{i:07d}.npz")
        arrays, held = _read_npz(path, names, f"{where}, episode {e}")
        if names is None:
            names = held
        return arrays

    def episode(e, start, end, task):
        if end < start:
            raise LoaderError(f"{where}, episode {e}: ends ({end}) before it starts ({start})")
        frames = [frame(i, e) for i in range(start, end + 1)]
        out = {"episode_index": e, "length": len(frames), "task": task}
        for key in frames[0]:
            shapes = {f[key].shape for f in frames}
            if len(shapes) > 1:
                raise LoaderError(
                    f"{where}, episode {e}, key {key!r}: the shape changes within the episode: {sorted(shapes)}"
                )
            out[key] = (np.stack([f[key] for f in frames]), frame_times(len(frames), fps, where))
        return out

    items = ((f"episode {e}", lambda e=e, r=r: episode(e, *r)) for e, r in enumerate(ranges))
    return packed_store(
        where,
        skipping(items, skip_bad, where),
        fps=fps,
        progress=progress,
        total=len(ranges),
        device=device,
        frames=frames,
        jpeg_quality=jpeg_quality,
        resize=resize,
    )
