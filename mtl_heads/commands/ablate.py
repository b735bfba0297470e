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
prints one line per method and task. Each line ends with a verdict (:func:`judge`): "needed" when its
p, Holm-adjusted over every test of the table (each method and task), is below 0.05, else "not
shown"; a p at its floor 1 / (random_sets + 1) is marked (the drop exceeds every random set's, and
more sets could give a smaller p), and a warning says when too few random sets leave no test able
to pass (Holm over m tests needs at least 20 m sets). The record holds them as fields: per method
and task ``p_holm``, ``verdict`` and ``p_at_floor``, and ``verdicts`` (the rule, alpha, the tests,
the floor, the sets needed, the notes). A set holding every head of a layer leaves the null nothing
to vary there: the output says so ("degenerate": true, the layers in "full_layers"; "possible_sets",
the distinct sets the null can draw, within layers or, for matched=importance, within importance cells, is 1
when none varies, and a note says when it is fewer than random_sets). The cost is one pass over the split per method and head set,
methods x (1 + random_sets) in all. While it runs, ``<out>/ablation.partial.json`` keeps the passes
scored so far (written atomically, at most every minute): the same command, run again after an
interruption, goes on from them (a line says so; kept passes of another study are not read, and a line
says that too), and the file is removed once ``ablation.json`` is written. Likewise, run with more
``random_sets`` where ``<out>/ablation.json`` holds a record of the same study with fewer (the same weights,
heads, tasks, seed, null and sentences), it scores only the sets that record lacks: the first N sets of a draw
of more are the draw of N, so the record it writes is the one a study of all the sets from the start writes
(but ``seconds``, ``resumed`` and ``extended``, the sets read from the earlier record; a drop read back may
differ in its last bit, as the record keeps drops, not scores). A record of another study is not read, and a
line says so. Bad input (an unknown head name, an empty set, a missing run or file) is one ``error:`` line
naming the key or file, exit 2.
Defaults are in ``configs/ablate.yaml``; the Python API is ``mtl_heads.analysis.ablation`` (the study) and
``mtl_heads.analysis.ablation_heads`` (reading ``heads=``).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from mtl_heads.analysis.ablation_heads import check_run, head_source
from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config
from mtl_heads.files import write_json
from mtl_heads.folders import ABLATION_FILE, ABLATION_KEPT_FILE


def parse_args(argv: list[str]) -> list[str]:
    """``key=value`` overrides; a first argument without ``=`` is ``run=``."""
    if argv and "=" not in argv[0]:
        argv = [f"run={argv[0]}", *argv[1:]]
    bad = [a for a in argv if "=" not in a]
    if bad:
        raise ConfigError(f"argument {bad[0]!r}: expected key=value (the run folder comes first, e.g. "
                          "python -m mtl_heads ablate runs/<run> heads=L0H2,L1H8)")
    return argv


def out_folder(cfg) -> Path:
    """``out=``, or ``<run>/ablation`` (``<run>/ablation-<label>`` with a label); not an existing file."""
    from mtl_heads.reports.probe_report import safe_name

    default = Path(str(cfg.run)) / ("ablation" + (f"-{safe_name(cfg.label)}" if cfg.label else ""))
    out = Path(str(cfg.out)) if cfg.out else default
    if out.exists() and not out.is_dir():
        raise ConfigError(f"config key 'out': {out} is a file; expected a folder for ablation.json")
    return out


def sets_needed(tests: int, alpha: float) -> int:
    """The fewest random sets n for which Holm over ``tests`` tests can pass: ``tests / (n + 1) < alpha``
    (the smallest p of n sets is ``1 / (n + 1)``; Holm multiplies the smallest by the number of tests)."""
    n = max(1, int(tests / alpha) - 2)
    while tests / (n + 1) >= alpha:
        n += 1
    return n


def judge(record: dict) -> dict:
    """Add the verdicts to an ablation record (in place; returns it). The Holm family is the record's
    table, every method and task (:func:`mtl_heads.stats.holm`, at
    :data:`mtl_heads.reports.significance.ALPHA`). Per method and task: ``p_holm`` (the adjusted p),
    ``verdict`` ("needed" when the drop is positive and ``p_holm`` < alpha, else "not shown"; "cannot be
    tested", ``p_holm`` None, when every random set is the set itself: ``possible_sets`` 1) and
    ``p_at_floor`` (p is ``1 / (random_sets + 1)``: no random set dropped as much). Under ``verdicts``:
    ``rule`` (as text), ``alpha``, ``tests`` (m, the family's size), ``p_floor``, ``smallest_p_holm``
    (``m * p_floor``, at most 1: no test can pass when it is >= alpha), ``sets_needed``
    (:func:`sets_needed`; these two None when nothing can be tested) and ``notes`` (:func:`verdict_notes`).

    Args:
        record: what :func:`mtl_heads.analysis.ablation.run_ablation` returns (or an ``ablation.json`` read back).
    """
    from mtl_heads.stats import at_least, holm
    from mtl_heads.reports.significance import ALPHA

    results = [r for by_task in record["methods"].values() for r in by_task.values()]
    testable = record.get("possible_sets") != 1
    sets = int(record["random_sets"])
    floor = 1 / (sets + 1)
    adjusted = holm([r["p"] for r in results]) if testable else [None] * len(results)
    for r, p_holm in zip(results, adjusted):
        r["p_holm"] = p_holm
        r["verdict"] = ("cannot be tested" if p_holm is None else
                        "needed" if p_holm < ALPHA and r["drop"] > 0 else "not shown")
        # no random set dropped as much (the stats' one tie rule): p = 1 / (n + 1)
        r["p_at_floor"] = math.isfinite(r["p"]) and not at_least(r["random_drops"], r["drop"]).any()
    tests = len(results) if testable else 0
    record["verdicts"] = {
        "rule": f"needed when the drop is positive and its p, Holm-adjusted over the {tests} tests of this table "
                f"(every method and task), is below {ALPHA:g}; else not shown. p = (1 + random sets that drop at "
                f"least as much) / (1 + {sets})",
        "alpha": ALPHA, "tests": tests, "p_floor": floor, "smallest_p_holm": min(1.0, tests * floor) if tests else None,
        "sets_needed": sets_needed(tests, ALPHA) if tests else None}
    record["verdicts"]["notes"] = verdict_notes(record)
    return record


def verdict_notes(record: dict) -> list[str]:
    """The notes under a judged table (:func:`judge`): which p sit at their floor, and a warning when
    too few random sets leave no test able to pass (or that nothing can be tested)."""
    from mtl_heads.reports.significance import format_p

    verdicts, sets = record["verdicts"], record["random_sets"]
    notes = []
    at_floor = [f"{m} {t}" for m, by_task in record["methods"].items() for t, r in by_task.items() if r["p_at_floor"]]
    if at_floor:
        notes.append(f"* p at its floor 1/{sets + 1} = {format_p(verdicts['p_floor'])}, the smallest that {sets} "
                     f"random sets allow ({', '.join(at_floor)}): no random set dropped as much; more sets could "
                     "give a smaller p")
    if not verdicts["tests"]:
        notes.append("cannot be tested: every layer-matched random set is the set itself (see the note on the null)")
    elif verdicts["smallest_p_holm"] >= verdicts["alpha"]:
        tests, needed = verdicts["tests"], verdicts["sets_needed"]
        notes.append(f"warning: no test can pass: with {sets} random sets the smallest p is 1/{sets + 1}, and Holm "
                     f"over the {tests} tests of this table makes it at least {tests}/{sets + 1} = "
                     f"{format_p(verdicts['smallest_p_holm'])} >= {verdicts['alpha']:g}; needs at least {needed} sets "
                     f"(random_sets={needed})")
    return notes


def run(argv: list[str], log=print) -> dict:
    """Ablate as ``argv`` says; returns the record written to ``<out>/ablation.json``."""
    cfg = load_config(parse_args(argv), base=CONFIG_DIR / "ablate.yaml")
    if not cfg.run:
        raise ConfigError("config key 'run': give a run folder, e.g. python -m mtl_heads ablate runs/<run> heads=L0H2")
    heads = head_source(cfg)
    out = out_folder(cfg)
    chosen = check_run(Path(str(cfg.run)), heads, list(cfg.tasks))

    from mtl_heads.analysis.ablation import (  # torch from here on
        AblationPlan,
        run_ablation,
        table_lines,
    )
    from mtl_heads.training.build import load_run, pick_device

    loaded = load_run(str(cfg.run), device=pick_device(cfg.device))
    record = run_ablation(loaded, chosen, AblationPlan.from_config(cfg, source=heads.source), run=str(cfg.run), log=log,
                          kept=out / ABLATION_KEPT_FILE, earlier=out / ABLATION_FILE)
    judge(record)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / ABLATION_FILE, record)
    (out / ABLATION_KEPT_FILE).unlink(missing_ok=True)
    for line in table_lines(record):
        log(line)
    log(f"wrote {out / 'ablation.json'}")
    return record


def main(argv: list[str] | None = None) -> int:
    return command(run, __doc__, argv, config=CONFIG_DIR / "ablate.yaml",
                   interrupted=f"interrupted; no {ABLATION_FILE} was written: the passes scored so far are in "
                               f"{ABLATION_KEPT_FILE} of its folder, and the same command goes on from them")


if __name__ == "__main__":
    sys.exit(main())
