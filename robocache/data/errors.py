"""The data side's error for bad input files."""


class LoaderError(ValueError):
    """A file, episode or key that cannot be read as what it claims to be.

    Raised by every loader and by ``EpisodeStore.load``; the message names
    the file (and the episode, column or key) and what was wrong. Loaders
    with ``skip_bad=True`` skip the episodes that raise it, and say so.
    """
