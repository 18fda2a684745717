"""What the voxelize tests share: the reductions, an independent NumPy
computation, random clouds, and the three-way comparison (robocache, the
float64 reference, NumPy)."""

import numpy as np
import torch
from conftest import tolerance
from torch.testing import assert_close

import robocache
from robocache import reference

REDUCES = ["occupancy", "count", "sum", "mean", "max"]
FEATURE_REDUCES = ["sum", "mean", "max"]


def numpy_voxelize(
    points, grid, voxel_size, origin, features=None, lengths=None, reduce="occupancy"
):
    """An independent NumPy computation (same float arithmetic in the points' dtype)."""
    p = points.cpu().numpy()
    batched = p.ndim == 3
    if not batched:
        p = p[None]
    B, N, _ = p.shape
    X, Y, Z = grid
    vs = np.broadcast_to(np.asarray(voxel_size, dtype=np.float64), (3,)).astype(p.dtype)
    o = np.asarray(origin, dtype=np.float64).astype(p.dtype)
    f = None
    if features is not None:
        f = features.cpu().double().numpy()
        f = f if batched else f[None]
    counts = np.zeros((B, X, Y, Z), np.int64)
    C = 0 if f is None else f.shape[-1]
    acc = np.zeros((B, C, X, Y, Z)) if reduce != "max" else np.full((B, C, X, Y, Z), -np.inf)
    with np.errstate(invalid="ignore", over="ignore"):
        idx = np.floor((p - o) / vs)
    for b in range(B):
        n_valid = N if lengths is None else int(lengths[b])
        for n in range(n_valid):
            if not np.isfinite(p[b, n]).all():
                continue
            i, j, k = idx[b, n]
            if not (0 <= i < X and 0 <= j < Y and 0 <= k < Z):
                continue
            i, j, k = int(i), int(j), int(k)
            counts[b, i, j, k] += 1
            if f is not None:
                if reduce == "max":
                    acc[b, :, i, j, k] = np.maximum(acc[b, :, i, j, k], f[b, n])
                else:
                    acc[b, :, i, j, k] += f[b, n]
    if reduce == "occupancy":
        out = (counts > 0).astype(np.float64)
    elif reduce == "count":
        out = counts
    else:
        occupied = (counts > 0)[:, None]
        if reduce == "mean":
            acc = acc / np.maximum(counts, 1)[:, None]
        out = np.where(occupied, acc, 0.0)
    return torch.from_numpy(out if batched else out[0])


def cloud(B, N, device, dtype=torch.float32, lo=-0.2, hi=1.2):
    """Random points in a box a little larger than the grid."""
    return (lo + (hi - lo) * torch.rand(B, N, 3, dtype=torch.float64, device=device)).to(dtype)


def run(points, grid, voxel_size, origin, features=None, lengths=None, reduce="occupancy"):
    out = robocache.voxelize(
        points, grid, voxel_size, origin, features=features, lengths=lengths, reduce=reduce
    )
    ref = reference.voxelize(points, grid, voxel_size, origin, features, lengths, reduce)
    npy = numpy_voxelize(points, grid, voxel_size, origin, features, lengths, reduce)
    return out, ref, npy


def assert_matches(out, ref, npy, dtype=torch.float32, atol=None):
    rtol, default_atol = tolerance(dtype) if dtype.is_floating_point else (0, 0)
    atol = default_atol if atol is None else atol
    assert out.shape == ref.shape == npy.shape
    if not out.dtype.is_floating_point:
        assert torch.equal(out.cpu(), ref.cpu()) and torch.equal(out.cpu().long(), npy)
        return
    assert_close(out.double().cpu(), ref.double().cpu(), rtol=rtol, atol=atol, equal_nan=True)
    assert_close(out.double().cpu(), npy.double(), rtol=rtol, atol=atol, equal_nan=True)
