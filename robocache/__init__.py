"""robocache: preprocessing operators for robot learning, as PyTorch custom ops.

Importing robocache loads its compiled library, which registers the
``torch.ops.robocache.*`` operators with the dispatcher.
"""

import torch


def _load_library():
    try:
        from . import _build_info
    except ImportError:
        _build_info = None
    if _build_info is not None and _build_info.TORCH_VERSION != torch.__version__:
        raise ImportError(
            f"robocache's compiled library was built against torch {_build_info.TORCH_VERSION}, "
            f"but torch {torch.__version__} is installed. Rebuild it: "
            "`pip install --no-build-isolation -e .` (or `make build`)."
        )
    import importlib.util

    if importlib.util.find_spec(__name__ + "._C") is None:
        raise ImportError(
            "robocache's compiled library (robocache._C) is missing: the extension has not "
            "been built. Build it with `pip install --no-build-isolation -e .` "
            "(or `make build`)."
        )
    try:
        from . import _C  # noqa: F401  (loading it runs the operator registrations)
    except ImportError as e:
        raise ImportError(
            f"robocache's compiled library failed to load ({e}); it probably does not match "
            f"the installed torch {torch.__version__}. Rebuild it: "
            "`pip install --no-build-isolation -e .` (or `make build`)."
        ) from e


_load_library()

from . import (  # noqa: E402,F401  (autograd, forward AD and vmap of the ops)
    _autograd,
    _vmap,
    reference,  # noqa: E402
)
from ._anchor_windows import anchor_windows  # noqa: E402
from ._compat import fuse_multimodal, resample_trajectories, voxelize_point_cloud  # noqa: E402
from ._ops import fuse, fuse_columns, is_cuda_available, resample, voxelize  # noqa: E402
from ._version import __version__  # noqa: E402,F401
from ._windows import sample_windows  # noqa: E402

__all__ = [
    "anchor_windows",
    "fuse",
    "fuse_columns",
    "fuse_multimodal",
    "is_cuda_available",
    "reference",
    "resample",
    "resample_trajectories",
    "sample_windows",
    "voxelize",
    "voxelize_point_cloud",
]
