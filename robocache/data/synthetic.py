"""Synthetic multi-rate robot episodes, generated in memory (no download).

Used by the demo, the examples and the benchmarks. Each stream runs on its
own clock, as on a real robot:

- a nominal rate per stream (camera features at ~30 Hz, joint states at
  ~100 Hz, force/torque at ~1 kHz),
- per-sample clock jitter,
- samples dropped here and there (the survivors are packed to the front of
  each row and counted by ``lengths``; rows are padded past it),
- streams that start at different times (a sensor that comes up late),
- int64 nanosecond timestamps on a shared epoch, or float seconds.
"""

from dataclasses import dataclass

import torch

__all__ = ["Stream", "multi_rate_episodes", "depth_camera_cloud"]


@dataclass
class Stream:
    """One sensor stream of a batch of episodes."""

    values: torch.Tensor  # (B, S, D), padded past lengths
    times: torch.Tensor  # (B, S) int64 ns or float seconds, non-decreasing in the valid prefix
    lengths: torch.Tensor  # (B,) int64, valid samples per episode

    def as_tuple(self):
        return self.values, self.times, self.lengths


def _stream(B, seconds, rate_hz, D, *, jitter, drop, start_s, seed, device, float_times):
    g = torch.Generator().manual_seed(seed)
    S = int(seconds * rate_hz) + 1
    period = 1.0 / rate_hz
    # Clocks: a late start per episode, then jittered periods.
    start = torch.rand(B, 1, generator=g) * start_s
    gaps = period * (1 + jitter * (2 * torch.rand(B, S, generator=g) - 1))
    t = start + torch.cumsum(gaps, dim=1) - gaps[:, :1]
    # Smooth signals with a little noise: sums of slow sinusoids per channel.
    freq = 0.2 + 2 * torch.rand(1, 1, D, generator=g)
    phase = 6.283 * torch.rand(B, 1, D, generator=g)
    values = torch.sin(6.283 * freq * t.unsqueeze(-1) + phase) + 0.01 * torch.randn(
        B, S, D, generator=g
    )
    # Drop samples; pack the survivors to the front of each row.
    keep = torch.rand(B, S, generator=g) >= drop
    keep[:, 0] = True
    order = torch.argsort((~keep).to(torch.int8), dim=1, stable=True)
    t = torch.gather(t, 1, order)
    values = torch.gather(values, 1, order.unsqueeze(-1).expand(B, S, D))
    lengths = keep.sum(dim=1)
    # Padding repeats the last valid sample (never read: lengths bounds it).
    idx = torch.minimum(torch.arange(S).expand(B, S), (lengths - 1).unsqueeze(1))
    t = torch.gather(t, 1, idx)
    values = torch.gather(values, 1, idx.unsqueeze(-1).expand(B, S, D))
    times = t.double() if float_times else (t.double() * 1e9).round().long()
    return Stream(values.float().to(device), times.to(device), lengths.to(device))


def multi_rate_episodes(
    B=8,
    seconds=2.0,
    *,
    device="cpu",
    seed=0,
    float_times=False,
    vision_dim=64,
    proprio_dim=14,
    force_dim=6,
    control_hz=50.0,
):
    """A batch of episodes with three streams and a control timeline.

    Returns ``(streams, control_times)``: ``streams`` maps "vision" (~30 Hz),
    "proprio" (~100 Hz) and "force" (~1 kHz) to :class:`Stream`;
    ``control_times`` is (B, T) at ``control_hz`` from a common start, in the
    same units as the streams' times (int64 ns by default, float64 seconds
    with ``float_times=True``).
    """
    common = dict(device=device, float_times=float_times)
    streams = {
        "vision": _stream(
            B,
            seconds,
            30.0,
            vision_dim,
            jitter=0.15,
            drop=0.05,
            start_s=0.10,
            seed=seed + 1,
            **common,
        ),
        "proprio": _stream(
            B,
            seconds,
            100.0,
            proprio_dim,
            jitter=0.05,
            drop=0.01,
            start_s=0.02,
            seed=seed + 2,
            **common,
        ),
        "force": _stream(
            B,
            seconds,
            1000.0,
            force_dim,
            jitter=0.02,
            drop=0.02,
            start_s=0.05,
            seed=seed + 3,
            **common,
        ),
    }
    T = int(seconds * control_hz)
    control = (0.1 + torch.arange(T, dtype=torch.float64) / control_hz).expand(B, T)
    control = control.to(device) if float_times else (control * 1e9).round().long().to(device)
    return streams, control


def depth_camera_cloud(B, H=480, W=640, device="cpu", seed=1000):
    """A synthesized tabletop depth image, back-projected in pixel order.

    A table plane seen from above and in front, with boxes and a dome on it,
    plus a far background wall: spatially coherent, many points per voxel on
    the surfaces, and a large share (about 40% for a 1 m cube at the origin)
    outside the workspace. Returns (B, H*W, 3) float32 points.
    """
    fx = fy = 525.0 * W / 640
    cx, cy = W / 2, H / 2
    v, u = torch.meshgrid(
        torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32), indexing="ij"
    )
    clouds = []
    for b in range(B):
        g = torch.Generator().manual_seed(seed + b)
        tilt = 0.9 + 0.1 * torch.rand(1, generator=g).item()
        depth = 0.7 + 0.9 * (1 - v / H) * tilt
        for _ in range(4):  # boxes on the table
            u0 = torch.randint(W // 10, W - W // 4, (1,), generator=g).item()
            v0 = torch.randint(H // 3, H - H // 4, (1,), generator=g).item()
            w, h = (
                (torch.randint(W // 16, W // 4, (2,), generator=g) * torch.tensor([1, H / W]))
                .long()
                .tolist()
            )
            box = (u >= u0) & (u < u0 + w) & (v >= v0) & (v < v0 + h)
            depth = torch.where(box, depth - 0.1 - 0.1 * torch.rand(1, generator=g).item(), depth)
        cu, cv, r = W * 0.6, H * 0.6, 70.0 * W / 640
        d2 = (u - cu) ** 2 + (v - cv) ** 2
        depth = torch.where(
            d2 < r * r, depth - 0.15 * torch.sqrt((1 - d2 / (r * r)).clamp(min=0)), depth
        )
        depth = torch.where(v < H * 0.2, torch.full_like(depth, 3.5), depth)  # background wall
        depth = depth + 0.002 * torch.randn(depth.shape, generator=g)
        x = (u - cx) / fx * depth
        y = (v - cy) / fy * depth
        clouds.append(torch.stack([x + 0.5, y + 0.5, depth - 0.6], dim=-1).reshape(-1, 3))
    return torch.stack(clouds).to(device)
