"""``python -m mtl_heads.report RUNS... [PROBE FOLDERS...] --html out.html [--test A,B]``: one self-contained HTML page.

The page (:mod:`mtl_heads.reports.page`) holds the comparison of the runs (as ``python -m
mtl_heads.compare`` makes it), the score against heads kept figure, the gate pictures of the settings
(as ``python -m mtl_heads.gates`` draws them), the heatmaps of every probe report folder given
(``python -m mtl_heads.probe``) and of every probe comparison folder given (``python -m
mtl_heads.probe compare=...``); nothing in it refers outside the page. ``--test A,B`` (repeatable;
``all``: every pair of settings sharing a task; as ``python -m mtl_heads.compare --test``) adds the
significance between settings (Welch's t-test and an exact permutation test over seeds, per shared
score); an unknown setting name exits 2 with one line. ``RUNS`` are what ``python -m
mtl_heads.compare`` takes (run folders, globs, folders of runs at any depth, experiment names); a
folder holding ``report.json`` is a probe report, one holding ``compare.json`` a probe comparison (also
found below the folders given). Whatever is given and not used is printed as a note and listed on the
page.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from mtl_heads.config import ConfigError
from mtl_heads.reports.page import PANELS, split_specs, write_html
from mtl_heads.reports.runs import RUNS, Note, folder_kind


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="+", help="run folders, globs, experiment names, probe report or probe "
                                                 "comparison folders")
    parser.add_argument("--html", default="comparison/report.html",
                        help="the page to write (default comparison/report.html)")
    parser.add_argument("--title", default="mtl-heads report", help="the page title")
    parser.add_argument("--root", default=str(RUNS), help="where experiment names are looked up (default runs/)")
    parser.add_argument("--panels", type=int, default=PANELS, help=f"heatmaps per probe family (default {PANELS})")
    parser.add_argument("--test", action="append", default=[], metavar="A,B",
                        help="add a section testing whether settings A and B differ, per shared score, over seeds "
                             "(Welch's t-test and an exact permutation test), as python -m mtl_heads.compare --test; "
                             "names as the table prints them; repeatable; 'all': every pair of settings that share a "
                             "task. Default: no such section")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input."""
    args = parse_args(argv)
    notes: list[Note] = []
    try:
        run_specs, probe_dirs = split_specs(args.specs)
        path = write_html(args.html, run_specs, probe_dirs, title=args.title, root=args.root, panels=args.panels,
                          notes=notes, tests=args.test)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    kinds = [folder_kind(Path(p)) for p in probe_dirs]
    used = [f"{len(run_specs)} run spec(s)" if run_specs else "",
            f"{kinds.count('probe report')} probe report(s)" if "probe report" in kinds else "",
            f"{kinds.count('probe comparison')} probe comparison(s)" if "probe comparison" in kinds else ""]
    print("report of " + ", ".join(u for u in used if u) + (f"; {len(notes)} path(s) not used (notes above, and on "
                                                            "the page)" if notes else ""))
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, self-contained: open it in a browser, "
          "no network needed)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
