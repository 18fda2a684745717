"""WindowSampler (sampler.py), the thin face over a pipeline of stages
shared by a store's sampler (store_batches.py) and a mixture's
(mixture_batches.py, packed_mixture.py):

- plan.py: the options, and what happens to each key (``KeyPlan``);
- order.py, draws.py: epochs, ranks and anchors; a mixture's draws;
- read.py, decode.py: where each key's rows come from (the GPU, pinned
  memory, the store's file, the frame decoder);
- cut.py: the window op, once per device a batch's keys are cut on;
- transform.py: normalisation, image form, augmentation;
- graphs.py, pipeline.py: CUDA-graph replay; the side stream and its events;
  launch.py: which of them a store's batches use.
"""

from .sampler import WindowSampler

__all__ = ["WindowSampler"]
