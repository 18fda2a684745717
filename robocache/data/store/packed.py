"""PackedStream: one sensor stream of every episode, back to back."""

from dataclasses import dataclass, field

import torch


@dataclass
class PackedStream:
    """One stream of every episode, back to back: episode ``e`` owns rows
    ``offsets[e]:offsets[e + 1]`` of ``values`` and ``times``.

    Attributes:
        values: (N, *shape), any dtype.
        times: (N,) int64 nanoseconds, non-decreasing within each episode.
        offsets: (E + 1,) int64, non-decreasing, from 0 to N.
        stats: statistic name (``mean``, ``std``, ``min``, ``max``, ``q01``,
            ...) -> a float64 tensor of the sample shape.
    """

    values: torch.Tensor
    times: torch.Tensor
    offsets: torch.Tensor
    stats: dict = field(default_factory=dict)

    @property
    def nbytes(self):
        tensors = (self.values, self.times, self.offsets, *self.stats.values())
        return sum(t.numel() * t.element_size() for t in tensors)

    def map(self, fn):
        """A new PackedStream of ``fn`` applied to every tensor."""
        return PackedStream(
            fn(self.values),
            fn(self.times),
            fn(self.offsets),
            {k: fn(v) for k, v in self.stats.items()},
        )
