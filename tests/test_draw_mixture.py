"""robocache.draw_mixture: each window's store by weight and its anchor
within the store, hashed from its key, against the reference
(robocache.reference.draw_mixture) on fresh random tables, the same on the
CPU and the GPU, shares that follow the weights, and errors per argument."""

import pytest
import torch
from conftest import requires_cuda

import robocache
from robocache import reference

INT64_MAX = 2**63 - 1


def tables(S, generator, zero_every=3, device="cpu"):
    """Random weights (every `zero_every`-th store 0) and anchor counts."""
    weights = torch.rand(S, generator=generator, dtype=torch.float64) + 0.01
    weights[::zero_every] = 0.0 if S > 1 else weights[::zero_every]
    counts = torch.randint(1, 50, (S,), generator=generator)
    return weights.to(device), counts.to(device)


def base(key, device="cpu"):
    return torch.tensor([key], dtype=torch.int64, device=device)


@pytest.mark.parametrize("S", [1, 2, 5, 40])
def test_equals_the_reference(device, S):
    g = torch.Generator().manual_seed(S)
    weights, counts = tables(S, g, device=device)
    key = int(torch.randint(0, 2**62, (1,), generator=g))
    store, position = robocache.draw_mixture(base(key, device), 5000, weights, counts)
    ref_store, ref_position = reference.draw_mixture(base(key), 5000, weights.cpu(), counts.cpu())
    assert torch.equal(store.cpu(), ref_store) and torch.equal(position.cpu(), ref_position)
    assert (weights.cpu()[store.cpu()] > 0).all()
    starts = torch.cumsum(counts, 0) - counts
    within = position - starts[store]
    assert (within >= 0).all() and (within < counts[store]).all()


# Weights whose store boundary falls at key 51940's target: the store is
# decided by how the weights' sum is rounded (added in order, as the kernels
# do, it is 21; torch.sum's order gives 20).
BOUNDARY_KEY = 51940
BOUNDARY_WEIGHTS = [
    55.79561619780343, 11.145924396724238, 63.57629860200497, 82.8331729173077,
    54.20369408672252, 72.72442549870216, 39.64049714070923, 17.11276421935922,
    91.42196688866906, 38.28028272137322, 21.4161619900316, 20.501730728846713,
    98.41613323297923, 28.423029767056505, 29.32578226181617, 15.947956160803034,
    39.51129457592856, 33.4049532787609, 87.34566329398025, 98.7241515975567,
    2204.4997883785927, 18.854680626879716, 21.408435127808445, 39.990896479495255,
    18.241199487660165, 31.7316272797476, 97.59828965228165, 35.97244209000689,
    21.49778506478448, 79.26840211380026, 7.248988804454681, 86.29250323538093,
    27.50570639379386, 55.723748759451944, 89.87212913962857, 75.58330204211143,
    30.01163703272033, 40.24659227756197, 58.35948879519551, 73.43396222974134,
]  # fmt: skip


def test_a_target_on_a_store_boundary_draws_as_the_reference(device):
    weights = torch.tensor(BOUNDARY_WEIGHTS, dtype=torch.float64)
    counts = torch.full((40,), 5)
    store, position = robocache.draw_mixture(
        base(BOUNDARY_KEY, device), 1, weights.to(device), counts.to(device)
    )
    ref_store, ref_position = reference.draw_mixture(base(BOUNDARY_KEY), 1, weights, counts)
    assert store.item() == ref_store.item() == 21 and position.item() == ref_position.item()


def test_shares_follow_the_weights_and_anchors_are_uniform():
    weights = torch.tensor([0.5, 0.0, 0.3, 0.2], dtype=torch.float64)
    counts = torch.tensor([10, 5, 7, 3])
    n = 60000
    store, position = robocache.draw_mixture(base(12345), n, weights, counts)
    observed = torch.bincount(store, minlength=4).double()
    assert observed[1] == 0
    # chi-square, 2 degrees of freedom (three stores drawn): p > 0.001
    expected = weights[[0, 2, 3]] * n
    assert ((observed[[0, 2, 3]] - expected) ** 2 / expected).sum() < 13.8
    # Within store 0 (10 anchors, positions 0..9): uniform, 9 degrees of freedom.
    within = torch.bincount(position[store == 0], minlength=10).double()
    assert within.numel() == 10
    assert ((within - within.mean()) ** 2 / within.mean()).sum() < 27.9
    # Store 3's anchors are positions 22..24.
    assert set(position[store == 3].tolist()) == {22, 23, 24}


def test_the_same_keys_draw_the_same_and_windows_are_the_keys_in_turn(device):
    weights, counts = tables(6, torch.Generator().manual_seed(0), device=device)
    a = robocache.draw_mixture(base(1000, device), 64, weights, counts)
    b = robocache.draw_mixture(base(1032, device), 32, weights, counts)
    assert torch.equal(a[0][32:], b[0]) and torch.equal(a[1][32:], b[1])
    c = robocache.draw_mixture(base(1001, device), 64, weights, counts)
    assert not torch.equal(a[1], c[1])


def test_keys_wrap_around_as_int64_does():
    weights, counts = tables(4, torch.Generator().manual_seed(1))
    across = robocache.draw_mixture(base(INT64_MAX - 3), 8, weights, counts)
    after = robocache.draw_mixture(base(-(2**63)), 4, weights, counts)
    assert torch.equal(across[0][4:], after[0]) and torch.equal(across[1][4:], after[1])
    ref = reference.draw_mixture(base(INT64_MAX - 3), 8, weights, counts)
    assert torch.equal(across[0], ref[0]) and torch.equal(across[1], ref[1])


def test_no_windows(device):
    weights, counts = tables(3, torch.Generator().manual_seed(2), device=device)
    store, position = robocache.draw_mixture(base(5, device), 0, weights, counts)
    assert store.shape == position.shape == (0,) and store.dtype == torch.int64


@requires_cuda
def test_cuda_equals_cpu_on_many_keys():
    g = torch.Generator().manual_seed(3)
    for S, key in ((1, None), (3, None), (64, None), (5, INT64_MAX - 50_000)):
        weights, counts = tables(S, g)
        if key is None:
            key = int(torch.randint(0, 2**62, (1,), generator=g))
        cpu = robocache.draw_mixture(base(key), 100_000, weights, counts)
        gpu = robocache.draw_mixture(base(key, "cuda"), 100_000, weights.cuda(), counts.cuda())
        assert torch.equal(gpu[0].cpu(), cpu[0]) and torch.equal(gpu[1].cpu(), cpu[1])


@requires_cuda
def test_a_cuda_graph_replays_new_keys():
    weights, counts = tables(5, torch.Generator().manual_seed(4), device="cuda")
    key = base(0, "cuda")
    robocache.draw_mixture(key, 256, weights, counts)  # warm-up outside the graph
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = robocache.draw_mixture(key, 256, weights, counts)
    for k in (7, 2**40 + 3):
        key.fill_(k)
        graph.replay()
        expected = robocache.draw_mixture(base(k), 256, weights.cpu(), counts.cpu())
        assert torch.equal(out[0].cpu(), expected[0]) and torch.equal(out[1].cpu(), expected[1])


def test_opcheck(device):
    weights, counts = tables(4, torch.Generator().manual_seed(5), device=device)
    torch.library.opcheck(
        torch.ops.robocache.draw_mixture.default, (base(9, device), 33, weights, counts)
    )


def test_fake_tensors_keep_symbolic_sizes():
    @torch.compile(backend="aot_eager", dynamic=True, fullgraph=True)
    def f(key, n, w, c):
        store, position = robocache.draw_mixture(key, n.shape[0], w, c)
        return store * 2, position + 1

    for n, S in ((10, 4), (17, 4), (17, 9)):
        w, c = tables(S, torch.Generator().manual_seed(n))
        store, position = f(base(3), torch.empty(n), w, c)
        expected = robocache.draw_mixture(base(3), n, w, c)
        assert torch.equal(store, expected[0] * 2) and torch.equal(position, expected[1] + 1)


F64 = torch.float64


@pytest.mark.parametrize(
    "args, error, message",
    [
        ((torch.tensor([1]), 4, torch.ones(2), torch.ones(2, dtype=torch.int64)), TypeError,
         "weights must be float64"),
        ((torch.tensor([1]), 4, torch.ones(2, 1, dtype=F64), torch.ones(2, dtype=torch.int64)),
         ValueError, r"weights must be 1-D \(S,\)"),
        ((torch.tensor([1]), 4, torch.ones(0, dtype=F64), torch.ones(0, dtype=torch.int64)),
         ValueError, "at least one store"),
        ((torch.tensor([1.0]), 4, torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64)),
         TypeError, "base must be int64"),
        ((torch.tensor([1, 2]), 4, torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64)),
         ValueError, r"base must hold one key"),
        ((torch.tensor([1]), 4, torch.ones(2, dtype=F64), torch.ones(3, dtype=torch.int64)),
         ValueError, r"counts must have one entry per store \(S = 2\)"),
        ((torch.tensor([1]), 4, torch.ones(2, dtype=F64), torch.ones(2)), TypeError,
         "counts must be int64"),
        ((torch.tensor([1]), -1, torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64)),
         ValueError, "batch_size must be an int >= 0"),
        ((torch.tensor([1]), 2.5, torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64)),
         ValueError, "batch_size must be an int >= 0"),
        ((torch.tensor([1]), 4, torch.zeros(2, dtype=F64), torch.ones(2, dtype=torch.int64)),
         ValueError, "weights must not all be 0"),
        ((torch.tensor([1]), 4, torch.tensor([1.0, -1.0], dtype=F64),
          torch.ones(2, dtype=torch.int64)), ValueError, r"weights\[1\] is -1"),
        ((torch.tensor([1]), 4, torch.tensor([1.0, float("nan")], dtype=F64),
          torch.ones(2, dtype=torch.int64)), ValueError, "weights must be finite"),
        ((torch.tensor([1]), 4, torch.ones(2, dtype=F64), torch.tensor([3, 0])), ValueError,
         r"store 1 has weight 1 but no anchors"),
        ((torch.tensor([1]), 4, torch.ones(2, dtype=F64), torch.tensor([3, -2])), ValueError,
         r"counts\[1\] is -2"),
        (([1], 4, torch.ones(2, dtype=F64), torch.ones(2, dtype=torch.int64)), TypeError,
         "base must be a torch.Tensor"),
    ],
)  # fmt: skip
def test_errors_name_the_argument(args, error, message):
    with pytest.raises(error, match=message):
        robocache.draw_mixture(*args)


def test_a_zero_weight_store_may_have_no_anchors(device):
    weights, counts = torch.tensor([0.0, 1.0, 0.0], dtype=F64), torch.tensor([0, 6, 0])
    store, position = robocache.draw_mixture(
        base(4, device), 100, weights.to(device), counts.to(device)
    )
    assert (store == 1).all() and position.min() >= 0 and position.max() <= 5
    ref_store, ref_position = reference.draw_mixture(base(4), 100, weights, counts)
    assert torch.equal(store.cpu(), ref_store) and torch.equal(position.cpu(), ref_position)


@requires_cuda
def test_cuda_rejects_tables_on_another_device():
    with pytest.raises(ValueError, match="counts must be on the same device as weights"):
        robocache.draw_mixture(
            base(1, "cuda"),
            4,
            torch.ones(2, dtype=F64, device="cuda"),
            torch.ones(2, dtype=torch.int64),
        )
