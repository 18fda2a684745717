"""The read of keys whose frames are stored encoded (JPEG or PNG): the cut
runs on the host over row numbers (``row + 1``; 0 where a window has no
sample), which picks the same rows as it would from the frames, with the
same padding. Each distinct row of a batch is then decoded once, in one
batched call, and scattered into (B, W, H, W', C)."""

import torch

from ..frames import codec as host_codec
from .cut import rows_around

_WHERE = "WindowSampler"


class FrameKey:
    """One encoded key of a sampler: its plan, its stream's bytes and byte
    offsets, and where each row lies (episode, frame) for errors."""

    def __init__(self, position, plan, stream, episode_index, decoding):
        self.position, self.plan, self.encoding = position, plan, stream.encoding
        self.decoding = decoding
        self.values = stream.values  # the frames' bytes, wherever they live
        self.bounds = stream.byte_offsets.cpu()
        self.times, self.offsets = stream.times.cpu(), stream.offsets.cpu()
        self.episode_index = episode_index.cpu()
        self.row_numbers = torch.arange(1, self.times.numel() + 1).view(-1, 1)

    def rows_of(self, index, anchor, edge_tolerance):
        """(B, W, 1) int64 row + 1 of each window position of the batch
        anchored at ``index`` (the sampler's own call, for this key alone)."""
        rows, _ = rows_around(
            self.plan, self.row_numbers, self.times, self.offsets, anchor, index, edge_tolerance
        )
        return rows

    def decode(self, rows):
        """(keys, frames): the distinct rows + 1 of ``rows``, sorted, with 0
        first, and their frames decoded (frames[0] is a frame of zeros)."""
        keys = torch.unique(rows.reshape(-1))
        if keys.numel() == 0 or int(keys[0]) != 0:  # 0 (no sample) leads, always
            keys = torch.cat([keys.new_zeros(1), keys])
        wanted = keys[1:] - 1
        table = torch.empty((keys.numel(), *self.encoding.shape), dtype=self.encoding.dtype)
        table[0].view(torch.uint8).zero_()  # bytes: any dtype, uint16 included
        host_codec.decode(
            self._images(wanted),
            self.encoding,
            self.decoding.threads,
            self._namer(wanted),
            self.decoding.idct,
            out=table[1:],
        )
        return keys, table

    def frames(self, rows, decoded=None):
        """(B, W, *shape) frames of ``rows`` (the operator's output for this
        key), from ``decoded`` (``decode``'s, made ahead) or decoded now."""
        rows = rows.cpu()
        keys, table = decoded if decoded is not None else self.decode(rows)
        position = torch.searchsorted(keys, rows.reshape(-1))
        if table.dtype == torch.uint16:  # indexed as int16, which older torch can
            return (
                table.view(torch.int16)[position]
                .view(torch.uint16)
                .view(*rows.shape[:2], *self.encoding.shape)
            )
        return table[position].view(*rows.shape[:2], *self.encoding.shape)

    def _images(self, rows):
        """The encoded bytes of each row, as buffers (host values are not copied)."""
        begin, end = self.bounds[rows], self.bounds[rows + 1]
        values = self.values
        if values.is_cuda:  # one gather on the GPU, then one copy
            spans = end - begin
            starts = torch.cumsum(spans, 0) - spans
            where = torch.arange(int(spans.sum())) - starts.repeat_interleave(spans)
            where = where + begin.repeat_interleave(spans)
            values = values[where.to(values.device)].cpu()
            begin, end = starts, starts + spans
        data = values.numpy()
        return [data[b:e] for b, e in zip(begin.tolist(), end.tolist())]

    def _namer(self, rows):
        def name(i):
            row = int(rows[i])
            e = int(torch.searchsorted(self.offsets[1:], row, right=True))
            return (
                f"{_WHERE}: key {self.plan.key!r}, episode {int(self.episode_index[e])}, frame "
                f"{row - int(self.offsets[e])} (row {row})"
            )

        return name
