"""Load a CUDA build of robocache's library (no GPU needed) and check that
every operator has its CUDA kernel registered."""

import glob
import os
import sys

import torch

lib_dir = sys.argv[1]
libs = glob.glob(os.path.join(lib_dir, "robocache", "_C*.so"))
if len(libs) != 1:
    sys.exit(f"expected one robocache/_C*.so under {lib_dir}; found {libs}")
torch.ops.load_library(libs[0])
ops = [name for name in torch._C._dispatch_get_all_op_names() if name.startswith("robocache::")]
missing = [op for op in ops if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "CUDA")]
if not ops or missing:
    sys.exit(f"robocache CUDA build: operators without a CUDA kernel: {missing or 'no operators'}")
print(
    f"CUDA build OK with torch {torch.__version__}: {len(ops)} operators with CUDA kernels: "
    + ", ".join(sorted(ops))
)
