"""``python -m mtl_heads.compare RUNS... [--out DIR] [--plot] [--test A,B ...]``: one table of many runs, seeds pooled.

``RUNS`` are run folders, globs (``'runs/*'``), folders of runs (searched at any depth up to
``MAX_DEPTH``, so ``runs`` finds ``runs/<experiment>/seed<N>``), or experiment names (``dep-dp`` =
``runs/dep-dp``, the seeds of ``seeds=1,2,3``). A run is a folder holding ``config.yaml`` and
``metrics.json``. Whatever is named or found and not used (unfinished runs, probe report folders,
files, folders without runs, globs matching nothing) is one ``note: not used: <path> (<why>)`` line.

Runs whose configs are identical apart from seed, folders, W&B, resume and progress bars form one
*setting*; the table has one row per setting, each number as mean and sample standard deviation over
its seeds (what the columns and names are: :mod:`mtl_heads.reports.comparison`).

Written to ``--out`` (default ``comparison/``): ``compare.csv`` (one row per setting, ``<column> mean``
and ``<column> std``), ``compare-runs.csv`` (one row per run), ``compare.md`` (``mean ± std``).
``--plot`` adds ``score-vs-heads.png`` (test score against heads kept), ``dev-curves.png`` / ``.csv``
(each task's dev score per epoch, mean ± std over seeds; runs without a per-epoch history are noted)
and ``gate-correlation.png`` / ``.csv`` / ``-permutation.csv`` (between the settings' gates, with a
permutation baseline). ``--test A,B`` (repeatable; ``--test all``: every pair of settings sharing a
task) tests, per score the two settings share, whether B differs from A over seeds (Welch's t-test and
an exact permutation test, :mod:`mtl_heads.reports.significance`): printed, in ``significance.csv`` and
in ``compare.md``. The command ends with one ``wrote <file>`` line per file.
"""
from __future__ import annotations

import argparse
import sys

from mtl_heads.config import ConfigError
from mtl_heads.reports.comparison import (add_significance, compare_runs, legend_text, significance_lines,
                                          terminal_table, write_comparison, write_plots, written_lines)
from mtl_heads.reports.runs import RUNS


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders, globs, folders of runs, or experiment names")
    parser.add_argument("--out", default="comparison", help="output folder (default comparison/)")
    parser.add_argument("--plot", action="store_true", help="also draw score vs heads kept, the dev learning curves "
                                                            "and the gate correlation")
    parser.add_argument("--test", action="append", default=[], metavar="A,B",
                        help="test whether settings A and B differ, per shared score, over seeds (Welch's t-test and "
                             "an exact permutation test); names as the table prints them; repeatable; 'all': every "
                             "pair of settings that share a task")
    parser.add_argument("--root", default=str(RUNS), help="where experiment names are looked up (default runs/)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input (no runs, broken files)."""
    args = parse_args(argv)
    try:
        comparison = compare_runs(args.runs, args.root)
        if args.test:
            add_significance(comparison, args.test)
        paths = write_comparison(comparison, args.out)
        if args.plot:
            paths.update(write_plots(comparison, args.out, comparison.notes))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    print(terminal_table(comparison, args.out))
    legend = legend_text(comparison.summary)
    if legend:
        print("\n" + "\n".join(legend))
    tests = significance_lines(comparison)
    if tests:
        print("\n" + "\n".join(tests))
    print(f"\n{len(comparison.runs)} runs in {len(comparison.summary)} settings"
          + (f"; {len(comparison.notes)} path(s) not used (notes above)" if comparison.notes else ""))
    print("\n".join(written_lines(paths)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
