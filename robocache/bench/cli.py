"""The command line of ``python -m robocache.bench``."""

import argparse
import json
import sys
import textwrap
from pathlib import Path

import torch

from . import __doc__ as _doc
from . import run
from .cases import KINDS, SHAPE_HELP, parse_shape
from .report import plot, print_table


def _parser():
    parser = argparse.ArgumentParser(
        prog="python -m robocache.bench",
        description=textwrap.fill(" ".join(_doc.split("\n\n")[0].split()), 78),
        epilog=SHAPE_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cuda" if torch.cuda.is_available() else "cpu",
        help="where to run (default: cuda when a GPU is visible, else cpu)",
    )
    parser.add_argument(
        "--only",
        help=f"comma-separated kinds of the standard suite to run: {', '.join(KINDS)}",
    )
    parser.add_argument(
        "--shape",
        action="append",
        metavar="KIND:SIZES",
        help="time your own sizes instead of the suite (see below); repeatable",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results here as JSON")
    parser.add_argument(
        "--png",
        metavar="PATH",
        help="plot robocache against the compiled reference here (default: next to --json)",
    )
    parser.add_argument(
        "--robocache-only",
        action="store_true",
        help="time robocache alone (no eager or compiled reference)",
    )
    return parser


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.device == "cuda":
        import robocache

        if not torch.cuda.is_available():
            parser.error(
                f"--device cuda: torch {torch.__version__} sees no CUDA device "
                f"(torch.cuda.is_available() is False)"
            )
        if not robocache.is_cuda_available():
            parser.error(
                "--device cuda: this robocache was built without its CUDA kernels; rebuild it "
                "against a CUDA build of torch: FORCE_CUDA=1 pip install --no-build-isolation -e ."
            )
    only = None
    if args.only:
        only = set(args.only.split(","))
        unknown = only - set(KINDS)
        if unknown:
            parser.error(f"--only: unknown kind(s) {sorted(unknown)}; the kinds are {list(KINDS)}")
    if args.only and args.shape:
        parser.error("--only and --shape do not go together: --shape runs only its own sizes")
    shapes = []
    for spec in args.shape or []:
        try:
            shapes.append(parse_shape(spec))
        except ValueError as e:
            parser.error(str(e))

    def progress(line):
        print(line, file=sys.stderr, flush=True)

    result = run(args.device, only, shapes, references=not args.robocache_only, progress=progress)
    print_table(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    png = args.png or (str(Path(args.json).with_suffix(".png")) if args.json else None)
    if png:
        plot(result, png)
    return 0
