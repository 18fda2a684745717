"""What the resample tests share: the modes and dtypes they sweep, the
float64 reference, random lengths, and float64 inputs."""

import torch
from helpers import query_times, sorted_times

from robocache import reference

MODES = ["linear", "nearest", "previous"]
VALUE_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
TIME_DTYPES = [torch.float32, torch.float64, torch.int64]


def ref64(values, times, query, lengths=None, mode="linear"):
    """The reference evaluated on float64 values (times keep their dtype)."""
    return reference.resample(values.double(), times, query, lengths, mode)


def random_lengths(B, S, device):
    return torch.randint(1, S + 1, (B,), device=device)


F64 = torch.float64


def resample_inputs(device, B=2, S=7, T=5, D=3, shared_query=False):
    """Random float64 values, sorted times and queries inside them."""
    values = torch.randn(B, S, D, device=device, dtype=F64)
    times = sorted_times(B, S, F64, device)
    query = query_times(B, T, F64, device, shared=shared_query, lo=0.5, hi=9.5)
    return values, times, query
