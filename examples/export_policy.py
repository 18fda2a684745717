"""Export MultiRatePolicy for deployment, then check it from a fresh process.

1. ``torch.export.export`` with a dynamic batch, number of control steps,
   stream lengths and cloud size; ``torch.export.save`` -> policy.pt2
2. an AOTInductor package of the same graph -> policy_aoti.pt2
3. ``examples/run_exported.py`` in a new Python process loads each (after
   ``import robocache``, which registers the operators) and compares with the
   eager outputs saved next to them.

    python examples/export_policy.py [OUT_DIR] [--no-aoti]
"""

import os
import subprocess
import sys

import torch
from torch.export import Dim

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from policy import MultiRatePolicy, example_inputs  # noqa: E402


def dynamic_shapes():
    """Batch, control steps, each stream's sample count and the cloud size vary."""
    batch = Dim("batch", min=1, max=1024)
    steps = Dim("steps", min=2, max=1 << 20)
    shapes = []
    for name in ("vision", "proprio", "force"):
        samples = Dim(f"{name}_samples", min=2, max=1 << 24)
        shapes += [{0: batch, 1: samples}, {0: batch, 1: samples}, {0: batch}]
    points = Dim("points", min=2, max=1 << 24)
    return (*shapes, {0: batch, 1: steps}, {0: batch, 1: points})


def export(policy, inputs, out_dir, aoti=True):
    os.makedirs(out_dir, exist_ok=True)
    ep = torch.export.export(policy, inputs, dynamic_shapes=dynamic_shapes())
    program = os.path.join(out_dir, "policy.pt2")
    torch.export.save(ep, program)
    package = None
    if aoti:
        package = torch._inductor.aoti_compile_and_package(
            ep, package_path=os.path.join(out_dir, "policy_aoti.pt2")
        )
    return ep, program, package


def main(argv):
    out_dir = argv[1] if len(argv) > 1 and not argv[1].startswith("--") else "exported"
    aoti = "--no-aoti" not in argv
    torch.manual_seed(0)
    policy = MultiRatePolicy().eval()
    ep, program, package = export(policy, example_inputs(B=4, seconds=1.0), out_dir, aoti)
    robocache_nodes = [
        str(n.target)
        for n in ep.graph.nodes
        if n.op == "call_function" and "robocache" in str(n.target)
    ]
    print(f"exported: {program}; robocache nodes in the graph: {robocache_nodes}")
    # Check on other shapes than the ones exported with.
    check_inputs = example_inputs(B=3, seconds=1.5, seed=1, points=3000)
    with torch.no_grad():
        expected = policy(*check_inputs)
    reference = os.path.join(out_dir, "check.pt")
    torch.save({"inputs": check_inputs, "expected": expected}, reference)
    runner = os.path.join(os.path.dirname(os.path.abspath(__file__)), "run_exported.py")
    for path, kind in [(program, "export"), (package, "aoti")]:
        if path is None:
            continue
        result = subprocess.run(
            [sys.executable, runner, kind, path, reference], capture_output=True, text=True
        )
        print(result.stdout.strip() or result.stderr.strip())
        if result.returncode != 0:
            raise SystemExit(f"{kind}: the fresh process failed:\n{result.stderr}")


if __name__ == "__main__":
    main(sys.argv)
