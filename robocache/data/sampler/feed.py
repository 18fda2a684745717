"""An iteration's mapped rows fed to the sampler's CUDA graphs by a native
thread (``torch.classes.robocache.MappedFeed``, csrc/io), which finds the
rows each batch reads itself (``EpochRows``, a chunk of batches at a
time). For each batch in turn, the feed's thread waits for its rows,
hands a later batch's read to the row reader, and copies the rows into
the graphs' buffers once the last batch's cut is queued. The graphs wait
for each copy and mark each cut on the GPU; the caller's thread makes no
CUDA call for them, and no native call where a batch's copy is queued in
time: it reads and writes two marks the feed shares with it. Only once
every episode of the keys' files has passed its checks: until then each
batch's reads and checks are handed over from Python (``MappedReads``)."""

import torch

from .marks import shared_marks

# ``MappedReads.pending``'s mark of a batch the feed handed over.
FED = object()


class MappedFeed:
    """The native feed of ``finders``' rows read by ``reader`` into ``ring``
    (a PinnedRing), each batch's rows found by ``epoch`` (an EpochRows)."""

    def __init__(self, finders, reader, ring, epoch):
        self.finders, self.ring = finders, ring
        reads = [f.buffer_reads(room) for f, room in zip(finders, ring.rooms)]
        self.native = torch.classes.robocache.MappedFeed(
            ring.native,
            reader,
            epoch,
            [f.file.fd for f in finders],
            [f.keys[0].rows.rows for f in finders],
            [r.begins for r in reads],
            [r.row_bytes for r in reads],
            [r.starts for r in reads],
            list(ring.rooms),
            [r.at[-1] for r in reads],
            [r.last_row_bytes for r in reads],
        )
        self.checked = False
        self.feeding = False  # the feed's thread runs
        # 1 + the last batch whose copy is queued, and 1 + the last batch
        # whose graph is launched (MappedFeed.marks), read and written here
        # without a call: the feed's thread sets the first and looks at the
        # second.
        self.staged_upto, self.cut_upto = shared_marks(self.native.marks())

    def ready(self):
        """Whether every episode of the finders' files has passed its
        checks (then it stays so)."""
        if not self.checked:
            self.checked = all(
                key.rows.checks is None or key.rows.checks.done
                for f in self.finders
                for key in f.keys
            )
        return self.checked

    def start(self, i, staging, depth):
        """The feed's thread started at batch i (see MappedFeed.start)."""
        self.native.start(i, staging, depth)
        self.feeding = True

    def stop(self):
        """The feed's thread stopped: the batches it holds (handed over, not
        yet waited for), which ``native.wait`` serves."""
        self.feeding = False
        return self.native.stop()

    def views(self, b, counts):
        """Batch b's streams (key position -> (values, times, offsets)) in
        its ring slot, ``counts`` rows a finder."""
        buffers, views = self.ring.buffers[b % self.ring.slots], {}
        for finder, buffer, room, count in zip(self.finders, buffers, self.ring.rooms, counts):
            views.update(finder.views(buffer, room, count))
        return views
