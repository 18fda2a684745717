"""WindowSampler (sampler.py), the thin face over: the per-key plans
(plan.py), the anchors, epochs and ranks (order.py), what happens to a batch
after the kernel (transform.py), and CUDA-graph replay (graphs.py)."""

from .sampler import WindowSampler

__all__ = ["WindowSampler"]
