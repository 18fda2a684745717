"""python -m robocache.bench as a user runs it: help, errors that say what
is wrong, every kind on every device, --shape, progress, verdicts, JSON and
the plot. Small sizes on the CPU: timings are not checked, only that each
row holds one."""

import json
import subprocess
import sys

import pytest
import torch

from robocache.bench import KINDS, parse_shape, verdict
from robocache.bench.cases import Context, suite
from robocache.bench.cli import main


def _bench(*args):
    return subprocess.run(
        [sys.executable, "-m", "robocache.bench", *args], capture_output=True, text=True
    )


def test_help_is_plain_and_every_option_explains_itself():
    r = _bench("--help")
    assert r.returncode == 0
    assert "``" not in r.stdout and ":func:" not in r.stdout
    for option in ("--device", "--only", "--shape", "--json", "--png", "--robocache-only"):
        line = next(x for x in r.stdout.splitlines() if x.strip().startswith(option))
        assert len(line.split()) > 2 or option == "--device", line  # a help text beside it
    assert "where to run" in r.stdout
    assert "resample:B,S,T,D" in r.stdout and "fuse:B,T,SxD" in r.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_a_gpu_says_so():
    r = _bench("--device", "cuda")
    assert r.returncode == 2
    assert "--device cuda" in r.stderr and "no CUDA device" in r.stderr
    assert "Traceback" not in r.stderr


def test_every_kind_has_a_case_on_the_cpu():
    kinds = {kind for kind, _ in suite(Context("cpu", 1.0, references=False))}
    assert kinds == set(KINDS)


@pytest.mark.parametrize(
    "spec, kind, args",
    [
        ("resample:4,100,50,3", "resample", (4, 100, 50, 3, torch.float32)),
        ("backward:2,10,5,1,float64", "backward", (2, 10, 5, 1, torch.float64)),
        ("fuse:8,30,90x5,300x2", "fuse", (8, [(90, 5), (300, 2)], 30)),
        ("voxelize:2,1000,16", "voxelize", (2, 1000, 16, "count", 6)),
        ("voxelize:2,1000,16,max,3", "voxelize", (2, 1000, 16, "max", 3)),
    ],
)
def test_shapes_parse(spec, kind, args):
    assert parse_shape(spec) == (kind, args)


@pytest.mark.parametrize(
    "spec, says",
    [
        ("resample", "expected KIND:SIZES"),
        ("interp:1,2,3,4", "expected KIND:SIZES"),
        ("resample:4,100,50", "resample:B,S,T,D"),
        ("resample:4,100,0,3", "T must be a positive integer, got '0'"),
        ("resample:4,100,5.5,3", "T must be a positive integer"),
        ("resample:4,100,50,3,int8", "DTYPE must be one of"),
        ("fuse:8,30", "fuse:B,T,SxD"),
        ("fuse:8,30,90by5", "a stream is SxD"),
        ("fuse:8,30,90x-1", "a stream's D must be a positive integer"),
        ("voxelize:2,1000", "voxelize:B,N,G"),
        ("voxelize:2,1000,16,avg", "REDUCE must be one of"),
    ],
)
def test_bad_shapes_name_the_spec_and_the_part(spec, says):
    with pytest.raises(ValueError) as e:
        parse_shape(spec)
    assert repr(spec) in str(e.value) and says in str(e.value)


def test_bad_arguments_exit_with_a_message():
    r = _bench("--only", "fuse,interp")
    assert r.returncode == 2 and "--only: unknown kind(s) ['interp']" in r.stderr
    r = _bench("--shape", "fuse:8,30")
    assert r.returncode == 2 and "fuse:B,T,SxD" in r.stderr
    r = _bench("--only", "fuse", "--shape", "resample:1,2,3,4")
    assert r.returncode == 2 and "do not go together" in r.stderr


def test_verdict_says_faster_or_slower_than_compile():
    row = {"robocache_ms": 1.0, "compiled_ms": 1.31}
    assert verdict(row) == "faster, 1.31x"
    assert verdict({"robocache_ms": 1.0, "compiled_ms": 0.8}) == "SLOWER, 0.80x"
    assert verdict({"robocache_ms": 1.0, "compiled_ms": None}) is None
    graphs = {**row, "graph_robocache_ms": 2.0, "graph_compiled_ms": 3.0}
    assert verdict(graphs, graphs=True) == "faster, 1.50x"


def test_own_shapes_run_with_progress_a_verdict_json_and_a_plot(tmp_path, capsys):
    out = tmp_path / "bench.json"
    shapes = ["resample:2,50,20,3", "fuse:2,10,20x3,30x2", "voxelize:1,500,8,mean,2"]
    args = ["--device", "cpu", "--json", str(out)]
    for spec in shapes:
        args += ["--shape", spec]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "[1/3] resample ..." in captured.err and "[3/3] voxelize" in captured.err
    rows = json.loads(out.read_text())["rows"]
    assert [r["kind"] for r in rows] == ["resample", "fuse", "voxelize"]
    assert rows[0]["case"] == "resample fwd (B=2, S=50, T=20, D=3) float32"
    for r in rows:
        assert r["robocache_ms"] > 0 and r["compiled_ms"] > 0 and r["eager_ms"] > 0
        assert verdict(r) in captured.out
    assert "than torch.compile" in captured.out
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_robocache_only_times_no_reference(tmp_path, capsys):
    out = tmp_path / "b.json"
    main(
        ["--device", "cpu", "--robocache-only", "--shape", "backward:2,30,20,2", "--json", str(out)]
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["kind"] == "resample_backward" and row["compiled_ms"] is None
    assert out.with_suffix(".png").exists()
