"""Device arguments of the data side, checked where they are given."""

import torch

from .._ops import is_cuda_available


def resolve_device(device, what):
    """``device`` as a torch.device (None stays None), or a clear error where
    this process cannot use it: a CUDA device without a visible GPU, or
    without robocache's CUDA kernels."""
    if device is None:
        return None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"{what}: device {device!r} is not a device: {e}") from None
    if device.type != "cuda":
        return device
    if not torch.cuda.is_available():
        build = " (this torch is a CPU-only build)" if torch.version.cuda is None else ""
        raise RuntimeError(
            f"{what}: device {str(device)!r} asked for, but torch {torch.__version__} sees no "
            f"CUDA device{build}. Leave device unset (or 'cpu') to stay on the host, or run on "
            "a machine with an NVIDIA GPU and a CUDA build of torch."
        )
    if not is_cuda_available():
        raise RuntimeError(
            f"{what}: device {str(device)!r} asked for, but this robocache was built without "
            "its CUDA kernels. Rebuild it against a CUDA build of torch: "
            "`FORCE_CUDA=1 pip install --no-build-isolation -e .`"
        )
    if device.index is not None and device.index >= torch.cuda.device_count():
        raise RuntimeError(
            f"{what}: device {str(device)!r} asked for, but only {torch.cuda.device_count()} "
            "CUDA device(s) are visible"
        )
    return device
