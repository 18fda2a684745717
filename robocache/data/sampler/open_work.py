"""The read-aheads and decode queues of iterations still open, stopped when
the process exits: before the interpreter tears down what stopping them
needs, and before the store files they read are closed (``track``
registers the exit hook when first called, after the files' own)."""

import atexit
import weakref

_OPEN = weakref.WeakSet()
_hooked = False


def _close_open():
    errors = []
    for work in list(_OPEN):
        try:
            work.close()
        except Exception as e:  # every one is stopped; the first error is raised
            errors.append(e)
    if errors:
        raise errors[0]


def track(work):
    """Stops ``work`` (anything with ``close()``) at exit unless it is
    closed before (``untrack``)."""
    global _hooked
    if not _hooked:
        atexit.register(_close_open)
        _hooked = True
    _OPEN.add(work)


def untrack(work):
    _OPEN.discard(work)
