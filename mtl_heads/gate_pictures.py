"""``python -m mtl_heads.gates RUNS... [--out F] [--threshold T] [--shuffles N] [--wandb MODE]``: gate
pictures and tables (PNG, CSV) from training run folders.

The command line of :mod:`mtl_heads.reports.gates` (what each picture and table shows is said
there). It is run as ``python -m mtl_heads.gates``: ``mtl_heads/gates.py`` holds the gate modules,
and its ``__main__`` block calls :func:`main`. Written into ``--out`` (default: ``gate-report/`` in
the runs' common parent folder, e.g. ``runs/gate-report/``). The command prints what it left out
(``note: not used: <path> (<why>)``), the settings, the output folder, and one ``wrote <file>`` line
per file; ``--wandb offline|online`` also logs the pictures and tables to one W&B run. With two or more
settings whose gates moved, it prints the permutation baseline of each pair (``correlation-permutation.csv``:
do they keep the same heads more than chance, given how many heads each keeps?).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.reports.gates import (KEEP_THRESHOLD, SHUFFLES, WANDB_MODES, correlation_note, default_out,
                                     describe_file, group_settings, log_to_wandb, permutation_lines, read_runs,
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
        out = Path(args.out) if args.out else default_out(runs)
        paths = write_report(runs, out, args.threshold, shuffles=args.shuffles)
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
