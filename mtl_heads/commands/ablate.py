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
Defaults are in ``configs/ablate.yaml``; the Python API is ``mtl_heads.ablation`` (the study) and
``mtl_heads.ablation_heads`` (reading ``heads=``).
"""
from __future__ import annotations

import sys
from pathlib import Path

from mtl_heads.ablation_heads import check_run, head_source
from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config
from mtl_heads.files import write_json


def parse_args(argv: list[str]) -> list[str]:
    """``key=value`` overrides; a first argument without ``=`` is ``run=``."""
    if argv and "=" not in argv[0]:
        argv = [f"run={argv[0]}", *argv[1:]]
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ConfigError(f"argument {bad[0]!r}: expected key=value (the run folder comes first, e.g. "
                          "python -m mtl_heads.ablate runs/<run> heads=L0H2,L1H8)")
    return argv


def out_folder(cfg) -> Path:
    """``out=``, or ``<run>/ablation`` (``<run>/ablation-<label>`` with a label); not an existing file."""
    from mtl_heads.reports.probe_report import safe_name

    default = Path(str(cfg.run)) / ("ablation" + (f"-{safe_name(cfg.label)}" if cfg.label else ""))
    out = Path(str(cfg.out)) if cfg.out else default
    if out.exists() and not out.is_dir():
        raise ConfigError(f"config key 'out': {out} is a file; expected a folder for ablation.json")
    return out


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
                          str(cfg.label), str(cfg.run), cfg.progress, log,
                          reference_max=cfg.reference_sentences)
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
