"""What every operator's Python face shares.

Importing this module loads robocache's compiled library (``robocache._C``),
which registers the ``torch.ops.robocache`` operators with the dispatcher.
It then holds the pieces each module of ``robocache.ops`` builds on:

- argument checks whose errors name the argument (shapes, dtypes and
  devices are checked once, in C++, by the operators themselves);
- ``register_autograd``: an ``autograd.Function`` as an operator's Autograd
  kernel, so the operators work under plain autograd, ``torch.func`` and
  ``torch.compile``;
- the vmap helpers that fold a vmapped dimension into an operator's batch.
"""

import importlib.util
import numbers

import torch
from torch._C._functorch import TransformType
from torch._functorch.utils import enable_single_level_autograd_function
from torch.autograd import forward_ad
from torch.autograd.function import _SingleLevelFunction as SingleLevelFunction  # noqa: F401


def _load_library():
    library = importlib.util.find_spec(__package__ + "._C")
    if library is None:
        raise ImportError(
            "robocache's compiled library (robocache._C) is missing: the extension has not "
            "been built. Build it with `pip install --no-build-isolation -e .` "
            "(or `make build`)."
        )
    try:
        from . import _build_info
    except ImportError:
        _build_info = None
    if _build_info is not None and _build_info.TORCH_VERSION != torch.__version__:
        # A build from another environment can replace the library in place
        # (an editable install writes into the checkout): name the file.
        raise ImportError(
            f"robocache's compiled library ({library.origin}) was built against torch "
            f"{_build_info.TORCH_VERSION}, but torch {torch.__version__} is installed. "
            "Rebuild it with this torch: `pip install --no-build-isolation -e .` "
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

OPS = torch.ops.robocache
INTERP_MODES = ("linear", "nearest", "previous")
WINDOW_MODES = ("nearest", "previous", "linear", "mean")

# Read once, at import: a plain bool that torch.compile folds, where the
# dispatcher query itself would break the graph.
_HAS_CUDA_KERNELS = torch._C._dispatch_has_kernel_for_dispatch_key("robocache::resample", "CUDA")


def is_cuda_available():
    """Whether robocache was built with its CUDA kernels (and they are registered)."""
    return _HAS_CUDA_KERNELS


# ---------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------


def check_tensor(x, name, op, optional=False):
    """``x`` itself when it is a tensor (or None where allowed); else a TypeError."""
    if torch.is_tensor(x) or (optional and x is None):
        return x
    if type(x).__module__.startswith("torch.fx"):  # a proxy while tracing: the op checks it
        return x
    hint = ""
    if type(x).__module__ == "numpy" or isinstance(x, (list, tuple, numbers.Number)):
        hint = " (pass a tensor: torch.from_numpy(array) or torch.tensor(data))"
    raise TypeError(
        f"{op}: {name} must be a torch.Tensor{' or None' if optional else ''}; "
        f"got {type(x).__name__}{hint}"
    )


def check_mode(mode, name, op):
    """An interpolation mode of resample and fuse."""
    if not isinstance(mode, str) or mode not in INTERP_MODES:
        raise ValueError(f"{op}: {name} must be 'linear', 'nearest' or 'previous'; got {mode!r}")
    return mode


def check_nanoseconds(x, name, op, *, allow_none=False):
    """A non-negative int of nanoseconds (None -> -1 where allowed)."""
    if x is None and allow_none:
        return -1
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or x < 0:
        raise ValueError(
            f"{op}: {name} must be a non-negative int of nanoseconds"
            f"{' or None' if allow_none else ''}; got {x!r}"
        )
    return int(x)


def require_kernels(op, *tensors):
    """A CUDA tensor on a build without CUDA kernels gets a clear error, not
    the dispatcher's 'Could not run ... with arguments from the CUDA backend'."""
    for t in tensors:
        if torch.is_tensor(t) and t.is_cuda and not is_cuda_available():
            raise RuntimeError(
                f"{op}: got a CUDA tensor, but this robocache was built without its CUDA kernels "
                f"(torch {torch.__version__}). Rebuild it against a CUDA build of torch with nvcc "
                "on the PATH: `FORCE_CUDA=1 pip install --no-build-isolation -e .`"
            )


def on_meta(args):
    """``args`` with every tensor replaced by a meta tensor of its shape: the
    operator's own shape checks, run before any data check reads a value.
    Tensors on different devices are left alone (the operator says which)."""
    devices = {a.device for a in _flat_tensors(args)}
    return args if len(devices) > 1 else _to_meta(args)


def _flat_tensors(x):
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _to_meta(x):
    if torch.is_tensor(x):
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, (list, tuple)):
        return type(x)(_to_meta(v) for v in x)
    return x


# ---------------------------------------------------------------------------
# Autograd: an autograd.Function as an operator's Autograd kernel
# ---------------------------------------------------------------------------

_LIB = torch.library.Library("robocache", "IMPL")


def _python_any_requires_grad(*args):
    return any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


# torch._C._any_requires_grad checks in C++ where torch has it (2.6 does not).
_any_requires_grad = getattr(torch._C, "_any_requires_grad", _python_any_requires_grad)


def below_autograd(op, *args):
    """``op(*args)`` dispatched past the Autograd key (no graph recorded)."""
    with torch._C._AutoDispatchBelowAutograd():
        return op(*args)


def register_autograd(opname, function, flatten=None):
    """Registers ``function`` (a SingleLevelFunction) as ``robocache::opname``'s
    Autograd kernel. ``flatten`` turns the op's arguments into ``apply``'s
    (tensor lists spread out, so autograd sees every tensor);
    ``function.unflatten_output``, where defined, turns apply's outputs back."""
    op = getattr(OPS, opname).default
    # The dispatcher drops trailing arguments equal to the schema's defaults.
    defaults = [p.default_value if p.has_default_value() else None for p in op._schema.arguments]

    def kernel(keyset, *args):
        args = (*args, *defaults[len(args) :])
        flat = flatten(*args) if flatten else args
        if torch.is_grad_enabled() and (_any_requires_grad(*flat) or _any_tangent(flat)):
            out = _apply(function, flat)
            if hasattr(function, "unflatten_output"):
                return function.unflatten_output(out, flat)
            return out
        with torch._C._AutoDispatchBelowAutograd():
            return op.redispatch(keyset & torch._C._after_autograd_keyset, *args)

    _LIB.impl(opname, kernel, "Autograd", with_keyset=True)


def _any_tangent(args):
    """Whether forward-mode AD carries a tangent on any tensor argument."""
    if forward_ad._current_level < 0:
        return False
    return any(torch.is_tensor(a) and forward_ad.unpack_dual(a).tangent is not None for a in args)


def _refuse_nested_differentiation(function):
    """The Function records its graph at one functorch level; an enclosing
    grad or jvp level would see the op as a constant and get a silently zero
    derivative. Nested transforms (hessian, jacfwd(jacrev), grad(grad)) raise."""
    levels = [
        i
        for i in torch._C._functorch.get_interpreter_stack() or []
        if i.key() in (TransformType.Grad, TransformType.Jvp)
    ]
    if len(levels) > 1:
        name = function.__name__.lstrip("_").lower()
        raise NotImplementedError(
            f"robocache ({name}): nested torch.func differentiation (hessian, jacfwd(jacrev), "
            "grad(grad), ...) is not supported; one level of grad, vjp, jacrev, jvp or jacfwd "
            "is, under any vmap. For higher orders use torch.autograd.grad(..., "
            "create_graph=True), which supports double backward."
        )


def _apply(function, args):
    """``function.apply(*args)`` from inside a dispatcher kernel.

    Under torch.func the transforms have already unwrapped the tensors to
    this level by the time the Autograd key runs, so the Function records an
    ordinary single-level graph here (as a C++ autograd kernel would), rather
    than re-entering the functorch interpreter stack. That is why the
    operators' Functions are SingleLevelFunctions: a ``Function``'s apply
    hands itself to functorch whenever transforms are active, which from
    inside a kernel cannot work."""
    if torch._C._are_functorch_transforms_active():
        _refuse_nested_differentiation(function)
        with enable_single_level_autograd_function():
            return function.apply(*args)
    return function.apply(*args)


def defined(x):
    """A gradient that is present and not an empty placeholder."""
    return x is not None and x.numel() > 0


# ---------------------------------------------------------------------------
# vmap: every operator already takes a batch, so a vmapped call folds the
# vmapped dimension V into the batch B (V * B rows) and unfolds the result.
# ---------------------------------------------------------------------------


def padded_in_dims(in_dims, count=12):
    """in_dims with None for the arguments left at their defaults."""
    return tuple(in_dims) + (None,) * count


def logical_dim(x, bdim):
    return x.dim() - (0 if bdim is None else 1)


def batch_size(x, bdim):
    return x.shape[0] if bdim is None else x.movedim(bdim, 0).shape[1]


def fold_rows(x, bdim, V, B, batched, expand_shared=False):
    """x as V*B rows: ``batched`` says whether x's logical shape starts with
    B; a shared x stays shared unless it is vmapped or ``expand_shared``."""
    if x is None:
        return None
    if batched:
        if bdim is None:
            return x.unsqueeze(0).expand(V, *x.shape).reshape(V * B, *x.shape[1:])
        x = x.movedim(bdim, 0)
        return x.reshape(V * B, *x.shape[2:])
    if bdim is None and not expand_shared:
        return x
    base = x.movedim(bdim, 0) if bdim is not None else x.unsqueeze(0).expand(V, *x.shape)
    return base.unsqueeze(1).expand(V, B, *base.shape[1:]).reshape(V * B, *base.shape[1:])


def unfold_rows(x, V):
    return x.reshape(V, x.shape[0] // V, *x.shape[1:])
