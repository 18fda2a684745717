"""What the loaders share: frame clocks, errors that name the place, and
skip_bad's report."""

import warnings

import torch


class LoaderError(ValueError):
    """A bad file, episode or key; the message names them."""


def frame_times(n, fps, where):
    """int64 ns times of n frames at fps (frame k at round(k * 1e9 / fps))."""
    if not isinstance(fps, (int, float)) or isinstance(fps, bool) or not fps > 0:
        raise ValueError(f"{where}: fps must be a positive number; got {fps!r}")
    return (torch.arange(n, dtype=torch.float64) * (1e9 / fps)).round().to(torch.int64)


def skipping(episodes, skip_bad, what):
    """Yields the episodes of an iterator of (name, thunk) pairs; a thunk that
    raises LoaderError stops the load, or, with skip_bad, is skipped and
    reported in one warning at the end."""
    skipped = []
    for name, make in episodes:
        try:
            episode = make()
        except LoaderError as e:
            if not skip_bad:
                raise
            skipped.append(f"{name}: {e}")
            continue
        yield episode
    if skipped:
        warnings.warn(
            f"{what}: skipped {len(skipped)} bad episode(s):\n  " + "\n  ".join(skipped),
            stacklevel=3,
        )
