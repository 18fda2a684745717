"""The checks of mapped encoded keys that the GPU decoder's queue reads.

The queue reads each batch's encoded bytes from the store's file on native
threads of its own, which check nothing. Every frame of a window lies in its
anchor's episode, so a batch reads the episodes of its anchors alone: those
not checked yet against their CRC-32s (store/checks.py) are checked ahead,
``depth`` batches at a time on a native row reader beside the queue, and a
batch is handed out only once its episodes have passed.
"""

from functools import partial

import torch

from ..store.checks import CHECK_THREADS, new_token
from ..store.rows import row_reader
from .handed import HandedAhead, wait_all


def checked_frames(frames):
    """The FrameKeys of ``frames`` whose store file's episodes are not all
    checked yet."""
    return [
        f for f in frames if f.mapped is not None and f.mapped.checks is not None
        and not f.mapped.checks.done
    ]  # fmt: skip


class FrameChecks(HandedAhead):
    """The episodes that batches of ``parts`` (an EpochParts, anchors on the
    host) read through ``frames`` (FrameKeys of mapped keys with checks),
    checked ``depth`` batches ahead. ``anchor_offsets``: the anchor key's
    episode offsets (host). ``wait(i)`` returns once batch i's episodes have
    passed (a LoaderError naming the file, key and episode where one has
    not); ``close()`` ends the checking threads."""

    def __init__(self, frames, anchor_offsets, parts, depth):
        self.frames, self.parts = frames, parts
        self.ends = anchor_offsets[1:].cpu()
        self.reader = row_reader(CHECK_THREADS)
        self.token = new_token()
        self.pending = {}
        self._start(depth, len(parts))

    def _episodes(self, frame, episodes):
        """The episodes of the store's file holding ``frame``'s bytes of the
        store's ``episodes`` (sorted, each once) that have frames."""
        first, end = frame.offsets[episodes], frame.offsets[episodes + 1]
        begins = frame.bounds[first[end > first]]
        return frame.mapped.checks.episodes_of(begins.numpy() + frame.mapped.first_row)

    def _submit(self, b):
        left = [f for f in self.frames if not f.mapped.checks.done]
        self.pending[b] = pending = []
        if not left:
            return
        anchors = self.parts[b].cpu()
        episodes = torch.unique(torch.searchsorted(self.ends, anchors, right=True))
        for frame in left:
            checks = frame.mapped.checks
            pending.append((checks, checks.submit(self.reader, self._episodes(frame, episodes),
                                                  self.token)))  # fmt: skip

    def wait(self, i):
        self._hand(i)
        wait_all([partial(c.wait, self.reader, handed) for c, handed in self.pending.pop(i)])

    def close(self):
        try:
            self.reader.close()
        finally:
            for frame in self.frames:
                frame.mapped.checks.release(self.token)
