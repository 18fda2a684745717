"""Diagnose AOTInductor with robocache's operators, one operator at a time.

Exports a tiny module per operator, packages each with AOTInductor, and loads
each package in a fresh Python process (printing its return code), so a
crash names the operator, or shows that every package crashes. Usage:
    python tools/debug_aoti.py OUT_DIR
"""
import os, subprocess, sys, torch, robocache
out = sys.argv[1]
os.makedirs(out, exist_ok=True)

class R(torch.nn.Module):
    def forward(self, v, t, q):
        return torch.ops.robocache.resample(v, t, q, None, "linear")
class RL(torch.nn.Module):
    def forward(self, v, t, q, l):
        return torch.ops.robocache.resample(v, t, q, l, "linear")
class F(torch.nn.Module):
    def forward(self, v, t, q):
        return torch.ops.robocache.fuse([v, v], [t, t], q, None, "linear,previous")
class FL(torch.nn.Module):
    def forward(self, v, t, q, l):
        return torch.ops.robocache.fuse([v, v], [t, t], q, torch.stack([l, l]), "linear,previous")
class V(torch.nn.Module):
    def forward(self, p):
        return torch.ops.robocache.voxelize(p, None, None, [4, 4, 4], [0.25], [0.0, 0.0, 0.0], "occupancy")

v = torch.randn(2, 10, 4); t = torch.arange(10.0); q = torch.rand(2, 5) * 9; l = torch.tensor([10, 5])
cases = {"resample": (R(), (v, t, q)), "resample_lengths": (RL(), (v, t, q, l)), "fuse": (F(), (v, t, q)), "fuse_lengths": (FL(), (v, t, q, l)),
         "voxelize": (V(), (torch.rand(2, 50, 3),))}
for name, (m, args) in cases.items():
    ep = torch.export.export(m, args)
    path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out, name + ".pt2"))
    torch.save(args, os.path.join(out, name + "_args.pt"))
    code = ("import torch, robocache, sys; m = torch._inductor.aoti_load_package(sys.argv[1]); "
            "a = torch.load(sys.argv[2]); print(m(*a)[0].shape if isinstance(m(*a), (list, tuple)) else m(*a).shape)")
    r = subprocess.run([sys.executable, "-c", code, path, os.path.join(out, name + "_args.pt")],
                       capture_output=True, text=True)
    print(name, "rc", r.returncode, r.stdout.strip()[-200:], r.stderr.strip()[-300:])
    with open(os.path.join(out, name + ".cmd"), "w") as f:
        f.write(code)
