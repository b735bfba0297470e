"""``python -m mtl_heads report RUNS... [PROBE FOLDERS...] html=out.html [test=A,B]``: one self-contained HTML page.

The page (:mod:`mtl_heads.reports.page`) holds the comparison of the runs (as ``python -m
mtl_heads compare`` makes it), the score against heads kept figure, the gate pictures of the settings
(as ``python -m mtl_heads gates`` draws them), the heatmaps of every probe report folder given
(``python -m mtl_heads probe``) and of every probe comparison folder given (``python -m
mtl_heads probe compare=...``); nothing in it refers outside the page. ``test=A,B`` (repeatable;
``all``: every pair of settings sharing a task; as ``python -m mtl_heads compare test=``) adds the
significance between settings (Welch's t-test and an exact permutation test over seeds, per shared
score); an unknown setting name exits 2 with one line. Runs that make a study lead the page with its claims,
judged by the round of rules ``rules=`` names (``round2``, the default, or ``round3``; as ``python -m
mtl_heads claims rules=``). ``RUNS`` are what ``python -m
mtl_heads compare`` takes (run folders, globs, folders of runs at any depth, experiment names); a
folder holding ``report.json`` is a probe report, one holding ``compare.json`` a probe comparison (also
found below the folders given). Whatever is given and not used is printed as a note and listed on the
page.
"""
from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.records.probe_reports import split_specs
from mtl_heads.records.runs import Note, folder_kind

ARGUMENTS = Arguments(config_file("report"), positional="paths", many=True, repeat=frozenset({"test"}),
                      flags={"--html": "html", "--title": "title", "--root": "root", "--panels": "panels",
                             "--test": "test"})


def report(cfg: DictConfig) -> None:
    """Write the page as ``cfg`` (configs/report.yaml) says; bad input is a ConfigError."""
    # here, not at the top: the page (and the study's lead, which uses it) imports the probes, and with them torch,
    # which -h needs not
    from mtl_heads.reports.page import Lead, write_html
    from mtl_heads.study.lead import read_page_study, stem_cell_groups, study_lead
    from mtl_heads.study.rules import rules_named

    if not cfg.paths:
        raise ConfigError("config key 'paths': give run folders, globs, experiment names or probe report folders, "
                          "e.g. python -m mtl_heads report runs html=report.html")
    notes: list[Note] = []
    run_specs, probe_dirs = split_specs(list(cfg.paths))
    rules = rules_named(cfg.get("rules"))  # a bad name is an error before anything is read
    study = read_page_study(run_specs, cfg.root, rules) if run_specs else None  # read once: the lead and heads use it
    lead = study_lead(study, notes) if study is not None else ""  # a study's claims and figures, or why not, first
    path = write_html(cfg.html, run_specs, probe_dirs, title=cfg.title, root=cfg.root, panels=cfg.panels,
                      notes=notes, tests=list(cfg.test),
                      lead=Lead(lead, stem_cell_groups(study, notes) if lead else None))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    kinds = [folder_kind(Path(p)) for p in probe_dirs]
    used = [f"{len(run_specs)} run spec(s)" if run_specs else "",
            f"{kinds.count('probe report')} probe report(s)" if "probe report" in kinds else "",
            f"{kinds.count('probe comparison')} probe comparison(s)" if "probe comparison" in kinds else ""]
    print("report of " + ", ".join(u for u in used if u) + (f"; {len(notes)} path(s) not used (notes above, and on "
                                                            "the page)" if notes else ""))
    print(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB, self-contained: open it in a browser, "
          "no network needed)")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input."""
    return command(report, __doc__, argv, args=ARGUMENTS)
