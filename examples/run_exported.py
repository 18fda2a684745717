"""Load an exported policy in a fresh process and compare with saved outputs.

    python examples/run_exported.py export|aoti PATH CHECK.pt

The robocache operators must be registered before the graph runs: importing
robocache loads its library (a C++ deployment loads the same shared library,
robocache/_C*.so, with dlopen before loading the package).
"""

import sys

import torch

import robocache  # noqa: F401  (registers torch.ops.robocache.*)


def main(kind, path, check_path):
    check = torch.load(check_path)
    if kind == "export":
        model = torch.export.load(path).module()
    elif kind == "aoti":
        model = torch._inductor.aoti_load_package(path)
    else:
        raise SystemExit(f"unknown kind {kind!r}")
    with torch.no_grad():
        out = model(*check["inputs"])
    out = out[0] if isinstance(out, (list, tuple)) else out
    err = (out - check["expected"]).abs().max().item()
    print(f"{kind}: fresh process, output {tuple(out.shape)}, max |diff| vs eager {err:.2e}")
    if not err <= 1e-4:
        raise SystemExit(f"{kind}: output differs from eager by {err}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
