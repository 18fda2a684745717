import pytest
import torch
import torch._dynamo.testing  # noqa: F401  (CompileCounterWithBackend in the tests)

import robocache  # noqa: F401  (registers the operators)

HAS_CUDA = torch.cuda.is_available()

# CUDA cases skip cleanly where no GPU is present. Where one is present they
# run against the CUDA kernels, and fail loudly if robocache was built without them.
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")),
]

requires_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def tolerance(dtype):
    """(rtol, atol) for comparing a result in `dtype` with a float64 reference."""
    return {
        torch.float64: (1e-10, 1e-10),
        torch.float32: (1e-5, 1e-5),
        torch.float16: (2e-3, 2e-3),
        torch.bfloat16: (1.6e-2, 1.6e-2),
    }[dtype]
