import torch, triton, robocache
from robocache import reference
dev = "cuda"
print(torch.cuda.get_device_name(), torch.__version__)
x = torch.empty(1 << 28, device=dev); y = torch.empty_like(x)
ms = triton.testing.do_bench(lambda: y.copy_(x), return_mode="median")
copy_bw = 2 * x.numel() * 4 / ms / 1e6
print(f"copy {copy_bw:.0f} GB/s")
for (B, S, T, D, dt) in [(256, 2048, 2048, 64, torch.float32), (256, 2048, 2048, 64, torch.bfloat16),
                         (64, 4096, 1024, 32, torch.float32), (1024, 500, 100, 14, torch.float32), (4, 10, 20, 8, torch.float32)]:
    v = torch.randn(B, S, D, device=dev).to(dt)
    t = torch.sort(torch.rand(B, S, device=dev) * 10, dim=1).values
    q = torch.sort(torch.rand(B, T, device=dev) * 10, dim=1).values
    f = lambda: robocache.resample(v, t, q)
    r = lambda: reference.resample(v, t, q)
    c = torch.compile(reference.resample)
    c(v, t, q)
    mr = triton.testing.do_bench(f, return_mode="median")
    me = triton.testing.do_bench(r, return_mode="median")
    mc = triton.testing.do_bench(lambda: c(v, t, q), return_mode="median")
    nbytes = v.numel() * v.element_size() + t.numel() * 4 + q.numel() * 4 + B * T * D * v.element_size()
    print(f"{(B,S,T,D,str(dt))}: robocache {mr*1e3:.1f} us ({nbytes/mr/1e6:.0f} GB/s, {nbytes/mr/1e6/copy_bw*100:.0f}% copy) eager {me*1e3:.1f} us compile {mc*1e3:.1f} us")
    vg = v.detach().requires_grad_(); qg = q.clone().requires_grad_()
    o = robocache.resample(vg, t, qg); g = torch.randn_like(o)
    mb = triton.testing.do_bench(lambda: torch.autograd.grad(o, (vg, qg), g, retain_graph=True), return_mode="median")
    print(f"   backward robocache {mb*1e3:.1f} us")
