"""``python -m mtl_heads.gates RUNS... [--out F] [--threshold T] [--shuffles N] [--wandb MODE] [--probes DIR...]``:
gate pictures and tables (PNG, CSV) from training run folders.

The command line of :mod:`mtl_heads.reports.gates` (what each picture and table shows is said
there). It is run as ``python -m mtl_heads.gates``: ``mtl_heads/gates.py`` holds the gate modules,
and its ``__main__`` block calls :func:`main`. Written into ``--out`` (default: ``gate-report/`` in
the runs' common parent folder, e.g. ``runs/gate-report/``). The command prints what it left out
(``note: not used: <path> (<why>)``), the settings, the output folder, and one ``wrote <file>`` line
per file; ``--wandb offline|online`` also logs the pictures and tables to one W&B run. With two or more
settings whose gates moved, it prints the permutation baseline of each pair (``correlation-permutation.csv``:
do they keep the same heads more than chance, given how many heads each keeps?). It always prints the
stem cells (``stem-cells.csv``: heads kept in every setting whose gates moved, against the count
expected by chance); ``--probes`` (probe report folders, typically of the pretrained encoder; given
after the runs) adds one line per probe on whether the stem cells are among its best heads
(``stem-cells-probes.csv``). A ``--probes`` folder that is no probe report exits 2 with one line.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.reports.gates import (KEEP_THRESHOLD, SHUFFLES, WANDB_MODES, correlation_note, default_out,
                                     describe_file, group_settings, log_to_wandb, moved_flags, permutation_lines,
                                     probe_rank_lines, read_probe_reports, read_runs, stem_cell_lines, still_settings,
                                     write_report)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.gates",
                                     description="Gate pictures and tables (PNG, CSV) from training run folders.")
    parser.add_argument("runs", nargs="+", help="run folders, globs, or folders whose children are run folders")
    parser.add_argument("--out", help="output folder (default: gate-report/ in the runs' common parent folder, "
                                      "e.g. runs/gate-report/)")
    parser.add_argument("--wandb", default="disabled", choices=WANDB_MODES, help="log the pictures and tables to W&B")
    parser.add_argument("--project", default="mtl-heads", help="W&B project (default mtl-heads)")
    parser.add_argument("--threshold", type=float, default=KEEP_THRESHOLD, help="kept when gate >= this (default 1e-3)")
    parser.add_argument("--shuffles", type=int, default=SHUFFLES,
                        help=f"shuffles of the permutation baseline of gate overlap (default {SHUFFLES}, seed 0)")
    parser.add_argument("--probes", nargs="+", metavar="DIR", default=[],
                        help="probe report folders (python -m mtl_heads.probe; typically of the pretrained encoder): "
                             "are the stem cells among their best heads? Give them after the runs")
    args = parser.parse_args(argv)
    if args.shuffles < 1:
        parser.error(f"--shuffles: expected a positive number of shuffles, got {args.shuffles}")
    return args


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input (no runs, broken files)."""
    args = parse_args(argv)
    notes: list = []
    try:
        runs = read_runs(args.runs, notes)
        reports = read_probe_reports(args.probes)
        out = Path(args.out) if args.out else default_out(runs)
        paths = write_report(runs, out, args.threshold, shuffles=args.shuffles, probe_reports=reports)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    groups = group_settings(runs)
    print(f"{len(runs)} run(s) in {len(groups)} setting(s): " + ", ".join(f"{s} ({len(g)})" for s, g in groups.items()))
    note = correlation_note(groups)
    if note:
        print(note)
    if "correlation_permutation_csv" in paths:
        print("\n".join(permutation_lines(pd.read_csv(paths["correlation_permutation_csv"]))))
    stem = pd.read_csv(paths["stem_cells_csv"])
    still = still_settings({s: [r.values for r in g] for s, g in groups.items()}, moved_flags(groups))
    print("\n".join(stem_cell_lines(stem, still, args.threshold)))
    if "stem_cells_probes_csv" in paths:
        print("\n".join(probe_rank_lines(pd.read_csv(paths["stem_cells_probes_csv"]))))
    elif args.probes:
        print("--probes: " + ("no stem cells, so nothing to hold against the probe heads" if not stem["stem cell"].any()
                              else "the probe reports hold no probe tables"))
    where = "--out" if args.out else "default: gate-report/ beside the runs, in their common parent; --out to change"
    print(f"output folder: {out} ({where})")
    for key, path in paths.items():
        print(f"wrote {path} ({describe_file(key)})")
    if args.wandb != "disabled":
        try:
            folder = log_to_wandb(paths, out, args.wandb, args.project)
        except Exception as err:  # wandb raises its own errors (no API key, no network)
            print(f"error: W&B logging ({args.wandb}) failed: {err}", file=sys.stderr)
            return 2
        if args.wandb == "offline":
            from mtl_heads.tracking import offline_message  # torch: only when logging to W&B

            print(offline_message(Path(folder)))
        else:
            print(f"W&B: online run logged (local files in {folder})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
