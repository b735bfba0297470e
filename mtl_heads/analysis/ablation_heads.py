"""The head set of a causal head ablation (``heads=`` of ``python -m mtl_heads ablate``): a list of
head names (``L0H2,L1H8``), the stem cells of a gates report (``stem-cells.csv`` or its folder), or
the ``top`` best heads of one probe in a probe report folder; checked against the run's encoder
before any weight is loaded. Torch is imported only by :func:`check_run` (through ``mtl_heads.analysis.ablation``).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtl_heads.config import ConfigError, load_saved_config
from mtl_heads.folders import check_run_dir, is_removal_dir, is_run_dir
from mtl_heads.model.headsets import head_grid, head_name

__all__ = ["HeadSource", "head_source", "stem_cell_heads", "probe_heads", "check_run"]


@dataclass
class HeadSource:
    """What ``heads=`` gave: the head ``names``, how they were chosen (``source``), the file or folder
    read (``path``, None for a list) and the grid it describes (``shape``, None for a list)."""

    names: list[str]
    source: str
    path: Path | None = None
    shape: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """The config key, with the file read, for messages."""
        return f"config key 'heads'{f' ({self.path})' if self.path else ''}"


def head_source(cfg) -> HeadSource:
    """The heads of ``heads=`` (with ``probe=`` and ``top=`` for a probe report), checked but for the grid."""
    spec = str(cfg.heads).strip(" ,")
    if not spec:
        raise ConfigError("config key 'heads': give the heads to ablate: L0H2,L1H8, a stem-cells.csv (or its "
                          "folder), or a probe report folder with probe= and top=")
    path = Path(spec)
    if (cfg.probe or cfg.top is not None) and not (path / "report.json").is_file():
        raise ConfigError("config keys 'probe' and 'top': they go with a probe report folder in heads=, "
                          f"and {spec} is none")
    if (path / "report.json").is_file():
        return probe_heads(path, str(cfg.probe), cfg.top)
    if path.is_dir() and not (path / "stem-cells.csv").is_file():
        raise ConfigError(f"config key 'heads': {path} holds neither stem-cells.csv (python -m mtl_heads gates) "
                          "nor report.json (python -m mtl_heads probe)")
    csv = path / "stem-cells.csv" if path.is_dir() else path
    if csv.is_file():
        return stem_cell_heads(csv)
    if spec.endswith(".csv") or "/" in spec:
        raise ConfigError(f"config key 'heads': {spec} does not exist")
    return HeadSource([n.strip() for n in spec.split(",") if n.strip()], "list")


def stem_cell_heads(csv: Path) -> HeadSource:
    """The heads to ablate that a gates report marked as stem cells: the rows of its ``stem-cells.csv``
    whose ``stem cell`` column is True (kept in every setting whose gates moved).

    Not :func:`mtl_heads.gates.stem_cells`, which computes that table from gate grids (one row
    per head of the grid, stem cell or not); this reads the stem cells back from the written CSV, as
    head names with the grid they came from.

    Args:
        csv: the stem-cells.csv file.
    """
    import pandas as pd

    try:
        table = pd.read_csv(csv)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise ConfigError(f"{csv}: cannot be read as a CSV table ({err})") from None
    missing = [c for c in ("layer", "head", "stem cell") if c not in table.columns]
    if missing:
        raise ConfigError(f"{csv}: no column {', '.join(map(repr, missing))}; expected a gates report's stem-cells.csv "
                          "(python -m mtl_heads gates)")
    rows = table[table["stem cell"].astype(str).str.strip().str.lower() == "true"]
    if rows.empty:
        raise ConfigError(f"{csv}: no stem cell (no row whose 'stem cell' is True): no heads to ablate")
    return HeadSource([head_name(layer, head) for layer, head in zip(rows["layer"], rows["head"])],
                      f"stem cells of {csv}", csv, (int(table["layer"].max()) + 1, int(table["head"].max()) + 1))


def probe_heads(folder: Path, probe: str, top: int | None) -> HeadSource:
    """The ``top`` best heads of ``probe`` in a probe report folder, by the count-weighted mean score
    over its labels in % (``mtl_heads.gates.head_skill``)."""
    from mtl_heads.gates.survivors import NOT_RANKED, head_skill, skill_labels
    from mtl_heads.records.probe_reports import read_report

    if not probe or top is None:
        raise ConfigError(f"config keys 'probe' and 'top': a probe report ({folder}) needs both, e.g. probe=dep top=6")
    try:
        report = read_report(folder)
    except (OSError, ValueError) as err:
        raise ConfigError(f"config key 'heads': {err}") from None
    if probe not in report.tables or probe in NOT_RANKED:
        ranked = [p for p in report.tables if p not in NOT_RANKED]
        raise ConfigError(f"config key 'probe': {folder} ranks no heads by {probe!r}; its probes: {', '.join(ranked)}")
    table = report.tables[probe]
    layers = int(report.meta.get("layers") or table["layer"].max() + 1)
    heads = int(report.meta.get("heads") or table["head"].max() + 1)
    labels = skill_labels(table, (report.meta.get("families") or {}).get(probe), probe)
    skill = head_skill(table, labels, layers, heads).ravel()  # [layers * heads]
    scored = int(np.isfinite(skill).sum())
    if top > scored:
        raise ConfigError(f"config key 'top': {folder}'s {probe} probe scores {scored} heads, fewer than top={top}")
    best = np.argsort(-np.where(np.isfinite(skill), skill, -np.inf), kind="stable")[:top]
    return HeadSource([head_name(i // heads, i % heads) for i in best], f"top {top} {probe} heads of {folder}",
                      folder, (layers, heads))


def check_run(run_dir: Path, heads: HeadSource, tasks: list[str]) -> np.ndarray:
    """The ``[layers, heads]`` grid of the heads in the run's encoder; the run folder and ``tasks`` checked
    too, before any weight is loaded."""
    from mtl_heads.analysis.ablation import chosen_tasks
    from mtl_heads.model.encoder import EncoderNotFound, attention_shape, encoder_config

    if is_removal_dir(run_dir) and not is_run_dir(run_dir):
        raise ConfigError(f"config key 'run': {run_dir} is a removal folder; ablate the run it came from "
                          f"({run_dir.parent})")
    check_run_dir(run_dir, key="run")
    saved = load_saved_config(run_dir / "config.yaml")
    chosen_tasks(tasks, list(saved.tasks), run_dir)
    try:
        shape = attention_shape(encoder_config(saved.encoder.name))
    except EncoderNotFound as err:
        raise ConfigError(f"{run_dir / 'config.yaml'}: encoder.name: {err}") from None
    if heads.shape is not None and heads.shape != (shape.layers, shape.heads):
        raise ConfigError(f"{heads.key}: describes a {heads.shape[0]} x {heads.shape[1]} grid of heads, the encoder "
                          f"of {run_dir} has {shape.layers} x {shape.heads}")
    try:
        return head_grid(heads.names, shape.layers, shape.heads)
    except ValueError as err:
        raise ConfigError(f"{heads.key}: {err}") from None
