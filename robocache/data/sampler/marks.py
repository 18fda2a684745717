"""Marks shared with a native object's threads: int64 counters in a CPU
tensor the native side owns (csrc/include/robocache/marks.h), read and
written here without a call."""

import ctypes

import torch


def shared_marks(marks):
    """A view of each of ``marks`` (a native object's contiguous int64 CPU
    tensor), as a ``ctypes.c_int64`` whose ``value`` is read and written in
    place; each view keeps the tensor alive. Plain aligned 8-byte loads and
    stores, which x86-64 keeps in program order (the native side's are
    atomic)."""
    if marks.dtype != torch.int64 or marks.device.type != "cpu" or not marks.is_contiguous():
        raise TypeError(f"shared_marks: expected a contiguous int64 CPU tensor; got {marks!r}")
    views = []
    for i in range(marks.numel()):
        view = ctypes.c_int64.from_address(marks.data_ptr() + i * marks.element_size())
        view.owner = marks
        views.append(view)
    return views
