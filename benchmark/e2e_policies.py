"""The two policies of benchmark/e2e.py, each with a ``loss(batch)``.

- ``DiffusionLike``: a ResNet-18-style encoder per camera (GroupNorm) and a
  1-D temporal U-Net denoiser over the action chunk, conditioned (FiLM) on
  the image features, the state and the diffusion step; the loss is the
  noise-prediction error at a random step.
- ``ResNet18Policy``: one ResNet-18-style encoder (BatchNorm) shared by the
  cameras and a linear head to the chunk: every frame of a batch through
  the encoder, a step of about 40 ms at two 224x224 cameras, B = 128.
- ``SmallPolicy``: a small conv encoder per camera and an MLP to the chunk,
  where the data path is hardest to hide.

Batches: ``observation.images.<cam>`` (B, 2, 3, H, W) float in [0, 1],
``observation.state`` (B, 2, 14), ``action`` (B, 16, 7), ``action_is_pad``.
"""

import math

import torch
from torch import nn
from torch.nn import functional as F


def _norm(channels):
    return nn.GroupNorm(min(32, channels // 4), channels)


class _Block(nn.Module):
    """ResNet's basic block."""

    def __init__(self, cin, cout, stride, norm=_norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = norm(cout)
        self.skip = (
            nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))
            if stride != 1 or cin != cout
            else nn.Identity()
        )

    def forward(self, x):
        y = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(y)) + self.skip(x))


class ResNet18Encoder(nn.Module):
    """Stem and four stages of two basic blocks (64, 128, 256, 512 channels
    at ``width`` 64, ResNet-18's), pooled; ``norm``: GroupNorm by default."""

    def __init__(self, width=64, norm=_norm):
        super().__init__()
        layers = [
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            norm(width),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        ]
        cin = width
        for scale, stride in ((1, 1), (2, 2), (4, 2), (8, 2)):
            cout = scale * width
            layers += [_Block(cin, cout, stride, norm), _Block(cout, cout, 1, norm)]
            cin = cout
        self.net = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.out_dim = 8 * width

    def forward(self, x):
        return self.net(x)


class _FiLMBlock(nn.Module):
    def __init__(self, cin, cout, cond_dim):
        super().__init__()
        self.conv1 = nn.Conv1d(cin, cout, 5, padding=2)
        self.conv2 = nn.Conv1d(cout, cout, 5, padding=2)
        self.norm1, self.norm2 = nn.GroupNorm(8, cout), nn.GroupNorm(8, cout)
        self.film = nn.Linear(cond_dim, 2 * cout)
        self.skip = nn.Conv1d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, cond):
        scale, shift = self.film(cond).unsqueeze(-1).chunk(2, dim=1)
        y = F.mish(self.norm1(self.conv1(x))) * (1 + scale) + shift
        return F.mish(self.norm2(self.conv2(y))) + self.skip(x)


class TemporalUNet(nn.Module):
    """A 1-D U-Net over (B, action_dim, T), two levels down and up."""

    def __init__(self, action_dim, cond_dim, widths=(256, 512)):
        super().__init__()
        self.step_embed = nn.Sequential(nn.Linear(64, 128), nn.Mish(), nn.Linear(128, 64))
        cond_dim += 64
        self.down1 = _FiLMBlock(action_dim, widths[0], cond_dim)
        self.down2 = _FiLMBlock(widths[0], widths[1], cond_dim)
        self.mid = _FiLMBlock(widths[1], widths[1], cond_dim)
        self.up2 = _FiLMBlock(2 * widths[1], widths[0], cond_dim)
        self.up1 = _FiLMBlock(2 * widths[0], widths[0], cond_dim)
        self.out = nn.Conv1d(widths[0], action_dim, 1)

    def forward(self, x, step, cond):
        half = torch.arange(32, device=x.device) * (-math.log(10000.0) / 31)
        angles = step.float().unsqueeze(1) * half.exp().unsqueeze(0)
        cond = torch.cat([cond, self.step_embed(torch.cat([angles.sin(), angles.cos()], 1))], 1)
        h1 = self.down1(x, cond)
        h2 = self.down2(F.avg_pool1d(h1, 2), cond)
        m = self.mid(F.avg_pool1d(h2, 2), cond)
        u2 = self.up2(torch.cat([F.interpolate(m, scale_factor=2), h2], 1), cond)
        u1 = self.up1(torch.cat([F.interpolate(u2, scale_factor=2), h1], 1), cond)
        return self.out(u1)


def _observation(batch, cameras, encoders):
    feats = []
    for cam, encoder in zip(cameras, encoders):
        frames = batch[cam]  # (B, S, 3, H, W)
        B, S = frames.shape[:2]
        feats.append(encoder(frames.flatten(0, 1)).view(B, -1))
    feats.append(batch["observation.state"].flatten(1))
    return torch.cat(feats, 1)


def _chunk_loss(pred, batch):
    """The squared error of a predicted action chunk over its unpadded steps."""
    valid = (~batch["action_is_pad"]).unsqueeze(-1)
    error = (pred - batch["action"].to(pred.dtype)) ** 2
    return (error * valid).sum() / valid.sum().clamp(min=1)


class DiffusionLike(nn.Module):
    """Diffusion Policy's shape: a ResNet-18 a camera and a temporal U-Net
    (``width`` scales both: 64 is the real size; a smoke run uses less)."""

    STEPS = 100

    def __init__(self, cameras, obs_steps=2, state_dim=14, action_dim=7, width=64):
        super().__init__()
        self.cameras = list(cameras)
        self.encoders = nn.ModuleList(ResNet18Encoder(width) for _ in self.cameras)
        cond_dim = obs_steps * (len(self.cameras) * 8 * width + state_dim)
        self.denoiser = TemporalUNet(action_dim, cond_dim, widths=(4 * width, 8 * width))
        betas = torch.linspace(1e-4, 2e-2, self.STEPS)
        self.register_buffer("alpha_bar", torch.cumprod(1 - betas, 0))

    def forward(self, batch):  # the loss: DistributedDataParallel calls forward
        return self.loss(batch)

    def loss(self, batch):
        cond = _observation(batch, self.cameras, self.encoders)
        action = batch["action"].transpose(1, 2)  # (B, A, T)
        step = torch.randint(0, self.STEPS, (action.shape[0],), device=action.device)
        noise = torch.randn_like(action)
        a = self.alpha_bar[step].view(-1, 1, 1)
        noisy = a.sqrt() * action + (1 - a).sqrt() * noise
        error = (self.denoiser(noisy, step, cond) - noise) ** 2
        valid = (~batch["action_is_pad"]).unsqueeze(1)
        return (error * valid).sum() / valid.sum().clamp(min=1) / action.shape[1]


class SmallPolicy(nn.Module):
    def __init__(self, cameras, obs_steps=2, state_dim=14, action_dim=7, chunk=16):
        super().__init__()
        self.cameras = list(cameras)

        def encoder():
            return nn.Sequential(
                nn.Conv2d(3, 16, 5, 2, 2), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU(),
                nn.Conv2d(32, 64, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            )  # fmt: skip

        self.encoders = nn.ModuleList(encoder() for _ in self.cameras)
        obs_dim = obs_steps * (len(self.cameras) * 64 + state_dim)
        self.head = nn.Sequential(
            nn.Linear(obs_dim, 256), nn.ReLU(), nn.Linear(256, chunk * action_dim)
        )
        self.chunk, self.action_dim = chunk, action_dim

    def forward(self, batch):
        return self.loss(batch)

    def loss(self, batch):
        obs = _observation(batch, self.cameras, self.encoders)
        return _chunk_loss(self.head(obs).view(-1, self.chunk, self.action_dim), batch)


class ResNet18Policy(nn.Module):
    """A ResNet-18 (BatchNorm) shared by the cameras, and a linear head from
    every frame's features and the state to the action chunk."""

    def __init__(self, cameras, obs_steps=2, state_dim=14, action_dim=7, chunk=16, width=64):
        super().__init__()
        self.cameras = list(cameras)
        self.encoder = ResNet18Encoder(width, norm=nn.BatchNorm2d)
        obs_dim = obs_steps * (len(self.cameras) * self.encoder.out_dim + state_dim)
        self.head = nn.Linear(obs_dim, chunk * action_dim)
        self.chunk, self.action_dim = chunk, action_dim

    def forward(self, batch):
        return self.loss(batch)

    def loss(self, batch):
        obs = _observation(batch, self.cameras, [self.encoder] * len(self.cameras))
        return _chunk_loss(self.head(obs).view(-1, self.chunk, self.action_dim), batch)
