"""``python -m mtl_heads compare RUNS... [out=DIR] [plot=true] [test=A,B ...]``: one table of many runs, seeds pooled.

``RUNS`` are run folders, globs (``'runs/*'``), folders of runs (searched at any depth up to
``MAX_DEPTH``, so ``runs`` finds ``runs/<experiment>/seed<N>``), or experiment names (``dep-dp`` =
``runs/dep-dp``, the seeds of ``seeds=1,2,3``). A run is a folder holding ``config.yaml`` and
``metrics.json``. Whatever is named or found and not used (unfinished runs, probe report folders,
files, folders without runs, globs matching nothing) is one ``note: not used: <path> (<why>)`` line.

Runs whose configs are identical apart from seed, folders, W&B, resume and progress bars form one
*setting*; the table has one row per setting, each number as mean and sample standard deviation over
its seeds (what the columns and names are: :mod:`mtl_heads.reports.comparison`); the mean scores over a
run's tasks (``dev score``, ``test score``) only where every setting trains the same tasks (else a line
under the table says why they are left out). Under the table, per
setting, the config keys that differ between settings (only those not at their usual value when some
setting holds each key's most common value; else, as with two runs, every key that differs), then the
config that all runs share.

Written to ``out=`` (default ``comparison/``): ``compare.csv`` (one row per setting, ``<column> mean``
and ``<column> std``), ``compare-runs.csv`` (one row per run), ``compare.md`` (``mean ± std``).
``plot=true`` adds ``score-vs-heads.png`` (test score against heads kept), ``dev-curves.png`` / ``.csv``
(each task's dev score per epoch, mean ± std over seeds; runs without a per-epoch history are noted)
and ``gate-correlation.png`` / ``.csv`` / ``-permutation.csv`` (between the settings' gates, with a
permutation baseline). ``test=A,B`` (repeatable; ``test=all``: every pair of settings sharing a
task) tests, per score the two settings share, whether B differs from A over seeds (Welch's t-test and
an exact permutation test, :mod:`mtl_heads.reports.significance`): printed, in ``significance.csv`` and
in ``compare.md``. The command ends with one ``wrote <file>`` line per file. The keys and their defaults are in
``configs/compare.yaml`` (``-h``).
"""
from __future__ import annotations

import sys

from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError

ARGUMENTS = Arguments(config_file("compare"), positional="runs", many=True, repeat=frozenset({"test"}),
                      flags={"--out": "out", "--plot": "plot", "--test": "test", "--root": "root"},
                      switches=frozenset({"--plot"}))


def compare(cfg: DictConfig) -> None:
    """Compare, write and print as ``cfg`` (configs/compare.yaml) says; bad input is a ConfigError."""
    if not cfg.runs:
        raise ConfigError("config key 'runs': give run folders, globs, folders of runs or experiment names, "
                          "e.g. python -m mtl_heads compare runs")
    # the tables' library (pandas, and torch through the probes) from here on: deferred so that -h answers at once
    from mtl_heads.reports.comparison import (add_significance, compare_runs, legend_text, significance_lines,
                                              terminal_table, write_comparison, write_plots, written_lines)

    comparison = compare_runs(list(cfg.runs), cfg.root)
    if cfg.test:
        add_significance(comparison, list(cfg.test))
    paths = write_comparison(comparison, cfg.out)
    if cfg.plot:
        paths.update(write_plots(comparison, cfg.out, comparison.notes))
    for note in comparison.notes:
        print(f"note: {note}", file=sys.stderr)
    print(terminal_table(comparison, cfg.out))
    legend = legend_text(comparison.summary)
    if legend:
        print("\n" + "\n".join(legend))
    tests = significance_lines(comparison)
    if tests:
        print("\n" + "\n".join(tests))
    print(f"\n{len(comparison.runs)} runs in {len(comparison.summary)} settings"
          + (f"; {len(comparison.notes)} path(s) not used (notes above)" if comparison.notes else ""))
    print("\n".join(written_lines(paths)))


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input (no runs, broken files)."""
    return command(compare, __doc__, argv, args=ARGUMENTS)
