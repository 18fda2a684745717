"""The pure-PyTorch oracle of voxelize."""

import torch


def _floats(x):
    """A number, or nested lists, tuples or numpy arrays of them, as a flat list of floats."""
    if hasattr(x, "tolist"):
        x = x.tolist()
    if isinstance(x, (list, tuple)):
        return [f for v in x for f in _floats(v)]
    return [float(x)]


def _per_cloud(x, B, points):
    """A voxel size or origin (a number, 1 or 3 values, or a (B, 3) tensor of
    one row per cloud) as (B or 1, 1, 3) in the points' dtype."""
    if torch.is_tensor(x):
        t = x.to(device=points.device, dtype=points.dtype)
    else:  # flattened in Python: torch.compile traces it with no graph break
        t = torch.tensor(_floats(x), device=points.device, dtype=points.dtype)
    if t.dim() == 2:
        return t.view(B, 1, 3)
    return t.reshape(-1).expand(3).view(1, 1, 3) if t.numel() == 1 else t.view(1, 1, 3)


def voxelize(
    points, grid_size, voxel_size, origin, features=None, lengths=None, reduce="occupancy"
):
    """Reference for :func:`robocache.voxelize` (same arguments, same result).

    Dropped points (not finite, out of range, past ``lengths``) are masked:
    they scatter zero weight into in-range slots spread over the grid, never
    onto one sentinel voxel, so the reference has no artificial hot spot.
    """
    batched = points.dim() == 3
    if not batched:
        points = points.unsqueeze(0)
        features = features.unsqueeze(0) if features is not None else None
    B, N, _ = points.shape
    X, Y, Z = (int(g) for g in grid_size)
    cells = X * Y * Z
    o = _per_cloud(origin, B, points)
    v = _per_cloud(voxel_size, B, points)
    f = torch.floor((points - o) / v)
    dims = torch.tensor([X, Y, Z], dtype=points.dtype, device=points.device)
    keep = torch.isfinite(points).all(-1) & ((f >= 0) & (f < dims)).all(-1)
    if lengths is not None:
        keep &= torch.arange(N, device=points.device) < lengths.view(B, 1)
    ijk = torch.where(keep.unsqueeze(-1), f, torch.zeros_like(f)).long()
    flat = (ijk[..., 0] * Y + ijk[..., 1]) * Z + ijk[..., 2]
    spread = torch.arange(B * N, device=points.device).view(B, N) % cells
    flat = (
        torch.where(keep, flat, spread) + torch.arange(B, device=points.device).view(B, 1) * cells
    )
    flat = flat.reshape(-1)
    counts = torch.zeros(B * cells, dtype=torch.int32, device=points.device)
    counts.index_add_(0, flat, keep.reshape(-1).to(torch.int32))

    def shaped(grid, with_channels):
        if with_channels:
            C = grid.shape[-1]
            grid = grid.view(B, X, Y, Z, C).permute(0, 4, 1, 2, 3).contiguous()
        else:
            grid = grid.view(B, X, Y, Z)
        return grid if batched else grid[0]

    if reduce == "occupancy":
        return shaped((counts > 0).to(points.dtype), False)
    if reduce == "count":
        return shaped(counts, False)
    C = features.shape[-1]
    acc_dtype = torch.float64 if features.dtype == torch.float64 else torch.float32
    feats = features.reshape(B * N, C).to(acc_dtype)
    kept = keep.reshape(-1, 1)
    if reduce in ("sum", "mean"):
        src = torch.where(kept, feats, torch.zeros_like(feats))
        acc = torch.zeros(B * cells, C, dtype=acc_dtype, device=points.device).index_add(
            0, flat, src
        )
        if reduce == "mean":
            acc = acc / counts.clamp(min=1).unsqueeze(-1)
    elif reduce == "max":
        src = torch.where(kept, feats, torch.full_like(feats, -torch.inf))
        acc = torch.full((B * cells, C), -torch.inf, dtype=acc_dtype, device=points.device)
        acc = acc.scatter_reduce(0, flat.unsqueeze(-1).expand(-1, C), src, "amax")
        acc = torch.where((counts > 0).unsqueeze(-1), acc, torch.zeros_like(acc))
    else:
        raise ValueError(f"unknown reduce {reduce!r}")
    return shaped(acc.to(features.dtype), True)
