"""Reading run folders for the gate report: each run's ``gates.json`` and ``config.yaml``
(:func:`read_runs`, :class:`RunGates`), grouped into settings as ``python -m mtl_heads compare`` groups
them (:func:`group_settings`), and the probe report folders of ``probes=`` (:func:`read_probe_reports`).
What is named or found and not used is told as a :class:`mtl_heads.records.runs.Note`.
"""
from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.files import read_json
from mtl_heads.folders import KIND_WHY, folder_kind, is_gate_run
from mtl_heads.gates.grids import gates_moved, saved_prune_mode
from mtl_heads.records.probe_reports import read_report
from mtl_heads.records.runs import Note, read_yaml, setting_names, walk_runs

__all__ = ["RunGates", "moved_flags", "read_run", "read_runs", "group_settings", "read_probe_reports"]


@dataclass
class RunGates:
    """One run's gates and what identifies it.

    path: the run folder; tasks: its task list in config order; seed: its seed (None when absent);
    values: evaluation gate values ``[layers, heads]``; prune: config ``prune.mode`` (``none`` when
    absent); experiment: config ``experiment`` (None when absent); config: its config.yaml; kv_heads:
    ``kv_heads`` of its gates.json (None when absent).
    """

    path: Path
    tasks: tuple[str, ...]
    seed: int | None
    values: np.ndarray = field(repr=False)
    prune: str = "none"
    experiment: str | None = None
    config: dict = field(default_factory=dict, repr=False)
    kv_heads: int | None = None

    @property
    def group_size(self) -> int:
        """Query heads that share one gate: ``heads // kv_heads`` for a run with ``encoder.gate_groups=kv``
        (``kv_heads`` from its gates.json), else 1."""
        if str((self.config.get("encoder") or {}).get("gate_groups", "heads")) != "kv":
            return 1
        kv, heads = self.kv_heads, self.values.shape[1]
        return heads // kv if kv and heads % kv == 0 else 1

    @property
    def setting(self) -> str:
        """The task list, ``pos+ner``, with the pruning regime when there is one: ``dep (static)``."""
        name = "+".join(self.tasks)
        return f"{name} ({self.prune})" if self.prune != "none" else name


def moved_flags(groups: dict[str, list[RunGates]]) -> dict[str, list[bool]]:
    """``{setting: [gates_moved of each run]}``, each run judged against its own config."""
    return {s: [gates_moved(r.values, r.config) for r in g] for s, g in groups.items()}


def read_probe_reports(paths: list[str | Path]) -> list:
    """The probe report folders of ``probes=`` (:func:`mtl_heads.reports.probe_report.read_report`), checked.

    Raises ``ConfigError`` with one line naming the folder when one is missing, is no probe report
    (a probe comparison, a run, a file) or cannot be read.
    """
    reports = []
    for spec in map(Path, paths):
        kind = folder_kind(spec)
        if kind != "probe report":
            what = f"it is a {kind} folder" if kind else "no report.json" if spec.is_dir() else \
                "a file" if spec.exists() else "no such folder"
            raise ConfigError(f"probes={spec}: not a probe report folder ({what}; python -m mtl_heads probe "
                              "writes one)")
        try:
            reports.append(read_report(spec))
        except (OSError, ValueError, pd.errors.ParserError) as err:
            raise ConfigError(f"probes={spec}: {err}") from None
    return reports


def _has_config_only(path: Path) -> bool:
    """A run folder without gates.json: unfinished (gates.json is written at the end), or ungated."""
    return path.is_dir() and (path / "config.yaml").is_file() and not (path / "gates.json").exists() \
        and not (path / "heads.json").exists()


def _expand(spec: str, notes: list | None = None) -> list[Path]:
    """The run folders named by ``spec``: a run folder, a glob, or a folder with run folders at any
    depth up to ``mtl_heads.records.runs.MAX_DEPTH`` below it. What is named or found and not used is
    added to ``notes`` (:class:`mtl_heads.records.runs.Note`)."""
    notes = [] if notes is None else notes
    matches = sorted(glob.glob(spec)) if glob.has_magic(spec) else [spec]
    if not matches or not all(os.path.exists(m) for m in matches):
        raise ConfigError(f"{spec}: no such file or folder")
    why = "no gates.json: unfinished, or trained without gates (encoder.gate=none)"
    found = []
    for match in map(Path, matches):
        if is_gate_run(match):
            found.append(match)
        elif _has_config_only(match):
            notes.append(Note(match, why))
        elif not match.is_dir():
            notes.append(Note(match, "a file, not a run folder"))
        elif (kind := folder_kind(match)) is not None:
            notes.append(Note(match, KIND_WHY[kind]))
        else:
            runs, _, below = walk_runs(match, is_gate_run, _has_config_only, why)
            found += runs
            notes += below
            if not runs:
                notes.append(Note(match, "no run folder (gates.json and config.yaml) in it or below it"))
    return found


def _read_gates(path: Path) -> tuple[np.ndarray, int | None]:
    """The ``values`` of a gates.json as ``[layers, heads]``, checked (shape, range, layers/heads keys),
    and its ``kv_heads`` (None when absent or not a positive whole number)."""
    data = read_json(path)  # UnreadableFile (a ConfigError) naming the file and line when broken
    if not isinstance(data, dict) or "values" not in data:
        raise ConfigError(f"{path}: expected an object with key 'values' ([layers][heads] gate values)")
    try:
        values = np.asarray(data["values"], dtype=float)
    except (TypeError, ValueError):
        raise ConfigError(f"{path}: 'values' must be a [layers][heads] list of numbers, rows of equal length") from None
    if values.ndim != 2 or values.size == 0:
        raise ConfigError(f"{path}: 'values' must be a non-empty [layers][heads] list, got shape {values.shape}")
    if not np.isfinite(values).all() or values.min() < 0 or values.max() > 1:
        raise ConfigError(f"{path}: gate values must lie in [0, 1], got min {values.min()}, max {values.max()}")
    for axis, key in enumerate(("layers", "heads")):
        if key in data and data[key] != values.shape[axis]:
            raise ConfigError(f"{path}: '{key}' is {data[key]} but 'values' has {values.shape[axis]} {key}")
    kv = data.get("kv_heads")
    return values, (kv if isinstance(kv, int) and not isinstance(kv, bool) and kv > 0 else None)


def read_run(folder: Path) -> RunGates:
    """One run folder's gates and identity (task list, seed, experiment)."""
    cfg = read_yaml(folder / "config.yaml")
    tasks = cfg.get("tasks")
    if isinstance(tasks, str):
        tasks = [t for t in tasks.split(",") if t.strip()]
    if not tasks or not isinstance(tasks, list) or not all(isinstance(t, str) for t in tasks):
        raise ConfigError(f"{folder / 'config.yaml'}: config key 'tasks' must be a non-empty list of task names")
    seed, experiment = cfg.get("seed"), cfg.get("experiment")
    values, kv_heads = _read_gates(folder / "gates.json")
    return RunGates(folder, tuple(t.strip() for t in tasks), seed if isinstance(seed, int) else None,
                    values, saved_prune_mode(cfg), str(experiment) if experiment else None, cfg, kv_heads)


def read_runs(paths: list[str | Path], notes: list | None = None) -> list[RunGates]:
    """The runs named by ``paths`` (run folders, globs, or folders with run folders below them), each once.

    Args:
        paths: what the command was given.
        notes: when given, a :class:`mtl_heads.records.runs.Note` is appended for everything named or
            found and not used (runs without gates.json, probe reports, files).

    Raises ``ConfigError`` naming the path or file for a missing path, no run found, or a broken file.
    """
    notes = [] if notes is None else notes
    folders = list(dict.fromkeys(f.resolve() for spec in paths for f in _expand(str(spec), notes)))
    if not folders:
        why = "".join(f"\n  {note}" for note in notes)
        raise ConfigError(f"no run folders (holding gates.json and config.yaml) found in: {', '.join(map(str, paths))}"
                          + why)
    return [read_run(f) for f in folders]


def _seed_order(run: RunGates) -> tuple:
    return (run.seed is None, run.seed if run.seed is not None else 0, str(run.path))


def group_settings(runs: list[RunGates]) -> dict[str, list[RunGates]]:
    """``{setting: runs sorted by seed}``, settings ordered by number of tasks (STL first), then name.

    A setting is what ``python -m mtl_heads compare`` calls one (:func:`mtl_heads.records.runs.setting_names`:
    configs equal apart from seed, folders, W&B; named by task list and pruning regime, plus the keys
    that tell apart settings of one name: ``pos (dynamic, budget=36)``). Runs from different
    ``experiment`` names are never pooled as seeds: their names get `` [experiment]`` appended.
    """
    names = dict(zip((r.path for r in runs), setting_names([r.config or {"tasks": list(r.tasks),
                                                                          "prune": {"mode": r.prune}}
                                                            for r in runs])))
    groups: dict[tuple, list[RunGates]] = {}
    for run in sorted(runs, key=lambda r: (len(r.tasks), names[r.path], r.experiment or "")):
        groups.setdefault((names[run.path], run.experiment), []).append(run)
    shared = {s for s, _ in groups if sum(s == other for other, _ in groups) > 1}
    return {(f"{s} [{e or 'default'}]" if s in shared else s): sorted(group, key=_seed_order)
            for (s, e), group in groups.items()}
