"""The benchmark's report: the table on stdout, the verdict of each row,
and a plot."""

import sys
import textwrap

from .timing import NOISY_SPREAD_PCT, noisy


def verdict(row, graphs=False):
    """'faster, 1.31x' or 'slower, 0.89x': robocache against the compiled
    reference (under CUDA graphs with `graphs`); None where not measured."""
    ours, theirs = row["robocache_ms"], row["compiled_ms"]
    if graphs:
        ours, theirs = row.get("graph_robocache_ms"), row.get("graph_compiled_ms")
    if not ours or not theirs:
        return None
    ratio = theirs / ours
    return f"{'faster' if ratio >= 1 else 'SLOWER'}, {ratio:.2f}x"


def _ms(x, width=10):
    return f"{x:{width}.4f}" if x else f"{'-':>{width}}"


def _spread(x):
    return f"{x:4.0f}%" if x is not None else f"{'':>5}"


def _timed(row, name):
    """A time (ms) and the spread of its repeats: two columns."""
    return f"{_ms(row.get(f'{name}_ms'))} {_spread(row.get(f'{name}_spread_pct'))}"


SUB_ROWS = ("   per call from Python", "   under CUDA graphs", "   a copy moving the same bytes")


def print_table(result, file=None):
    out = file or sys.stdout
    rows = result["rows"]
    # Names are never cut: the first column is as wide as the longest.
    width = max([len(r["case"]) for r in rows] + [len(x) for x in SUB_ROWS] + [4])
    threshold = result.get("noisy_spread_pct", NOISY_SPREAD_PCT)
    blank = f"{'':>10} {'':>5}"
    print(
        f"device: {result['device']}  torch {result['torch']}  threads {result['threads']}  "
        f"copy {result['copy_GBps']:.0f} GB/s  ({result['date']})",
        file=out,
    )
    print(
        f"{'case':<{width}} {'robocache':>10} {'±':>5} {'eager':>10} {'±':>5} "
        f"{'compiled':>10} {'±':>5} {'GB/s':>7} {'%copy':>6} {'x eager':>8}  than torch.compile",
        file=out,
    )

    for r in rows:
        xe = f"{r['speedup_vs_eager']:8.2f}" if r["speedup_vs_eager"] else f"{'-':>8}"
        flag = "  ! noisy" if noisy(r) else ""
        print(
            f"{r['case']:<{width}} {_timed(r, 'robocache')} {_timed(r, 'eager')} "
            f"{_timed(r, 'compiled')} {r['GBps']:7.0f} {r['pct_of_copy']:6.1f} {xe}  "
            f"{verdict(r) or '-'}{flag}",
            file=out,
        )
        if "per_call_robocache_ms" in r:
            print(
                f"{SUB_ROWS[0]:<{width}} {_timed(r, 'per_call_robocache')} "
                f"{_timed(r, 'per_call_eager')} {_timed(r, 'per_call_compiled')} "
                f"{'':>7} {'':>6} {'':>8}  {r['per_call_speedup_vs_compiled']:.2f}x",
                file=out,
            )
        if r.get("graph_robocache_ms") or r.get("graph_compiled_ms"):
            print(
                f"{SUB_ROWS[1]:<{width}} {_timed(r, 'graph_robocache')} {blank} "
                f"{_timed(r, 'graph_compiled')} {'':>7} {'':>6} {'':>8}  "
                f"{verdict(r, graphs=True) or '-'}",
                file=out,
            )
        if "same_bytes_copy_ms" in r:
            print(
                f"{SUB_ROWS[2]:<{width}} {_timed(r, 'same_bytes_copy')} {blank} {blank} "
                f"{'':>7} {r['pct_of_same_bytes_copy']:6.1f}",
                file=out,
            )
        if "Gpts_per_s" in r:
            print(
                f"{'   points':<{width}} {r['Gpts_per_s']:10.2f} Gpts/s, "
                f"{100 * r['fraction_outside']:.0f}% outside the grid",
                file=out,
            )

    for line in legend(result["device"], threshold):
        print(line, file=out)


def copy_name(device):
    """What the copy that bandwidth is compared with is on `device` ("cpu",
    "cuda" or a GPU's name)."""
    return "copy in host memory" if device == "cpu" else "device-to-device copy"


def legend(device, threshold=NOISY_SPREAD_PCT):
    """The lines under the table that say what its columns are, for a run on
    `device` ("cpu", or the GPU's name as in a result's "device")."""
    return [
        "times: the median of each timing's repeats, in ms; ±: their spread, the interquartile "
        "range as a % of the median",
        f"! noisy: a timing of the row spreads over {threshold:.0f}%, too wide to trust the "
        "comparison; run it again on a quiet machine",
        "GB/s: the minimal bytes (inputs read once, outputs written once) over robocache's time",
        f"%copy: robocache's GB/s as a % of the GB/s of the large {copy_name(device)} (copy, "
        "first line)",
        "a copy moving the same bytes: a copy of the row's bytes, and robocache's GB/s as a % of "
        "its (short kernels cannot reach the large copy's GB/s)",
    ]


# The plot wraps a case's name at this many characters (it never cuts one).
LABEL_CHARS = 50


def figure(result):
    """The plot's figure: bars of robocache's speed over the compiled
    reference's (or of its time, where the references were not timed), one
    a row, each labelled with the row's whole name; needs matplotlib."""
    import matplotlib.pyplot as plt

    rows = result["rows"]
    names = [textwrap.fill(r["case"], LABEL_CHARS) for r in rows]
    lines = sum(name.count("\n") + 1 for name in names)
    fig, ax = plt.subplots(figsize=(10, 0.22 * lines + 0.25 * len(rows) + 1.6), dpi=120)
    at = range(len(rows))
    if all(r["compiled_ms"] for r in rows):
        ratios = [r["compiled_ms"] / r["robocache_ms"] for r in rows]
        colours = ["tab:green" if x >= 1 else "tab:red" for x in ratios]
        ax.barh(at, ratios, color=colours)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("torch.compile time / robocache time (right of 1: robocache is faster)")
    else:
        ax.barh(at, [r["robocache_ms"] for r in rows])
        ax.set_xlabel("robocache, ms (median)")
    ax.set_yticks(at, names)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{result['device']}, torch {result['torch']}, {result['date']}", fontsize=9)
    fig.tight_layout()
    return fig


def plot(result, path):
    """Writes figure(result) to `path`; says so and returns False where
    matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(
            f"no matplotlib here: no plot written to {path} (pip install robocache[bench])",
            file=sys.stderr,
        )
        return False
    fig = figure(result)
    fig.savefig(path)
    plt.close(fig)
    return True
