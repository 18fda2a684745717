"""The benchmark's report: the table on stdout, the verdict of each row,
and a plot."""

import sys


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


def print_table(result, file=None):
    out = file or sys.stdout
    print(
        f"device: {result['device']}  torch {result['torch']}  threads {result['threads']}  "
        f"copy {result['copy_GBps']:.0f} GB/s  ({result['date']})",
        file=out,
    )
    print(
        f"{'case':<58} {'robocache':>10} {'eager':>10} {'compiled':>10} {'GB/s':>7} "
        f"{'%copy':>6} {'x eager':>8}  than torch.compile",
        file=out,
    )

    for r in result["rows"]:
        xe = f"{r['speedup_vs_eager']:8.2f}" if r["speedup_vs_eager"] else f"{'-':>8}"
        print(
            f"{r['case'][:58]:<58} {_ms(r['robocache_ms'])} {_ms(r['eager_ms'])} "
            f"{_ms(r['compiled_ms'])} {r['GBps']:7.0f} {r['pct_of_copy']:6.1f} {xe}  "
            f"{verdict(r) or '-'}",
            file=out,
        )
        if "per_call_robocache_ms" in r:
            print(
                f"{'   per call from Python':<58} {_ms(r['per_call_robocache_ms'])} "
                f"{_ms(r['per_call_eager_ms'])} {_ms(r['per_call_compiled_ms'])} "
                f"{'':>7} {'':>6} {'':>8}  {r['per_call_speedup_vs_compiled']:.2f}x",
                file=out,
            )
        if r.get("graph_robocache_ms") or r.get("graph_compiled_ms"):
            print(
                f"{'   under CUDA graphs':<58} {_ms(r.get('graph_robocache_ms'))} {'':>10} "
                f"{_ms(r.get('graph_compiled_ms'))} {'':>7} {'':>6} {'':>8}  "
                f"{verdict(r, graphs=True) or '-'}",
                file=out,
            )
        if "same_bytes_copy_ms" in r:
            print(
                f"{'   a copy moving the same bytes':<58} {_ms(r['same_bytes_copy_ms'])} "
                f"{'':>10} {'':>10} {'':>7} {r['pct_of_same_bytes_copy']:6.1f}",
                file=out,
            )
        if "Gpts_per_s" in r:
            print(
                f"{'   points':<58} {r['Gpts_per_s']:10.2f} Gpts/s, "
                f"{100 * r['fraction_outside']:.0f}% outside the grid",
                file=out,
            )

    print(
        "times in ms (medians); GB/s from the minimal bytes: inputs read once, outputs written "
        "once;\n%copy: of the large copy above; under each row, a copy moving that row's bytes "
        "and the row's\ntime as a % of it (short kernels cannot reach the large copy's bandwidth)",
        file=out,
    )


def plot(result, path):
    """Bars of robocache's speed over the compiled reference's (or of its
    time, where the references were not timed); needs matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"no matplotlib here: no plot written to {path}", file=sys.stderr)
        return False
    rows = result["rows"]
    names = [r["case"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.6))
    if all(r["compiled_ms"] for r in rows):
        ratios = [r["compiled_ms"] / r["robocache_ms"] for r in rows]
        colours = ["tab:green" if x >= 1 else "tab:red" for x in ratios]
        ax.barh(names, ratios, color=colours)
        ax.axvline(1.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("torch.compile time / robocache time (right of 1: robocache is faster)")
    else:
        ax.barh(names, [r["robocache_ms"] for r in rows])
        ax.set_xlabel("robocache, ms (median)")
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=7)
    ax.set_title(f"{result['device']}, torch {result['torch']}, {result['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
