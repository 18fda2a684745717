"""Work handed over ahead of the batches that wait for it (the mapped
rows' reads, the checks of the bytes the GPU decoder reads), and the one
wait for all of a batch's work."""


def wait_all(waits):
    """Calls each of ``waits``, then raises the first error one raised
    (every read or check handed over is waited for)."""
    error = None
    for wait in waits:
        try:
            wait()
        except Exception as e:
            error = error or e
    if error is not None:
        raise error


class HandedAhead:
    """Work for an epoch's batches handed over ``depth`` batches ahead of
    the one waited for. A subclass hands batch b over with ``_submit(b)``
    (then in ``pending``), stops its work with ``close()``, and calls
    ``_start`` once, then ``_hand(i)`` before it waits for batch i."""

    def _start(self, depth, count):
        self.depth, self.count = depth, count
        try:
            for b in range(min(depth, count)):
                self._submit(b)
        except BaseException:
            self.close()
            raise

    def _hand(self, i):
        """Batch i + depth handed over, and batch i where it was not."""
        ahead = i + self.depth
        if ahead < self.count and ahead not in self.pending:
            self._submit(ahead)
        if i not in self.pending:
            self._submit(i)
