"""`python -m autotune.reports`: write a report, optionally with a screenshot of it.

The same as `autotune report`, plus ``--screenshot PNG`` to render the page in
headless Chromium (for CI artifacts and machines without a display).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from ..table import TableError
from .browser import render
from .html import report_command


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autotune.reports", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="host", help="the tuned table to report on (default host)")
    parser.add_argument("-o", "--output", type=Path, help="HTML file (default $AUTOTUNE_HOME/reports/<target>.html)")
    parser.add_argument("--open", action="store_true", help="open the report in a browser")
    parser.add_argument("--screenshot", type=Path, metavar="PNG", help="also render it to PNG with headless Chromium")
    parser.add_argument("--width", type=int, default=1280, metavar="PX",
                        help="window width of the screenshot in CSS pixels (default 1280; try 800)")
    args = parser.parse_args(argv)
    try:
        path = report_command(args.target, args.output, args.open)
    except TableError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(path)
    if args.screenshot:
        rendering = render(path, args.screenshot, width=args.width)
        print(rendering.screenshot)
        for message in rendering.errors:
            print(f"console error: {message}", file=sys.stderr)
        return 1 if rendering.errors or rendering.returncode else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
