"""The store and windows that the read-ahead tests share: episodes of
several lengths (one empty, one of a single frame) with a camera and fast
streams, the windows asked of them, an epoch's batches and their
comparison, bit for bit."""

import torch

from robocache.data import EpisodeStore, WindowSampler

MS = 1_000_000


def make_store(seed=0):
    """Episodes of several lengths (one empty, one of a single frame), a
    camera at 10 Hz and a fast stream with repeated times and a drop-out."""
    g = torch.Generator().manual_seed(seed)
    episodes = []
    for e, n in enumerate((9, 1, 0, 14, 5)):
        t = torch.arange(n) * 100 * MS
        fast = torch.sort(torch.randint(0, max(1, n) * 100, (4 * n,), generator=g)).values * MS
        fast[fast.numel() // 2 :] += 150 * MS  # a gap of 150 ms
        episodes.append(
            {
                "cam": (torch.randint(0, 256, (n, 3, 4, 2), generator=g, dtype=torch.uint8), t),
                "joints": (torch.randn(4 * n, 3, generator=g, dtype=torch.float64), fast),
                "force": (torch.randn(4 * n, 2, generator=g).to(torch.bfloat16), fast),
                "anchor": (torch.zeros(n, 1), t),
            }
        )
    return EpisodeStore.from_episodes(episodes, progress=False)


DELTAS = {
    "cam": [-0.1, 0.0, 0.05],
    "joints": [-0.12, 0.0, 0.03, 0.2],
    "force": [-0.05, 0.0],
}


def epoch(store, modes, read_ahead, **kw):
    sampler = WindowSampler(
        store, DELTAS, modes=modes, anchor="anchor", batch_size=4, seed=3, key_age=True,
        read_ahead=read_ahead, **kw,
    )  # fmt: skip
    return [{k: v.clone() for k, v in b.items()} for b in sampler]


def same_batches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key].device == b[key].device, key
            assert torch.equal(a[key].view(torch.uint8) if a[key].dtype == torch.bfloat16 else a[key],
                               b[key].view(torch.uint8) if b[key].dtype == torch.bfloat16 else b[key]), key  # fmt: skip
