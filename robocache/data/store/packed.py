"""PackedStream: one sensor stream of every episode, back to back."""

from dataclasses import dataclass, field

import torch


@dataclass
class PackedStream:
    """One stream of every episode, back to back: episode ``e`` owns rows
    ``offsets[e]:offsets[e + 1]`` of ``values`` and ``times``.

    Attributes:
        values: (N, *shape), any dtype; for an encoded frame stream, every
            sample's encoded bytes back to back, (bytes,) uint8.
        times: (N,) int64 nanoseconds, non-decreasing within each episode.
        offsets: (E + 1,) int64, non-decreasing, from 0 to N.
        stats: statistic name (``mean``, ``std``, ``min``, ``max``, ``q01``,
            ...) -> a float64 tensor of the sample shape.
        byte_offsets: an encoded stream's (N + 1,) int64: sample i is
            ``values[byte_offsets[i]:byte_offsets[i + 1]]``; else None.
        encoding: an encoded stream's ``FrameEncoding`` (codec, decoded
            shape and dtype); else None.
    """

    values: torch.Tensor
    times: torch.Tensor
    offsets: torch.Tensor
    stats: dict = field(default_factory=dict)
    byte_offsets: torch.Tensor = None
    encoding: object = None

    @property
    def num_samples(self):
        return self.times.shape[0]

    @property
    def sample_shape(self):
        """A (decoded) sample's shape."""
        return tuple(self.encoding.shape if self.encoding else self.values.shape[1:])

    @property
    def sample_dtype(self):
        """A (decoded) sample's dtype."""
        return self.encoding.dtype if self.encoding else self.values.dtype

    @property
    def raw_nbytes(self):
        """The bytes of the values decoded."""
        if self.encoding is None:
            return self.values.numel() * self.values.element_size()
        return self.num_samples * self.encoding.sample_nbytes

    @property
    def nbytes(self):
        tensors = (self.values, self.times, self.offsets, *self.stats.values())
        if self.byte_offsets is not None:
            tensors += (self.byte_offsets,)
        return sum(t.numel() * t.element_size() for t in tensors)

    def map(self, fn):
        """A new PackedStream of ``fn`` applied to every tensor."""
        return PackedStream(
            fn(self.values),
            fn(self.times),
            fn(self.offsets),
            {k: fn(v) for k, v in self.stats.items()},
            None if self.byte_offsets is None else fn(self.byte_offsets),
            self.encoding,
        )

    def with_values(self, values, times, offsets, stats, byte_offsets=None):
        """A stream of the same encoding over other tensors."""
        return PackedStream(values, times, offsets, stats, byte_offsets, self.encoding)
