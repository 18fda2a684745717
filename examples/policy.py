"""A small multi-rate policy that preprocesses its raw observations in forward.

    camera features (~30 Hz) ┐
    joint states   (~100 Hz) ├─ robocache.fuse ──> (B, T, 84) on the control timeline ─┐
    force/torque   (~1 kHz)  ┘                                                          ├─ MLP ─> actions (B, T, 7)
    point cloud (B, N, 3) ──── robocache.voxelize ─> (B, 16, 16, 16) ─ Conv3d ─ pool ──┘

Everything runs inside the module, so ``torch.compile(policy, fullgraph=True)``
and ``torch.export`` see the robocache operators as single graph nodes.
"""

import torch
from torch import nn

import robocache

GRID = (16, 16, 16)
VOXEL = 1.0 / 16
ORIGIN = (0.0, 0.0, 0.0)


class MultiRatePolicy(nn.Module):
    def __init__(self, vision_dim=64, proprio_dim=14, force_dim=6, action_dim=7, hidden=128):
        super().__init__()
        fused_dim = vision_dim + proprio_dim + force_dim
        self.cloud_encoder = nn.Sequential(
            nn.Conv3d(1, 8, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv3d(8, 16, 3, stride=2, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool3d(1),
            nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(fused_dim + 16, hidden), nn.ReLU(), nn.Linear(hidden, action_dim)
        )

    def forward(
        self,
        vision,
        vision_t,
        vision_len,
        proprio,
        proprio_t,
        proprio_len,
        force,
        force_t,
        force_len,
        control_t,
        points,
    ):
        # Camera features are held (zero-order hold: the latest frame), the
        # proprioceptive and force streams are interpolated.
        fused = robocache.fuse(
            [
                (vision, vision_t, vision_len),
                (proprio, proprio_t, proprio_len),
                (force, force_t, force_len),
            ],
            control_t,
            modes=["previous", "linear", "linear"],
        )
        occupancy = robocache.voxelize(points, GRID, VOXEL, ORIGIN)  # (B, X, Y, Z)
        cloud = self.cloud_encoder(occupancy.unsqueeze(1))  # (B, 16)
        cloud = cloud.unsqueeze(1).expand(-1, fused.shape[1], -1)
        return self.head(torch.cat([fused, cloud], dim=-1))  # (B, T, actions)


def example_inputs(B=4, seconds=1.0, device="cpu", seed=0, points=2048):
    """Inputs for MultiRatePolicy from synthetic multi-rate episodes (float seconds)."""
    from robocache.data.synthetic import multi_rate_episodes

    streams, control_t = multi_rate_episodes(B, seconds, device=device, seed=seed, float_times=True)
    g = torch.Generator().manual_seed(seed)
    cloud = torch.rand(B, points, 3, generator=g).to(device) * 1.2 - 0.1
    return (
        *streams["vision"].as_tuple(),
        *streams["proprio"].as_tuple(),
        *streams["force"].as_tuple(),
        control_t,
        cloud,
    )
