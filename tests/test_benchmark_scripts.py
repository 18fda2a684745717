"""The scripts in benchmark/ stay runnable: each answers --help, the GPU-only
ones say so and exit where no GPU with robocache's CUDA kernels is present,
and the others run small on the CPU.

They run as ``python -m benchmark.<script>`` from a folder holding only the
``benchmark`` package (a link to the checkout's, which finds the tests'
writers through it), so that ``robocache`` is the package under test, not the
checkout's sources. A ``tests`` package installed by another distribution
(mcap-protobuf-support 0.5 ships one) is on the path, as a user's may be."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import run_session

import robocache

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GPU_ONLY = [("ops", "kernels"), ("ops", "ncu")]
SCRIPTS = [
    "ops", "sampler", "ingest", "e2e", "tiers", "loader_check", "frames", "mixture", "augment",
]  # fmt: skip


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder where ``benchmark`` imports, and nothing else of the checkout."""
    folder = tmp_path_factory.mktemp("benchmarks")
    os.symlink(os.path.join(ROOT, "benchmark"), folder / "benchmark")
    (folder / "tests").mkdir()
    (folder / "tests" / "__init__.py").write_text("")  # another distribution's, shadowing
    return folder


def _needs(extra, *modules):
    """Skips, naming the extra, where one of the modules does not import."""
    for module in modules:
        pytest.importorskip(module, reason=f"the {extra} extra: pip install robocache[{extra}]")


def _command(script, *args):
    return [sys.executable, "-m", f"benchmark.{script}", *args]


def _run(workdir, script, *args):
    return subprocess.run(
        _command(script, *args), capture_output=True, text=True, timeout=300, cwd=workdir
    )


@pytest.mark.parametrize("script", SCRIPTS)
def test_help(workdir, script):
    r = _run(workdir, script, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"usage: python -m benchmark.{script}"), r.stdout


@pytest.mark.skipif(
    torch.cuda.is_available() and robocache.is_cuda_available(),
    reason="a GPU is present: the scripts would run in full",
)
@pytest.mark.parametrize("script", GPU_ONLY)
def test_without_gpu_exits_clearly(workdir, script):
    r = _run(workdir, *script)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr, r.stderr
    assert "needs a CUDA GPU" in r.stderr or "built without CUDA kernels" in r.stderr, r.stderr


def test_ncu_cases_rejects_unknown_kind(workdir):
    r = _run(workdir, "ops", "ncu", "resampel")
    assert r.returncode == 2
    assert "'resampel'" in r.stderr and "resample, fuse, voxelize" in r.stderr, r.stderr


def test_sampler_benchmark_runs_small_on_any_device(workdir, tmp_path):
    # The sampler benchmark runs where it is (a GPU or the CPU); --small is its smoke run.
    out = tmp_path / "rows.json"
    r = _run(
        workdir,
        "sampler",
        "--small",
        "--device",
        "cpu",
        "--workers",
        "0",
        "--batches",
        "2",
        "--loader-batches",
        "2",
        "--json",
        str(out),
    )
    assert r.returncode == 0, r.stderr

    rows = json.loads(out.read_text())["rows"]
    assert [row["case"] for row in rows] == ["lowdim", "cameras"]
    assert all(row["robocache_s"] > 0 and row["dataloader_0_workers_s"] > 0 for row in rows)


@pytest.mark.parametrize("form", ["raw", "jpeg"])
def test_loader_check_runs_small_on_the_cpu(workdir, tmp_path, form):
    if form == "jpeg":
        _needs("frames", "PIL", "simplejpeg")
    out = tmp_path / "rows.json"
    r = _run(
        workdir, "loader_check", "--small", "--device", "cpu", "--tiers", "cpu,mapped-warm",
        "--frames", form, "--busy", "--json", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(row["tier"], row["frames"]) for row in rows] == [("cpu", form), ("mapped-warm", form)]
    for row in rows:
        assert row["efficiency"] > 0 and len(row["block_efficiencies"]) == 2
        assert row["step_s"] > 0 and row["staged_step_s"] > 0
        assert len(row["block_slowest_next_s"]) == 2
        assert max(row["block_slowest_next_s"]) >= row["next_s"] > 0
        assert row["busy_staged"] is None and row["busy_fed"] is None  # no GPU to profile


def test_loader_check_refuses_a_tier_the_device_lacks(workdir):
    r = _run(workdir, "loader_check", "--small", "--device", "cpu", "--tiers", "pinned")
    assert r.returncode == 2
    assert "--tiers: on cpu" in r.stderr and "'pinned'" in r.stderr, r.stderr


def test_ingest_benchmark_runs_small(workdir, tmp_path):
    _needs("all", "av", "pyarrow", "h5py", "zarr", "tfrecord", "PIL", "rosbags")
    out = tmp_path / "rows.json"
    r = _run(workdir, "ingest", "--small", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    formats = [row["format"] for row in rows]
    assert formats == ["LeRobot v3"] * 3 + [
        "robomimic HDF5",
        "Diffusion Policy zarr",
        "RLDS",
        "CALVIN",
        "ROS 2 bag",
    ]
    assert all(row["frames"] > 0 and row["frames_per_s"] > 0 for row in rows)
    assert rows[0]["per_sample_decode_frames_per_s"] > 0


def test_e2e_benchmark_runs_small(workdir, tmp_path):
    _needs("lerobot", "av", "pyarrow")
    out = tmp_path / "rows.json"
    r = _run(
        workdir, "e2e", "--small", "--device", "cpu", "--policy", "small", "--workers", "0",
        "--blocks", "2", "--json", str(out), "--md", str(tmp_path / "table.md"),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [row["pipeline"] for row in rows] == [
        "batch already on the GPU",
        "robocache",
        "lerobot-like, 0 workers",
        "ram, 0 workers",
    ]
    assert all(row["step_s"] > 0 and row["efficiency"] > 0 for row in rows)
    assert "| robocache |" in (tmp_path / "table.md").read_text()


def test_e2e_benchmark_refuses_no_blocks(workdir):
    r = _run(workdir, "e2e", "--small", "--device", "cpu", "--blocks", "0")
    assert r.returncode == 2
    assert "--blocks must be >= 1; got 0" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_e2e_benchmark_runs_under_torchrun_with_two_ranks(workdir, tmp_path):
    _needs("lerobot", "av", "pyarrow")
    out = tmp_path / "rows.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        "-m", "benchmark.e2e", "--small", "--device", "cpu", "--policy", "small",
        "--data", str(tmp_path / "data"), "--json", str(out),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    r = run_session(command, timeout=300, env=env, cwd=workdir)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert [row["pipeline"] for row in result["rows"]] == ["batch already on the GPU", "robocache"]
    for row in result["rows"]:
        assert len(row["step_s_per_rank"]) == 2 and all(t > 0 for t in row["step_s_per_rank"])
        assert row["samples_per_s"] > 0


def test_e2e_benchmark_runs_small_on_the_multi_rate_logs(workdir, tmp_path):
    _needs("mcap", "mcap_protobuf", "PIL")
    out = tmp_path / "rows.json"
    r = _run(
        workdir, "e2e", "--dataset", "mcap", "--small", "--device", "cpu", "--policy", "dp",
        "--workers", "0", "--json", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    result = json.loads(out.read_text())
    assert result["dataset"] == "mcap"
    assert [row["pipeline"] for row in result["rows"]] == [
        "batch already on the GPU",
        "robocache",
        "ram, 0 workers",
    ]
    assert all(row["step_s"] > 0 and row["efficiency"] > 0 for row in result["rows"])


def test_e2e_multi_rate_peer_cuts_the_samplers_windows(workdir, tmp_path, monkeypatch):
    """The in-RAM peer of the MCAP variant must compute what robocache does,
    or the comparison means nothing."""
    _needs("mcap", "mcap_protobuf", "PIL")
    monkeypatch.syspath_prepend(str(workdir))  # the benchmark package, in this process
    from fixtures.mcap import write_robot_logs

    from benchmark import e2e_loaders as e2e
    from robocache.data import WindowSampler, load_mcap

    paths = write_robot_logs(tmp_path, episodes=2, seconds=2.0, size=8, rates=e2e.LOG_RATES, seed=3)
    store = load_mcap(paths, e2e.LOG_TOPICS, progress=False)
    assert store[e2e.JOINTS].values.shape[1:] == (7,)
    assert store[e2e.CAMERA].values.shape[1:] == (8, 8, 3)
    sampler = WindowSampler(store, e2e.LOG_DELTAS, anchor=e2e.CAMERA)
    peer = e2e.PerSampleMultiRate(store)
    anchors = torch.arange(len(peer))
    ours = sampler.batch_at(anchors)
    theirs = torch.utils.data.default_collate([peer[i] for i in anchors.tolist()])
    for key in e2e.LOG_DELTAS:
        assert torch.equal(ours[f"{key}_is_pad"], theirs[f"{key}_is_pad"]), key
        assert torch.equal(ours[key], theirs[key]), key
    assert ours[f"{e2e.JOINTS}_is_pad"].any()  # the action chunk runs past the ends
    batch = e2e.log_policy_batch(ours)
    assert batch["observation.state"].shape == (len(peer), 2, e2e.LOG_STATE_DIM)
    assert batch["action"].shape == (len(peer), 16, 7)


def test_tiers_benchmark_runs_small_on_the_cpu(workdir, tmp_path):
    out = tmp_path / "rows.json"
    forms = ["raw", "jpeg"] if importlib.util.find_spec("PIL") else ["raw"]
    r = _run(
        workdir, "tiers", "--small", "--device", "cpu", "--policy", "small",
        "--tiers", "cpu,mapped-cold", "--frames", ",".join(forms), "--json", str(out),
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [(row["policy"], row["tier"], row["frames"]) for row in rows] == [
        ("small", tier, form) for form in forms for tier in ("cpu", "mapped-cold")
    ]
    assert rows[1]["placement"]["observation.images.cam0"] == "mapped"
    r = _run(workdir, "tiers", "--small", "--device", "cpu", "--tiers", "cpu", "--frames", "webp")
    assert r.returncode == 2 and "--frames: raw, jpeg or raw,jpeg" in r.stderr, r.stderr
    assert all(row["efficiency"] > 0 and row["windows_per_s"] > 0 for row in rows)
    r = _run(workdir, "tiers", "--small", "--device", "cpu", "--tiers", "gpu")
    assert r.returncode == 2 and "need a CUDA device" in r.stderr, r.stderr


def test_frames_benchmark_runs_small(workdir, tmp_path):
    _needs("frames", "PIL")
    out = tmp_path / "rows.json"
    r = _run(workdir, "frames", "--small", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert {"pil", "robocache-host"} <= {row["decoder"] for row in rows}
    assert all(row["frames_per_s"] > 0 and row["raw_over_jpeg"] > 1 for row in rows)
    # Decoders with libjpeg's accurate IDCT and upsampling give Pillow's pixels;
    # the fast IDCT and nvJPEG (torchvision's CUDA decode) differ by design.
    exact = [
        row for row in rows if row["decoder"] not in ("simplejpeg-fastdct", "torchvision-cuda")
    ]
    assert exact and all(row["max_levels_from_pil"] == 0 for row in exact)


def test_mixture_benchmark_runs_small(workdir, tmp_path):
    out = tmp_path / "rows.json"
    r = _run(workdir, "mixture", "--small", "--device", "cpu", "--json", str(out))
    assert r.returncode == 0, r.stderr
    row = json.loads(out.read_text())["rows"][0]
    assert row["single_ms"] > 0 and row["mixture_ms"] > 0
    assert abs(sum(row["drawn_shares"]) - 1) < 1e-6 and len(row["weights"]) == 3


def test_augment_benchmark_runs_small(workdir, tmp_path):
    out = tmp_path / "rows.json"
    r = _run(workdir, "augment", "--small", "--device", "cpu", "--json", str(out))
    assert r.returncode == 0, r.stderr
    rows = json.loads(out.read_text())["rows"]
    assert rows[0]["what"] == "augment, robocache" and rows[0]["ms"] > 0
