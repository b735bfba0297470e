"""Probe report folders read back (``python -m mtl_heads probe`` writes them: ``report.json`` and a CSV per
probe, :func:`mtl_heads.reports.probe_report.write_report`), and the probe folders among a command's paths."""
from __future__ import annotations

import glob
import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from mtl_heads.records.runs import MAX_DEPTH, SKIP_DIRS, folder_kind

__all__ = ["Report", "read_report", "PROBE_KINDS", "split_specs"]


@dataclass
class Report:
    """A report folder read back: ``meta`` (report.json), full ``tables`` and ``summaries`` per probe."""

    folder: Path
    meta: dict
    tables: dict
    summaries: dict


def read_report(folder) -> Report:
    """Read a report folder written by :func:`mtl_heads.reports.probe_report.write_report`; errors name the missing file."""
    folder = Path(folder)
    path = folder / "report.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: not a probe report folder (no report.json)")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    tables, summaries = {}, {}
    for name in meta.get("probes", {}):
        for kind, store in (("", tables), ("_summary", summaries)):
            csv = folder / f"{name}{kind}.csv"
            if not csv.exists():
                raise FileNotFoundError(f"{csv}: missing (listed in {path})")
            try:
                store[name] = pd.read_csv(csv, keep_default_na=False, na_values=[""], dtype={"label": str})
            except pd.errors.EmptyDataError:
                store[name] = pd.DataFrame(columns=["layer", "head", "label", "score", "count"])
    return Report(folder, meta, tables, summaries)


# ---------------------------------------------------------------------- probe folders among a command's paths
PROBE_KINDS = ("probe report", "probe comparison")  # what mtl_heads.folders.folder_kind calls the folders of probes


def _probe_folders(folder: Path, depth: int = MAX_DEPTH) -> list[Path]:
    """Probe report and probe comparison folders below ``folder`` (not inside runs, nor inside a
    comparison: the reports it probed on the fly belong to it)."""
    found = []
    try:
        children = sorted(c for c in folder.iterdir() if c.is_dir())
    except OSError:
        return found
    for child in children:
        if child.name.startswith(".") or child.name in SKIP_DIRS or (child / "config.yaml").is_file():
            continue
        if folder_kind(child) in PROBE_KINDS:
            found.append(child)
        elif depth > 1:
            found += _probe_folders(child, depth - 1)
    return found


def _has_runs(folder: Path, depth: int = MAX_DEPTH) -> bool:
    try:
        children = [c for c in folder.iterdir() if c.is_dir()]
    except OSError:
        return False
    for child in children:
        if child.name.startswith(".") or child.name in SKIP_DIRS or folder_kind(child) in PROBE_KINDS:
            continue
        if (child / "config.yaml").is_file() or (depth > 1 and _has_runs(child, depth - 1)):
            return True
    return False


def split_specs(specs: list[str]) -> tuple[list[str], list[Path]]:
    """(run specs, probe folders): a folder with ``report.json`` is a probe report, one with
    ``compare.json`` a probe comparison; those below a folder given are taken too (at any depth up
    to ``MAX_DEPTH``), and the folder stays a run spec when runs lie below it (or when it holds no
    probe folder, so that a spec naming nothing is reported as such)."""
    runs, probes = [], []
    for spec in map(str, specs):
        matches = [Path(m) for m in sorted(glob.glob(spec))] if glob.has_magic(spec) else [Path(spec)]
        if matches and all(folder_kind(m) in PROBE_KINDS for m in matches):
            probes += matches
            continue
        folder = Path(spec)
        found = _probe_folders(folder) if folder.is_dir() else []
        probes += found
        if not found or _has_runs(folder) or glob.has_magic(spec):
            runs.append(spec)
    return runs, list(dict.fromkeys(probes))
