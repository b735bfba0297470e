"""``python -m mtl_heads ablate RUN heads=... [key=value ...]``: causal head ablation of a trained run.

Ablates a set of attention heads and measures what each task loses (its main metric on a full
decode), against random head sets with the same number of heads in each layer.

Examples::

    python -m mtl_heads ablate runs/<run> heads=L0H2,L1H8,L3H5
    python -m mtl_heads ablate runs/<run> heads=docs/ewt-study/gates label=stem-cells
    python -m mtl_heads ablate runs/<run> heads=probe-reports/<report> probe=dep top=6 methods=zero,mean
    python -m mtl_heads ablate runs/<run> heads=L0H2 random_sets=100 split=dev tasks=pos device=cuda

Writes ``<out>/ablation.json`` (kind "head ablation": the heads, their source, per method and task
the base and ablated scores, the drop, the random sets' drops with their mean, 95th percentile and
the one-sided p = (1 + random drops >= drop) / (1 + random_sets), and the random sets' heads) and
prints one line per method and task. A set holding every head of a layer leaves the null nothing
to vary there: the output says so ("degenerate": true, the layers in "full_layers"; "possible_sets"
is 1 when no layer varies). The cost is one pass over the split per method and head set,
methods x (1 + random_sets) in all. Bad input (an unknown head
name, an empty set, a missing run or file) is one ``error:`` line naming the key or file, exit 2.
Defaults are in ``configs/ablate.yaml``; the Python API is ``mtl_heads.ablation``.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config, load_saved_config
from mtl_heads.files import write_json
from mtl_heads.headsets import head_name
from mtl_heads.runs import check_run_dir, is_pruned_dir, is_run_dir


def parse_args(argv: list[str]) -> list[str]:
    """``key=value`` overrides; a first argument without ``=`` is ``run=``."""
    if argv and "=" not in argv[0]:
        argv = [f"run={argv[0]}", *argv[1:]]
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ConfigError(f"argument {bad[0]!r}: expected key=value (the run folder comes first, e.g. "
                          "python -m mtl_heads.ablate runs/<run> heads=L0H2,L1H8)")
    return argv


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
        raise ConfigError(f"config key 'heads': {path} holds neither stem-cells.csv (python -m mtl_heads.gates) "
                          "nor report.json (python -m mtl_heads.probe)")
    csv = path / "stem-cells.csv" if path.is_dir() else path
    if csv.is_file():
        return stem_cells(csv)
    if spec.endswith(".csv") or "/" in spec:
        raise ConfigError(f"config key 'heads': {spec} does not exist")
    return HeadSource([n.strip() for n in spec.split(",") if n.strip()], "list")


def stem_cells(csv: Path) -> HeadSource:
    """The heads whose ``stem cell`` column is True in a gates report's stem-cells.csv."""
    import pandas as pd

    try:
        table = pd.read_csv(csv)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise ConfigError(f"{csv}: cannot be read as a CSV table ({err})") from None
    missing = [c for c in ("layer", "head", "stem cell") if c not in table.columns]
    if missing:
        raise ConfigError(f"{csv}: no column {', '.join(map(repr, missing))}; expected a gates report's stem-cells.csv "
                          "(python -m mtl_heads.gates)")
    rows = table[table["stem cell"].astype(str).str.strip().str.lower() == "true"]
    if rows.empty:
        raise ConfigError(f"{csv}: no stem cell (no row whose 'stem cell' is True): no heads to ablate")
    return HeadSource([head_name(layer, head) for layer, head in zip(rows["layer"], rows["head"])],
                      f"stem cells of {csv}", csv, (int(table["layer"].max()) + 1, int(table["head"].max()) + 1))


def probe_heads(folder: Path, probe: str, top: int | None) -> HeadSource:
    """The ``top`` best heads of ``probe`` in a probe report folder, by the count-weighted mean score
    over its labels in % (``mtl_heads.reports.gates.head_skill``)."""
    from mtl_heads.reports.gates import NOT_RANKED, head_skill, skill_labels
    from mtl_heads.reports.probe_report import read_report

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


def out_folder(cfg) -> Path:
    """``out=``, or ``<run>/ablation`` (``<run>/ablation-<label>`` with a label); not an existing file."""
    from mtl_heads.reports.probe_report import safe_name

    default = Path(str(cfg.run)) / ("ablation" + (f"-{safe_name(cfg.label)}" if cfg.label else ""))
    out = Path(str(cfg.out)) if cfg.out else default
    if out.exists() and not out.is_dir():
        raise ConfigError(f"config key 'out': {out} is a file; expected a folder for ablation.json")
    return out


def check_run(run_dir: Path, heads: HeadSource, tasks: list[str]) -> np.ndarray:
    """The ``[layers, heads]`` grid of the heads in the run's encoder; the run folder and ``tasks`` checked
    too, before any weight is loaded."""
    from mtl_heads.ablation import chosen_tasks, head_grid
    from mtl_heads.encoder import EncoderNotFound, attention_shape, encoder_config

    if is_pruned_dir(run_dir) and not is_run_dir(run_dir):
        raise ConfigError(f"config key 'run': {run_dir} is a pruned folder; ablate the run it came from "
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


def run(argv: list[str], log=print) -> dict:
    """Ablate as ``argv`` says; returns the record written to ``<out>/ablation.json``."""
    cfg = load_config(parse_args(argv), base=CONFIG_DIR / "ablate.yaml")
    if not cfg.run:
        raise ConfigError("config key 'run': give a run folder, e.g. python -m mtl_heads.ablate runs/<run> heads=L0H2")
    heads = head_source(cfg)
    out = out_folder(cfg)
    chosen = check_run(Path(str(cfg.run)), heads, list(cfg.tasks))

    from mtl_heads.ablation import run_ablation, table_lines  # torch from here on
    from mtl_heads.build import load_run, pick_device

    loaded = load_run(str(cfg.run), device=pick_device(cfg.device))
    record = run_ablation(loaded, chosen, list(cfg.methods), cfg.random_sets, cfg.seed, cfg.split, cfg.reference,
                          list(cfg.tasks) or None, cfg.max_sentences, cfg.batch_size, cfg.precision, heads.source,
                          str(cfg.label), str(cfg.run), cfg.progress, log)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "ablation.json", record)
    for line in table_lines(record):
        log(line)
    log(f"wrote {out / 'ablation.json'}")
    return record


def main(argv: list[str] | None = None) -> int:
    return command(run, __doc__, argv, interrupted="interrupted; nothing was written", config=CONFIG_DIR / "ablate.yaml")


if __name__ == "__main__":
    sys.exit(main())
