"""python -m robocache.bench as a user runs it: help, errors that say what
is wrong, every kind on every device, --shape, progress, verdicts, the
spread of every timing, JSON and the plot. Small sizes on the CPU: timings
are not checked, only that each row holds one, and that a backward is timed
on its own (a difference of two timings came out negative)."""

import io
import json
import subprocess
import sys

import pytest
import torch

import robocache
from robocache import reference
from robocache.bench import KINDS, cases, parse_shape, plot, print_table, verdict
from robocache.bench.cases import Context, suite
from robocache.bench.cli import main
from robocache.bench.report import figure, legend
from robocache.bench.timing import (
    NOISY_SPREAD_PCT,
    Timing,
    backward_call,
    make_row,
    repeat_ms,
    spreads,
)


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


BENCH_EXTRA = "the plot needs matplotlib: pip install robocache[bench]"


def test_own_shapes_run_with_progress_a_verdict_spreads_and_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    shapes = [
        "resample:2,50,20,3",
        "backward:2,30,20,2",
        "fuse:2,10,20x3,30x2",
        "voxelize:1,500,8,mean,2",
    ]
    args = ["--device", "cpu", "--json", str(out)]
    for spec in shapes:
        args += ["--shape", spec]
    assert main(args) == 0
    captured = capsys.readouterr()
    assert "[1/4] resample ..." in captured.err and "[4/4] voxelize" in captured.err
    result = json.loads(out.read_text())
    rows = result["rows"]
    assert [r["kind"] for r in rows] == ["resample", "resample_backward", "fuse", "voxelize"]
    assert rows[0]["case"] == "resample fwd (B=2, S=50, T=20, D=3) float32"
    for r in rows:
        for name in ("robocache", "eager", "compiled", "same_bytes_copy"):
            assert r[f"{name}_ms"] > 0
            assert r[f"{name}_spread_pct"] >= 0  # every timing reports its spread
        assert r["noisy"] == any(v > result["noisy_spread_pct"] for v in spreads(r).values())
        assert verdict(r) in captured.out
        assert r["case"] in captured.out  # whole
    assert "than torch.compile" in captured.out
    for line in legend("cpu"):
        assert line in captured.out


def test_a_backward_is_timed_on_its_own(monkeypatch):
    """No forward runs inside a backward's timed calls: its time is measured,
    not a difference of two medians (which came out negative)."""
    calls = {"forward": 0, "backward": 0}

    def counted(fn, key):
        def wrapper(*args, **kwargs):
            calls[key] += 1
            return fn(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(robocache, "resample", counted(robocache.resample, "forward"))
    monkeypatch.setattr(reference, "resample", counted(reference.resample, "forward"))
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)  # no compiling in a test
    monkeypatch.setattr(torch.autograd, "grad", counted(torch.autograd.grad, "backward"))
    timed = []

    def repeat_ms(fn, device):
        before = dict(calls)
        for _ in range(4):
            fn()
        timed.append({key: calls[key] - before[key] for key in calls})
        return Timing(1.0, 0.0)

    monkeypatch.setattr(cases, "repeat_ms", repeat_ms)
    row = cases.bench_resample_backward(Context("cpu", 1.0), 2, 10, 5, 1, torch.float64)
    # robocache, eager, compiled: four backward passes each, no forward
    assert timed == [{"forward": 0, "backward": 4}] * 3
    assert row["robocache_ms"] == row["eager_ms"] == row["compiled_ms"] == 1.0


def test_backward_call_differentiates_without_running_the_forward_again():
    forwards = []

    def forward(values, times, query):
        forwards.append(1)
        return robocache.resample(values, times, query)

    sets = []
    for _ in range(2):
        values = torch.randn(2, 10, 3, dtype=torch.float64, requires_grad=True)
        times = torch.sort(torch.rand(2, 10, dtype=torch.float64), dim=1).values
        query = torch.sort(torch.rand(2, 5, dtype=torch.float64), dim=1).values
        sets.append(
            ((values, times, query.requires_grad_()), torch.randn(2, 5, 3, dtype=torch.float64))
        )
    call = backward_call(forward, sets)
    assert len(forwards) == 2  # once a set, before any timed call
    for i in range(4):
        (values, times, query), grad = sets[i % 2]
        expected = torch.autograd.grad(
            robocache.resample(values, times, query), (values, query), grad
        )
        got = call()
        assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert len(forwards) == 2


def test_timings_report_their_spread():
    timing = repeat_ms(lambda: sum(range(1000)), "cpu", min_time_s=0.05)
    assert timing.ms > 0 and timing.spread_pct >= 0
    assert Timing.of_quartiles(0.9, 1.0, 1.2) == pytest.approx((1.0, 30.0))


def _result(rows):
    return {"device": "cpu", "torch": "2.x", "threads": 2, "copy_GBps": 10.0, "date": "today"} | {
        "rows": rows
    }


FUSE_NAME = "fuse (B=256, streams (S,D)=[(90, 512), (300, 32), (3000, 16)], T=150) float32"


def _row(name, spread):
    timing = Timing(1.0, spread)
    row = make_row(name, "fuse", "bytes", 10**6, timing, Timing(3.0, 1.0), Timing(2.0, 1.0), 10.0)
    row.update(same_bytes_copy_ms=0.5, same_bytes_copy_spread_pct=1.0, pct_of_same_bytes_copy=50.0)
    return row


def test_the_table_names_whole_cases_spreads_flags_and_its_legend():
    table = io.StringIO()
    print_table(_result([_row(FUSE_NAME, 2.0), _row("resample", NOISY_SPREAD_PCT + 5)]), table)
    lines = table.getvalue().splitlines()
    fuse = next(line for line in lines if line.startswith(FUSE_NAME + " "))
    assert "2%" in fuse and "noisy" not in fuse
    noisy = next(line for line in lines if line.startswith("resample "))
    assert f"{NOISY_SPREAD_PCT + 5:.0f}%" in noisy and noisy.endswith("! noisy")
    assert any(line.startswith("%copy: ") and "large copy in host memory" in line for line in lines)
    assert "device-to-device" not in table.getvalue()  # the run was on the CPU
    assert any(
        line.startswith("! noisy: ") and f"over {NOISY_SPREAD_PCT:.0f}%" in line for line in lines
    )


def test_the_plot_labels_every_case_whole(tmp_path):
    pytest.importorskip("matplotlib", reason=BENCH_EXTRA)
    result = _result(
        [_row(FUSE_NAME, 2.0), _row("resample fwd (B=2, S=50, T=20, D=3) float32", 2.0)]
    )
    fig = figure(result)
    fig.canvas.draw()
    width = fig.bbox.width
    (ax,) = fig.axes
    labels = ax.get_yticklabels()
    assert [label.get_text().replace("\n", " ") for label in labels] == [
        r["case"] for r in result["rows"]
    ]
    for label in labels:
        box = label.get_window_extent()
        assert 0 <= box.x0 and box.x1 <= width, label.get_text()  # inside the figure
    path = tmp_path / "bench.png"
    assert plot(result, str(path))
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_matplotlib_the_plot_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert not plot(_result([_row(FUSE_NAME, 2.0)]), str(tmp_path / "bench.png"))
    assert "pip install robocache[bench]" in capsys.readouterr().err
    assert not (tmp_path / "bench.png").exists()


def test_robocache_only_times_no_reference(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason=BENCH_EXTRA)
    out = tmp_path / "b.json"
    main(
        ["--device", "cpu", "--robocache-only", "--shape", "backward:2,30,20,2", "--json", str(out)]
    )
    (row,) = json.loads(out.read_text())["rows"]
    assert row["kind"] == "resample_backward" and row["compiled_ms"] is None
    assert row["robocache_ms"] > 0 and row["compiled_spread_pct"] is None
    assert out.with_suffix(".png").exists()
