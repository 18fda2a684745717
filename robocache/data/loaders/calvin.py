"""CALVIN splits (numpy): one ``episode_XXXXXXX.npz`` per frame (``rgb_static``,
``rgb_gripper``, ``depth_*``, ``actions``, ``rel_actions``, ``robot_obs``,
``scene_obs``), episodes cut by ``ep_start_end_ids.npy`` (inclusive frame
ids), language in ``lang_annotations/auto_lang_ann.npy``."""

import os
import zipfile
import zlib

import numpy as np

from ..store import EpisodeStore
from ._common import LoaderError, frame_times, skipping

__all__ = ["load_calvin"]

CALVIN_FPS = 30


def _language(directory, where):
    path = os.path.join(directory, "lang_annotations", "auto_lang_ann.npy")
    if not os.path.isfile(path):
        return None
    # The annotation file is a pickled dict, as CALVIN writes it.
    ann = np.load(path, allow_pickle=True).item()
    try:
        return list(zip(ann["info"]["indx"], ann["language"]["ann"]))
    except (KeyError, TypeError) as e:
        raise LoaderError(f"{where}: {path} lacks info/indx or language/ann: {e}") from e


def load_calvin(
    directory,
    split=None,
    *,
    keys=None,
    episodes="ranges",
    fps=CALVIN_FPS,
    progress=True,
    skip_bad=False,
    device=None,
):
    """An EpisodeStore of a CALVIN split.

    Args:
        directory: the dataset root, or the split's folder itself.
        split: ``"training"`` or ``"validation"`` under ``directory`` (None:
            ``directory`` is the split).
        keys: arrays of each frame's npz to load (default: all of them).
        episodes: ``"ranges"``: the play episodes of ``ep_start_end_ids.npy``;
            ``"language"``: the annotated windows, each an episode whose task
            is its instruction.
        fps: CALVIN records at 30 Hz; frame k of an episode is at k / fps.
        skip_bad: skip episodes that fail a check (reported) instead of raising.
        device: build the store there (default: the host); each episode moves
            there as it is read, so host memory holds only episodes in flight.

    Each episode's frames are read and stacked one episode at a time.
    """
    root = os.path.join(directory, split) if split else directory
    where = f"load_calvin({root})"
    if not os.path.isdir(root):
        raise LoaderError(f"{where}: no such directory")
    if episodes == "ranges":
        path = os.path.join(root, "ep_start_end_ids.npy")
        if not os.path.isfile(path):
            raise LoaderError(f"{where}: no ep_start_end_ids.npy")
        ranges = [(int(a), int(b), "") for a, b in np.load(path)]
    elif episodes == "language":
        language = _language(root, where)
        if language is None:
            raise LoaderError(
                f"{where}: episodes='language' needs lang_annotations/auto_lang_ann.npy"
            )
        ranges = [(int(a), int(b), str(text)) for (a, b), text in language]
    else:
        raise ValueError(f"{where}: episodes must be 'ranges' or 'language'; got {episodes!r}")

    def frame(i, e):
        path = os.path.join(root, f"episode_{i:07d}.npz")
        try:
            with np.load(path) as npz:
                names = keys if keys is not None else sorted(npz.files)
                missing = [k for k in names if k not in npz.files]
                if missing:
                    raise LoaderError(
                        f"{where}, episode {e}, {os.path.basename(path)}: no key {missing[0]!r}"
                    )
                return {k: npz[k] for k in names}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            if isinstance(err, LoaderError):
                raise
            raise LoaderError(
                f"{where}, episode {e}: cannot read {os.path.basename(path)}: {err}"
            ) from err

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
    return EpisodeStore.from_episodes(
        skipping(items, skip_bad, where),
        fps=fps,
        progress=progress,
        total=len(ranges),
        device=device,
    )
