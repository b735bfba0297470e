"""``python -m mtl_heads gates RUNS... [out=F] [threshold=T] [shuffles=N] [wandb.mode=MODE] [probes=DIR,...]``:
gate pictures and tables (PNG, CSV) from training run folders.

The command line of :mod:`mtl_heads.reports.gate_report` (what each picture and table shows is said
there); also run as ``python -m mtl_heads gates``. Written into ``out=`` (default: ``gate-report/`` in
the runs' common parent folder, e.g. ``runs/gate-report/``). The command prints what it left out
(``note: not used: <path> (<why>)``), the settings, the output folder, and one ``wrote <file>`` line
per file; ``wandb.mode=offline|online`` also logs the pictures and tables to one W&B run. With two or more
settings whose gates moved, it prints the permutation baseline of each pair (``correlation-permutation.csv``:
do they keep the same heads more than chance, given how many heads each keeps?). It always prints the
stem cells (``stem-cells.csv``: heads kept in every setting whose gates moved, against the count
expected by chance); ``probes=`` (probe report folders, comma-separated, typically of the pretrained encoder)
adds one line per probe on whether the stem cells are among its best heads
(``stem-cells-probes.csv``). A ``probes=`` folder that is no probe report exits 2 with one line.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.gates import (group_settings, moved_flags, permutation_lines, probe_rank_lines, read_probe_reports,
                             read_runs, stem_cell_lines, still_settings)
from mtl_heads.reports.gate_report import (WANDB_MODES, correlation_note, default_out, describe_file, log_to_wandb,
                                           write_report)

ARGUMENTS = Arguments(config_file("gates"), positional="runs", many=True, greedy=frozenset({"--probes"}),
                      flags={"--out": "out", "--threshold": "threshold", "--shuffles": "shuffles",
                             "--wandb": "wandb.mode", "--project": "wandb.project", "--probes": "probes"})


def gates(cfg: DictConfig) -> None:
    """Draw, write and print as ``cfg`` (configs/gates.yaml) says; bad input is a ConfigError."""
    if not cfg.runs:
        raise ConfigError("config key 'runs': give run folders, globs or folders of runs, "
                          "e.g. python -m mtl_heads gates runs")
    if cfg.wandb.mode not in WANDB_MODES:  # checked before any work
        raise ConfigError(f"config key 'wandb.mode': expected one of {', '.join(WANDB_MODES)}, got {cfg.wandb.mode!r}")
    notes: list = []
    runs = read_runs(list(cfg.runs), notes)
    reports = read_probe_reports(list(cfg.probes))
    out = Path(cfg.out) if cfg.out else default_out(runs)
    paths = write_report(runs, out, cfg.threshold, shuffles=cfg.shuffles, probe_reports=reports)
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
    print("\n".join(stem_cell_lines(stem, still, cfg.threshold)))
    if "stem_cells_probes_csv" in paths:
        print("\n".join(probe_rank_lines(pd.read_csv(paths["stem_cells_probes_csv"]))))
    elif cfg.probes:
        print("probes: " + ("no stem cells, so nothing to hold against the probe heads" if not stem["stem cell"].any()
                            else "the probe reports hold no probe tables"))
    where = "out=" if cfg.out else "default: gate-report/ beside the runs, in their common parent; out= to change"
    print(f"output folder: {out} ({where})")
    for key, path in paths.items():
        print(f"wrote {path} ({describe_file(key)})")
    if cfg.wandb.mode != "disabled":
        log_gates(paths, out, cfg.wandb.mode, cfg.wandb.project)


def log_gates(paths: dict, out: Path, mode: str, project: str) -> None:
    """Log the pictures and tables to one W&B run; a failure is a ConfigError."""
    try:
        folder = log_to_wandb(paths, out, mode, project)
    except ConfigError:
        raise
    except Exception as err:  # wandb raises its own errors (no API key, no network)
        raise ConfigError(f"W&B logging ({mode}) failed: {err}") from None
    if mode == "offline":
        from mtl_heads.training.tracking import offline_message

        print(offline_message(Path(folder)))
    else:
        print(f"W&B: online run logged (local files in {folder})")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input (no runs, broken files)."""
    return command(gates, __doc__, argv, args=ARGUMENTS)
