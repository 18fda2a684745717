"""Reference of ``robocache::augment`` in plain PyTorch: each window's
frames through ``interpolate`` (antialiased bilinear), ``grid_sample`` and
tensor arithmetic, as torchvision's v2 functional transforms compute them on
uint8 images (float32, rounded or truncated back to uint8 after each step).
A loop over windows: the oracle of the tests, not a fast path."""

import math

import torch
import torch.nn.functional as nnf

_GREY = (0.2989, 0.587, 0.114)


def augment(images, params, height, width, output="uint8"):
    """See ``robocache.ops.augment``: images (B, F, H, W, C) uint8, params (B, 10)."""
    rows = []
    for b in range(images.shape[0]):
        p = params[b].tolist()
        frames = images[b].permute(0, 3, 1, 2)  # (F, C, H, W)
        frames = _resized_crop(frames, p, height, width)
        frames = _rotate(frames, p[4])
        rows.append(_jitter(frames, p))
    out = torch.stack(rows)  # (B, F, C, height, width) uint8
    if output == "float_chw":
        return out.float().div_(255)
    out = out.permute(0, 1, 3, 4, 2).contiguous()
    return out if output == "uint8" else out.float().div_(255)


def _resized_crop(frames, p, height, width):
    top, left, h, w = (int(v) for v in p[:4])
    crop = frames[..., top : top + h, left : left + w]
    if (h, w) == (height, width):
        return crop
    x = nnf.interpolate(
        crop.float(), size=(height, width), mode="bilinear", align_corners=False, antialias=True
    )
    return x.round_().to(torch.uint8)


def _rotate(frames, angle):
    if angle % 360 == 0:
        return frames
    n, c, h, w = frames.shape
    a = math.radians(angle)
    theta = torch.tensor([[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0]])
    xs = torch.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w)
    ys = torch.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h)
    base = torch.stack(
        (xs.expand(h, w), ys[:, None].expand(h, w), torch.ones(h, w)), dim=-1
    )  # (h, w, 3)
    grid = (base @ theta.T) / torch.tensor([0.5 * w, 0.5 * h])
    x = torch.cat((frames.float(), torch.ones(n, 1, h, w)), dim=1)
    x = nnf.grid_sample(
        x, grid.expand(n, h, w, 2), mode="bilinear", padding_mode="zeros", align_corners=False
    )
    x, mask = x[:, :c], x[:, c:]
    return (x * mask).round_().to(torch.uint8)


def _grey(x):
    """(F, 1, H, W) float grey of uint8 (F, C, H, W), rounded down."""
    if x.shape[1] == 1:
        return x.float()
    r, g, b = x.float().unbind(1)
    grey = r.mul(_GREY[0]).add_(g, alpha=_GREY[1]).add_(b, alpha=_GREY[2])
    return grey.floor_().unsqueeze(1)


def _blend(x, other, ratio):
    out = x.float().mul(ratio).add_(other, alpha=1.0 - ratio)
    return out.clamp_(0, 255).to(torch.uint8)


def _jitter(x, p):
    order = int(p[9])
    for k in range(4):
        op = (order >> (2 * (3 - k))) & 3
        factor = p[5 + op]
        if math.isnan(factor):
            continue
        if op == 0:
            x = (x.float() * factor).clamp_(0, 255).to(torch.uint8)
        elif op == 1:
            x = _blend(x, _grey(x).mean(dim=(1, 2, 3), keepdim=True), factor)
        elif op == 2 and x.shape[1] == 3:
            x = _blend(x, _grey(x), factor)
        elif op == 3 and x.shape[1] == 3:
            x = _hue(x, factor)
    return x


def _hue(x, shift):
    rgb = x.float() * (1.0 / 255)
    r, g, b = rgb.unbind(1)
    maxc, minc = rgb.amax(1), rgb.amin(1)
    equal = maxc == minc
    span = maxc - minc
    s = span / torch.where(equal, torch.ones_like(maxc), maxc)
    divisor = torch.where(equal, torch.ones_like(span), span)
    rc, gc, bc = ((maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor)
    h = torch.where(maxc == r, bc - gc, torch.where(maxc == g, rc + 2.0 - bc, gc + 4.0 - rc))
    h = torch.fmod(h * (1.0 / 6.0) + 1.0, 1.0)
    h = torch.remainder(h + shift, 1.0)
    h6 = h * 6
    i = torch.floor(h6)
    f = h6 - i
    i = i.long().remainder(6)
    sf = s * f
    q = ((1 - sf) * maxc).clamp(0, 1)
    t = ((sf + (1 - s)) * maxc).clamp(0, 1)
    p = ((1 - s) * maxc).clamp(0, 1)
    table = torch.stack((maxc, p, q, t))  # the order of torchvision's select
    pick = torch.tensor([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])[:, i]
    out = torch.gather(table, 0, pick)  # (3, F, H, W)
    return (out.movedim(0, 1) * (255.0 + 1.0 - 1e-3)).to(torch.uint8)
