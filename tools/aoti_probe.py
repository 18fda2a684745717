"""Does an AOTInductor package with no robocache operator load in a fresh process here?

Builds a plain Linear + sin package for CPU and CUDA and loads each in a fresh
process, with and without `import robocache`, and (given a second argument)
with LD_PRELOAD set to it. Usage: python tools/aoti_probe.py OUT_DIR [LIB]
"""
import faulthandler, os, subprocess, sys, torch
faulthandler.dump_traceback_later(600, exit=True)
out = sys.argv[1]; os.makedirs(out, exist_ok=True)
class M(torch.nn.Module):
    def __init__(self):
        super().__init__(); self.lin = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.lin(x).sin() + 1
for dev in ["cpu", "cuda"]:
    m = M().to(dev); x = torch.randn(3, 8, device=dev)
    print("export", dev, flush=True)
    ep = torch.export.export(m, (x,))
    path = torch._inductor.aoti_compile_and_package(ep, package_path=os.path.join(out, f"plain_{dev}.pt2"))
    print("packaged", dev, path, flush=True)
    torch.save((x,), os.path.join(out, f"plain_{dev}_args.pt"))
    for pre in ["", "import robocache;"]:
        code = (f"import torch; {pre} import sys; m = torch._inductor.aoti_load_package(sys.argv[1]); "
                "a = torch.load(sys.argv[2]); print(m(*a).shape)")
        for env_name, env in [("plain", dict(os.environ))] + (
            [("preload", dict(os.environ, LD_PRELOAD=sys.argv[2]))] if len(sys.argv) > 2 else []):
            r = subprocess.run([sys.executable, "-c", code, path, os.path.join(out, f"plain_{dev}_args.pt")],
                               capture_output=True, text=True, env=env, timeout=120)
            print(dev, repr(pre), env_name, "rc", r.returncode, r.stdout.strip()[-200:], r.stderr.strip()[-400:], flush=True)
