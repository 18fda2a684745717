"""robocache demo: resample multi-rate robot streams onto a control timeline.

Generates a batch of synthetic episodes in memory (no download): joint states
at ~100 Hz and actions at ~30 Hz on jittered clocks with nanosecond int64
stamps, then resamples both onto a 50 Hz control timeline with robocache and
with the pure-PyTorch reference, checks they agree, and times both.
"""
import time

import torch

import robocache


def episode_batch(B, seconds, rate_hz, D, device, jitter=0.1, start_spread_s=0.05):
    """(values, int64 ns times, lengths) for B episodes of one stream."""
    S = int(seconds * rate_hz)
    period_ns = 1e9 / rate_hz
    gaps = period_ns * (1 + jitter * (2 * torch.rand(B, S, device=device) - 1))
    start = (torch.rand(B, 1, device=device) * start_spread_s * 1e9)
    times = (start + torch.cumsum(gaps.double(), dim=1)).long()
    phase = torch.linspace(0, 6.28 * seconds, S, device=device)
    values = torch.sin(phase[None, :, None] * torch.rand(1, 1, D, device=device) * 3)
    values = values + 0.01 * torch.randn(B, S, D, device=device)
    lengths = S - torch.randint(0, S // 10 + 1, (B,), device=device)  # episodes end early
    return values, times, lengths


def timed(fn, device, reps=20):
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) / reps * 1e3


def main():
    device = "cuda" if torch.cuda.is_available() and robocache.is_cuda_available() else "cpu"
    torch.manual_seed(0)
    B, seconds = 64, 10.0
    joints, joints_t, joints_len = episode_batch(B, seconds, 100, 14, device)
    actions, actions_t, actions_len = episode_batch(B, seconds, 30, 7, device)
    control_t = (torch.arange(int(seconds * 50), device=device) * 2e7 + 5e7).long()  # 50 Hz, ns
    print(f"device: {device}; torch {torch.__version__}")
    print(f"{B} episodes: joints {tuple(joints.shape)} @~100 Hz, actions {tuple(actions.shape)} "
          f"@~30 Hz, int64 ns clocks with 10% jitter -> {control_t.numel()} control steps @ 50 Hz")
    for name, values, times, lengths, mode in [
            ("joints  (linear)  ", joints, joints_t, joints_len, "linear"),
            ("actions (previous)", actions, actions_t, actions_len, "previous")]:
        out, ms = timed(lambda: robocache.resample(values, times, control_t, lengths, mode), device)
        ref, ref_ms = timed(
            lambda: robocache.reference.resample(values, times, control_t, lengths, mode), device)
        err = (out - ref).abs().max().item()
        print(f"  {name}: -> {tuple(out.shape)}  robocache {ms:7.3f} ms   "
              f"pytorch reference {ref_ms:7.3f} ms   max |diff| {err:.2e}")
        assert err < 1e-5, "robocache and the reference disagree"


if __name__ == "__main__":
    main()
