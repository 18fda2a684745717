"""What the loaders share: skip_bad's report, and the timelines of logs (bags, MCAP): per-stream
arrays, and episodes split at pauses."""

import contextlib
import re
import warnings

import numpy as np

from ..errors import LoaderError
from ..frames import EncodedFrames
from ..time import frame_times, seconds_to_ns

__all__ = ["LoaderError", "frame_times", "reading", "split_gap_ns"]


@contextlib.contextmanager
def reading(where, what):
    """Any error of a format's library while reading ``what`` becomes a
    LoaderError that names the place (``where``: the loader and its file)
    and what was being read, so ``skip_bad`` can catch it and the user can
    find it."""
    try:
        yield
    except LoaderError:
        raise
    except (KeyboardInterrupt, SystemExit, MemoryError):
        raise
    except Exception as e:  # each library raises its own types for a bad file
        raise LoaderError(f"{where}: cannot read {what}: {type(e).__name__}: {e}") from e


def split_gap_ns(split_gap_s, where):
    """A log's split_gap_s in ns (None stays None)."""
    if split_gap_s is None:
        return None
    gap = seconds_to_ns(split_gap_s, f"{where}: split_gap_s")
    if gap <= 0:
        raise ValueError(f"{where}: split_gap_s must be > 0; got {split_gap_s!r}")
    return gap


def skipping(items, skip_bad, what, unit="episode", lost=()):
    """Yields the episodes of an iterator of (name, thunk) pairs; a thunk that
    raises LoaderError stops the load, or, with skip_bad, is skipped and
    reported in one warning at the end. Where skip_bad leaves nothing to load
    (every ``unit``, an episode or a file, skipped; ``lost``: the loader's
    reports of what else it skipped, read once the items are), that is a
    LoaderError listing each one skipped and why, not an empty store."""
    skipped, kept = [], 0
    for name, make in items:
        try:
            episode = make()
        except LoaderError as e:
            if not skip_bad:
                raise
            skipped.append(f"{name}: {e}")
            continue
        kept += 1
        yield episode
    if not kept and (skipped or lost):
        raise LoaderError(
            f"{what}: skip_bad skipped every {unit}; nothing is left to load:\n  "
            + "\n  ".join([*skipped, *lost])
        )
    if skipped:
        warnings.warn(
            f"{what}: skipped {len(skipped)} bad {unit}(s):\n  " + "\n  ".join(skipped),
            stacklevel=3,
        )


def stack_streams(where, values, times):
    """name -> (values (n, *shape), int64 ns times (n,)) from per-message
    lists (or ``EncodedFrames``, kept as they are); a shape that changes
    within a stream, or times that go backwards, are errors."""
    out = {}
    for name in values:
        t = np.asarray(times[name], dtype=np.int64)
        if isinstance(values[name], EncodedFrames):
            stacked = values[name]
        else:
            shapes = {v.shape for v in values[name]}
            if len(shapes) > 1:
                raise LoaderError(
                    f"{where}, stream {name!r}: the shape changes within the file: {sorted(shapes)}"
                )
            stacked = np.stack(values[name]) if values[name] else np.zeros((0,))
        if np.any(np.diff(t) < 0):
            i = int(np.nonzero(np.diff(t) < 0)[0][0])
            raise LoaderError(f"{where}, stream {name!r}: times go backwards at message {i + 1}")
        out[name] = (stacked, t)
    return out


def split_log(streams, marks=(), gap=None):
    """The episodes of one log: all of it, cut where the merged timeline
    pauses longer than gap ns (None: never) and at each mark (a time that
    starts a new episode). Pieces without samples are dropped; an episode
    without frames of an encoded stream leaves that stream out (it then has
    no samples there)."""
    times = [t for _, t in streams.values() if len(t)]
    bounds = {int(m) for m in marks}
    if gap is not None and times:
        merged = np.sort(np.concatenate(times))
        bounds.update(int(merged[i + 1]) for i in np.nonzero(np.diff(merged) > gap)[0])
    edges = [-(2**63)] + sorted(bounds) + [2**63 - 1]
    for k in range(len(edges) - 1):
        episode = {}
        for name, (v, t) in streams.items():
            if len(t):  # t is sorted (stack_streams): a piece is a slice, not a copy
                lo, hi = np.searchsorted(t, np.array(edges[k : k + 2], dtype=np.int64))
                if isinstance(v, EncodedFrames):
                    if hi > lo:
                        episode[name] = (EncodedFrames(v.images[lo:hi], v.codec, v.shape), t[lo:hi])
                else:
                    episode[name] = (v[lo:hi], t[lo:hi])
        if any(len(t) for _, t in episode.values()):
            yield episode


def log_episodes(paths, read, gap, skip_bad, what):
    """(path, episode) of log files, the episodes numbered across files:
    read(path) gives a file's streams (stack_streams) and its marks; each
    file is split. With skip_bad, a file that fails a check is skipped whole."""
    files = ((str(path), lambda p=path: (p, list(split_log(*read(p), gap=gap)))) for path in paths)
    index = 0
    for path, episodes in skipping(files, skip_bad, what, unit="file"):
        for episode in episodes:
            episode["episode_index"] = index
            index += 1
            yield path, episode


_STORE_EPISODE = re.compile(r"(?:EpisodeStore(?:\.from_episodes)?: )?episode (\d+)(?:, |: )")


def _about_the_episode(message, position):
    """A store's message about the episode at ``position`` (its place among
    those it was given) without the store's own name and number for it: the
    loader names that episode in its own terms (its file, its place there)."""
    match = _STORE_EPISODE.match(message)
    if match is None or int(match.group(1)) != position:
        return message
    return message[match.end() :]


def packed_store(where, episodes, place=None, **options):
    """``EpisodeStore.from_episodes(episodes, **options)``, with a ValueError
    of the store's raised as a LoaderError: about the episode being packed (a
    dtype or shape that differs from earlier episodes', a frame kept encoded
    that does not decode), naming it as ``place(episode)`` does (``where``
    with its file and its place there; default: ``where``); about all of them
    once they are packed (none was given), naming ``where``. An option the
    store refuses, before it asks for an episode, is the caller's ValueError."""
    from ..store import EpisodeStore

    state = {"ended": False, "in_hand": None}

    def packing():
        for position, episode in enumerate(episodes):
            state["in_hand"] = (position, episode)
            yield episode  # from_episodes packs it before it asks for the next
            state["in_hand"] = None
        state["ended"] = True

    try:
        return EpisodeStore.from_episodes(packing(), **options)
    except LoaderError:
        raise
    except ValueError as e:
        if state["in_hand"] is not None:
            position, episode = state["in_hand"]
            here = where if place is None else place(episode)
            raise LoaderError(f"{here}: {_about_the_episode(str(e), position)}") from e
        if state["ended"]:
            raise LoaderError(f"{where}: {e}") from e
        raise


def log_store(paths, read, gap, skip_bad, what, **options):
    """``EpisodeStore.from_episodes(..., **options)`` of the episodes of log
    files (log_episodes), through packed_store: a ValueError while one of a
    file's episodes is packed (a frame kept encoded that does not decode, a
    stream whose shape differs from an earlier file's) is a LoaderError
    naming the file."""
    files = {}  # episode_index -> its file, while the episode is in flight

    def episodes():
        for path, episode in log_episodes(paths, read, gap, skip_bad, what):
            files[episode["episode_index"]] = path
            yield episode
            files.pop(episode["episode_index"])

    def place(episode):
        return f"{what}({files[episode['episode_index']]})"

    return packed_store(what, episodes(), place=place, **options)


def as_paths(paths):
    """A path or a list of them, as a list."""
    single = isinstance(paths, (str, bytes)) or hasattr(paths, "__fspath__")
    return [paths] if single else list(paths)


def field_names(topics):
    """(topic, field path) -> stream name, for topic -> field path(s)."""
    fields = {}
    for topic, picks in topics.items():
        picks = [picks] if picks is None or isinstance(picks, str) else list(picks)
        for pick in picks:
            fields[(topic, pick or "")] = f"{topic}.{pick}" if pick else topic
    return fields


def keeps_encoded(frames, resize, key, codec):
    """Whether a loader hands frames of ``key`` that arrive encoded as
    ``codec`` to ``from_episodes`` still encoded (``EncodedFrames``), to be
    kept byte for byte: the codec ``frames`` asks for, and no resize."""
    form = frames.get(key, "raw") if isinstance(frames, dict) else frames
    return resize is None and form == codec
