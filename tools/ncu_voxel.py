"""One voxelize count call (8 x 307200 uniform points into 100^3) and one mean
call (6 features, 8 x 65536 points) between cudaProfilerStart/Stop, for
Nsight Compute (tools/gpu_run.sh vncu)."""
import torch

import robocache

torch.manual_seed(0)
uni = torch.rand(8, 307200, 3, device="cuda")
pts, feats = torch.rand(8, 65536, 3, device="cuda"), torch.randn(8, 65536, 6, device="cuda")
calls = [
    lambda: robocache.voxelize(uni, (100,) * 3, 0.01, (0, 0, 0), reduce="count"),
    lambda: robocache.voxelize(pts, (100,) * 3, 0.01, (0, 0, 0), features=feats, reduce="mean"),
]
for c in calls:
    c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStart()
for c in calls:
    c()
torch.cuda.synchronize()
torch.cuda.cudart().cudaProfilerStop()
