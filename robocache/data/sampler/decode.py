"""The decode of keys whose frames are stored encoded (JPEG or PNG): the cut
runs on the host over row numbers (``row + 1``; 0 where a window has no
sample), which picks the same rows as it would from the frames, with the
same padding. Each distinct row of a batch is then decoded once, in one
batched call (the decoder's: robocache.data.frames.decoders), and gathered
into (B, W, H, W', C).

On the GPU (the nvimgcodec decoder) an iteration decodes ahead: its order
gives every batch's rows when it starts, and a native queue decodes each
batch's distinct frames on a thread of its own, without the GIL, into a
ring of device tables (``DecodeAhead``)."""

import torch

from ..frames.decoders import decoder_for, nvimgcodec
from .cut import rows_around

_WHERE = "WindowSampler"


class FrameKey:
    """One encoded key of a sampler: its plan, its stream's bytes and byte
    offsets, its decoder, and where each row lies (episode, frame) for
    errors. Bytes held on a GPU are decoded from a pinned copy, made once."""

    def __init__(self, position, plan, stream, episode_index, decoding, device):
        self.position, self.plan, self.encoding = position, plan, stream.encoding
        self.decoder = decoder_for(decoding, stream.encoding.codec, device)
        self.on_gpu = self.decoder.backend == "nvimgcodec"
        self.values = stream.values  # the frames' bytes, wherever they live
        if self.on_gpu and self.values.is_cuda:
            self.values = self.values.cpu().pin_memory()
        self.bounds = stream.byte_offsets.cpu()
        self.times, self.offsets = stream.times.cpu(), stream.offsets.cpu()
        self.deltas = plan.deltas.cpu()  # read on the host each batch: copied once
        self.episode_index = episode_index.cpu()
        self.row_numbers = torch.arange(1, self.times.numel() + 1).view(-1, 1)

    def rows_of(self, index, anchor, edge_tolerance):
        """(B, W, 1) int64 row + 1 of each window position of the batch
        anchored at ``index`` (the sampler's own call, for this key alone)."""
        rows, _ = rows_around(
            self.plan, self.row_numbers, self.times, self.offsets, anchor, index, edge_tolerance,
            deltas=self.deltas,
        )  # fmt: skip
        return rows

    def decode(self, rows):
        """(keys, frames): the distinct rows + 1 of ``rows``, sorted, with 0
        first, and their frames decoded (frames[0] is a frame of zeros), on
        the host or, with the GPU decoder, on the device."""
        keys = torch.unique(rows.reshape(-1))
        if keys.numel() == 0 or int(keys[0]) != 0:  # 0 (no sample) leads, always
            keys = torch.cat([keys.new_zeros(1), keys])
        wanted = keys[1:] - 1
        device = self.decoder.device if self.on_gpu else "cpu"
        table = torch.empty((keys.numel(), *self.encoding.shape), dtype=self.encoding.dtype,
                            device=device)  # fmt: skip
        table[0].view(torch.uint8).zero_()  # bytes: any dtype, uint16 included
        if self.on_gpu:
            self.decoder.decode_rows(
                self.values, self.bounds, wanted, table[1:], self._namer(wanted)
            )
        else:
            self.decoder.decode(
                self._images(wanted), self.encoding, out=table[1:], name=self._namer(wanted)
            )
        return keys, table

    def frames(self, rows, decoded=None):
        """(B, W, *shape) frames of ``rows`` (the operator's output for this
        key), from ``decoded`` (``decode``'s, made ahead) or decoded now."""
        rows = rows.cpu()
        keys, table = decoded if decoded is not None else self.decode(rows)
        position = torch.searchsorted(keys, rows.reshape(-1)).to(table.device, non_blocking=True)
        if table.dtype == torch.uint16:  # indexed as int16, which older torch can
            return (
                table.view(torch.int16)[position]
                .view(torch.uint16)
                .view(*rows.shape[:2], *self.encoding.shape)
            )
        return table[position].view(*rows.shape[:2], *self.encoding.shape)

    def where(self, row):
        """Where row ``row`` of the stream is from, for an error."""
        e = int(torch.searchsorted(self.offsets[1:], row, right=True))
        return (
            f"{_WHERE}: key {self.plan.key!r}, episode {int(self.episode_index[e])}, frame "
            f"{row - int(self.offsets[e])} (row {row})"
        )

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
        return lambda i: self.where(int(rows[i]))


class DecodeAhead:
    """The GPU-decoded keys' frames of an iteration's batches (``parts``:
    each batch's anchor rows, on the host), decoded ``depth`` batches ahead
    by a native queue. ``get(i)``, on the stream that makes batch i: key
    position -> its (B, W, *shape) frames, ready on that stream; batch i's
    tables are then released for batch i + depth + 1. ``close()`` stops the
    queue's thread."""

    def __init__(self, keys, anchor, edge_tolerance, parts, depth):
        self.keys, self.sizes = keys, [p.numel() for p in parts]
        steps, batch = len(parts), max(self.sizes)
        ahead = depth + 1
        slots = ahead + nvimgcodec.SLOTS_BEHIND
        everything = torch.cat(parts).cpu()
        rows, tables, positions = [], [], []
        self.windows = []
        device = keys[0].decoder.device
        for key in keys:
            found = key.rows_of(everything, anchor, edge_tolerance).reshape(everything.numel(), -1)
            W = found.shape[1]
            per_step = torch.zeros((steps, batch * W), dtype=torch.int64)
            per_step.view(-1, W)[: found.shape[0]] = found  # the last batch padded with "none"
            table = torch.empty((slots, 1 + _most_distinct(per_step), *key.encoding.shape),
                                dtype=torch.uint8, device=device)  # fmt: skip
            table[:, 0].zero_()  # the frame of "no sample"
            rows.append(per_step)
            tables.append(table)
            positions.append(torch.empty((slots, batch * W), dtype=torch.int64, device=device))
            self.windows.append(W)
        self.tables, self.positions = tables, positions
        self.queue = keys[0].decoder.queue(
            [k.values for k in keys], [k.bounds for k in keys], rows, tables, positions, ahead
        )

    def get(self, i):
        slot = self.queue.take(i)
        if slot < 0:
            k, row, why = self.queue.failure()
            if k < 0:
                raise RuntimeError(f"{_WHERE}: the GPU frame decoder failed: {why}")
            key = self.keys[k]
            raise ValueError(f"{key.where(row)}: the jpeg frame does not decode: {why}")
        frames = {}
        for key, W, table, position in zip(self.keys, self.windows, self.tables, self.positions):
            n = self.sizes[i] * W
            taken = table[slot].index_select(0, position[slot, :n])
            frames[key.position] = taken.view(self.sizes[i], W, *key.encoding.shape)
        self.queue.release(i)
        return frames

    def close(self):
        self.queue.close()


def _most_distinct(per_step):
    """The most distinct rows + 1 other than 0 (no sample) in any row of ``per_step``."""
    ordered = per_step.sort(dim=1).values
    changes = (ordered[:, 1:] != ordered[:, :-1]).sum(1) + (ordered[:, 0] != 0)
    return max(1, int(changes.max())) if per_step.numel() else 1
