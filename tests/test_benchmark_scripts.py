"""The profiling scripts in benchmark/ stay runnable: each answers --help, and
where no GPU with robocache's CUDA kernels is present it says so and exits
instead of failing with a traceback."""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers import run_session

import robocache

BENCHMARK = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmark")
SCRIPTS = ["bwd_kernels.py", "voxel_kernels.py", "ncu_cases.py"]
ALL_SCRIPTS = SCRIPTS + ["sampler.py", "ingest.py", "e2e.py"]


def _run(script, *args):
    return subprocess.run(
        [sys.executable, os.path.join(BENCHMARK, script), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_help(script):
    r = _run(script, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: " + script), r.stdout


@pytest.mark.skipif(
    torch.cuda.is_available() and robocache.is_cuda_available(),
    reason="a GPU is present: the scripts would run in full",
)
@pytest.mark.parametrize("script", SCRIPTS)
def test_without_gpu_exits_clearly(script):
    r = _run(script)
    assert r.returncode == 1
    assert "Traceback" not in r.stderr, r.stderr
    assert "needs a CUDA GPU" in r.stderr or "built without CUDA kernels" in r.stderr, r.stderr


def test_ncu_cases_rejects_unknown_kind():
    r = _run("ncu_cases.py", "resampel")
    assert r.returncode == 2
    assert "'resampel'" in r.stderr and "resample, fuse, voxelize" in r.stderr, r.stderr


def test_sampler_benchmark_runs_small_on_any_device(tmp_path):
    # The sampler benchmark runs where it is (a GPU or the CPU); --small is its smoke run.
    out = tmp_path / "rows.json"
    r = _run(
        "sampler.py",
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


def test_ingest_benchmark_runs_small(tmp_path):
    out = tmp_path / "rows.json"
    r = _run("ingest.py", "--small", "--json", str(out))
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


def test_e2e_benchmark_runs_small(tmp_path):
    out = tmp_path / "rows.json"
    r = _run(
        "e2e.py", "--small", "--device", "cpu", "--policy", "small", "--workers", "0",
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


def test_e2e_benchmark_refuses_no_blocks():
    r = _run("e2e.py", "--small", "--device", "cpu", "--blocks", "0")
    assert r.returncode == 2
    assert "--blocks must be >= 1; got 0" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_e2e_benchmark_runs_under_torchrun_with_two_ranks(tmp_path):
    out = tmp_path / "rows.json"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        os.path.join(BENCHMARK, "e2e.py"), "--small", "--device", "cpu", "--policy", "small",
        "--data", str(tmp_path / "data"), "--json", str(out),
    ]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    r = run_session(command, timeout=300, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["world_size"] == 2
    assert [row["pipeline"] for row in result["rows"]] == ["batch already on the GPU", "robocache"]
    for row in result["rows"]:
        assert len(row["step_s_per_rank"]) == 2 and all(t > 0 for t in row["step_s_per_rank"])
        assert row["samples_per_s"] > 0


def test_e2e_benchmark_runs_small_on_the_multi_rate_logs(tmp_path):
    pytest.importorskip("mcap_protobuf", reason="the mcap extra: pip install robocache[mcap]")
    out = tmp_path / "rows.json"
    r = _run(
        "e2e.py", "--dataset", "mcap", "--small", "--device", "cpu", "--policy", "dp",
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


def test_e2e_multi_rate_peer_cuts_the_samplers_windows(tmp_path):
    """The in-RAM peer of the MCAP variant must compute what robocache does,
    or the comparison means nothing."""
    pytest.importorskip("mcap_protobuf", reason="the mcap extra: pip install robocache[mcap]")
    sys.path.insert(0, BENCHMARK)
    try:
        import e2e_mcap
    finally:
        sys.path.remove(BENCHMARK)
    from robocache.data import WindowSampler, load_mcap

    paths = e2e_mcap.write_bags(tmp_path, episodes=2, seconds=2.0, size=8, seed=3)
    store = load_mcap(paths, e2e_mcap.TOPICS, progress=False)
    assert store[e2e_mcap.JOINTS].values.shape[1:] == (7,)
    assert store[e2e_mcap.CAMERA].values.shape[1:] == (8, 8, 3)
    sampler = WindowSampler(store, e2e_mcap.DELTAS, anchor=e2e_mcap.CAMERA)
    peer = e2e_mcap.PerSampleMultiRate(store)
    anchors = torch.arange(len(peer))
    ours = sampler.batch_at(anchors)
    theirs = torch.utils.data.default_collate([peer[i] for i in anchors.tolist()])
    for key in e2e_mcap.DELTAS:
        assert torch.equal(ours[f"{key}_is_pad"], theirs[f"{key}_is_pad"]), key
        assert torch.equal(ours[key], theirs[key]), key
    assert ours[f"{e2e_mcap.JOINTS}_is_pad"].any()  # the action chunk runs past the ends
    batch = e2e_mcap.policy_batch(ours)
    assert batch["observation.state"].shape == (len(peer), 2, e2e_mcap.STATE_DIM)
    assert batch["action"].shape == (len(peer), 16, 7)
