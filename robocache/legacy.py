"""The seed API: robocache's first Python functions, kept working as written.

``resample_trajectories``, ``fuse_multimodal`` and ``voxelize_point_cloud``
with their original argument names and ``backend=``: ``"pytorch"`` runs the
pure-PyTorch reference; ``None``, ``"auto"`` or ``"robocache"`` run the
operator; ``"cuda"`` runs the operator and insists on CUDA tensors.
"""

import torch

from . import reference
from ._ops import is_cuda_available
from .ops import fuse, resample, voxelize

_BACKENDS = (None, "auto", "robocache", "cuda", "pytorch")


def _use_reference(backend, *tensors):
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}; got {backend!r}")
    if backend == "cuda":
        if not is_cuda_available():
            raise RuntimeError("backend='cuda': robocache was built without its CUDA kernels")
        for t in tensors:
            if torch.is_tensor(t) and not t.is_cuda:
                raise ValueError("backend='cuda' needs CUDA tensors; got one on " + str(t.device))
    return backend == "pytorch"


def resample_trajectories(src, src_t, tgt_t, backend=None):
    """Linear resampling, as in robocache's first API (argument names kept).

    ``src`` is (B, S, D), ``src_t`` (B, S) or (S,), ``tgt_t`` (B, T) or (T,).
    """
    if _use_reference(backend, src, src_t, tgt_t):
        return reference.resample(src, src_t, tgt_t)
    return resample(src, src_t, tgt_t)


def fuse_multimodal(vision, vision_t, proprio, proprio_t, force, force_t, target_t, backend=None):
    """Three streams (vision, proprioception, force) linearly onto ``target_t``,
    as in robocache's first API: returns (B, T, D_vision + D_proprio + D_force).
    """
    streams = [(vision, vision_t), (proprio, proprio_t), (force, force_t)]
    if _use_reference(backend, vision, vision_t, proprio, proprio_t, force, force_t, target_t):
        return reference.fuse(streams, target_t)
    return fuse(streams, target_t)


def voxelize_point_cloud(points, grid_size, voxel_size, origin, backend=None):
    """A float occupancy grid of shape ``grid_size`` (or (B, *grid_size) for a
    batch), as in robocache's first API. ``voxel_size`` is a float (or three);
    ``origin`` a tensor or a sequence.
    """
    if _use_reference(backend, points):
        return reference.voxelize(points, grid_size, voxel_size, origin)
    return voxelize(points, grid_size, voxel_size, origin)
