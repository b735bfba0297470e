"""The claims written out: as markdown (:func:`page_markdown`, what ``claims.md`` holds and ``doc=``
splices in between :data:`BEGIN` and :data:`END`) and as plain data for JSON (:func:`claims_data`,
``python -m mtl_heads claims STUDY format=json``).

The JSON (schema :data:`SCHEMA`; every NaN written as null) is one object::

    {"schema": "mtl_heads.claims/1",
     "command": "python -m mtl_heads claims docs/ewt-study",      # "" when not given
     "tests_text": "...",                                          # the statistics every claim shares
     "study": {"runs": 76, "settings": 29, "probe_reports": 19, "ablations": 3, "hours": 17.6,
               "seeds": [1, 2, 3], "tasks": ["pos", ...], "mtl": "pos+ner+...", "notes": [...]},
     "claims": [CLAIM, ...]}                                       # in order, 1 to 6

    CLAIM = {"number": 1, "id": "mtl",        # id: mtl, overlap, stem, probes, sp_dp, needed
             "question": "...", "paper": "...", "rule": "...",
             "verdict": "yes",                # yes | partly | no | inconclusive | null (cannot be tested)
             "verdict_word": "replicated",    # as the markdown writes it
             "answer": "...",
             "stability": "stable",           # stable | fragile | too few seeds | null (not checked)
             "stability_text": "...", "fragile": ["without seed 2: not replicated"], "too_few": [...],
             "tests": [TEST, ...], "lines": ["rendered line", ...], "notes": [...]}

    TEST = {"key": "POS",                     # its name in the claim, and its slot in the lines
            "what": {"regime": "none", "task": "pos", ...},  # what it tests: fields per claim (below)
            "value": -0.56,                   # the statistic's value, or null
            "numbers": {"stl_mean": 96.06, ...},             # the other numbers its line shows
            "p": 0.0045, "adjusted": 0.018,   # raw and Holm-adjusted over its family; null: not tested
            "family": "", "floor": 0.0,       # Holm family within the claim; the smallest p it can reach
            "reach": "",                      # why it cannot reach significance, or ""
            "why": "",                        # why it cannot be tested, or ""
            "significant": true, "decides": true, "few": false,
            "stability": "stable",            # stable | fragile | too few seeds | null (not checked)
            "fragile": [...], "too_few": [...],
            "runs": ["docs/ewt-study/pos/seed1", ...]}  # the run folders behind it (relative to the
                                                        # current directory when under it)

``what`` per claim (task ids as ``tasks=`` writes them; regimes ``none``, ``dp``, ``budget``, ``sp``):
mtl ``regime, task, models, score, statistic (difference), test (welch), confound``; overlap ``regime,
pair, statistic (correlation | jaccard)``; stem ``regime, tasks, statistic (stem cell count), heads`` or
``regime, probe, statistic (mean percentile)``; probes ``task, models, statistic (probe score
difference), test``; sp_dp ``tasks, setting, regimes, matched, score, statistic (heads kept | test
score), hypothesis, test`` or, for whether DP and SP keep the same heads, ``tasks, setting, regimes,
matched, statistic (correlation | jaccard)``; needed ``regime, model, task, method, statistic (score
drop), heads``.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.folders import shown
from mtl_heads.study.core import (REGIME_NAMES, Claim, Study, Test, folder_of, mean_std, metric_name, mtl_name,
                                  score_column, as_number, task_name)
from mtl_heads.reports.significance import format_p

__all__ = ["BEGIN", "END", "SCHEMA", "markers", "score_grid", "page_markdown", "claim_markdown", "since_line", "read_since",
           "splice", "claims_data", "claim_data", "test_data", "plain"]

BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"
SCHEMA = "mtl_heads.claims/1"


# --- markdown ---------------------------------------------------------------------------------------
def score_grid(study: Study) -> pd.DataFrame:
    """One row per task, one column per (STL or MTL, regime) cell: the test score ``mean ± std (n=..)``,
    with the heads kept for pruned cells."""
    columns = {}
    for kind in ("none", "dp", "sp", "budget"):
        for who, tasks_of in (("STL", lambda t: t), (mtl_name(study.mtl), lambda t: study.mtl)):
            if any(study.setting(tasks_of(t), kind) for t in study.tasks):
                columns[f"{who}, {REGIME_NAMES[kind]}"] = (tasks_of, kind)
    rows = []
    for task in study.tasks:
        score = score_column(study.runs, task)
        row = {"task (test)": f"{task_name(task)} ({metric_name(score)})" if score else task_name(task)}
        for name, (tasks_of, kind) in columns.items():
            setting = study.setting(tasks_of(task), kind)
            runs = study.runs_of(setting)  # empty where the cell has no setting (None)
            if not len(runs) or score is None or runs[score].isna().all():
                row[name] = ""
                continue
            text = mean_std(runs[score].dropna())
            if kind != "none":
                text += f"; heads {mean_std(runs['heads kept'], 0, count=False)}"
            row[name] = text
        rows.append(row)
    return pd.DataFrame(rows)


def _hours(runs: pd.DataFrame) -> float:
    """The wall time of ``runs`` (rows of a study's run frame) in hours: the sum of their ``metrics.json``
    seconds; 0.0 where no run records any."""
    return pd.to_numeric(runs["seconds"], errors="coerce").sum() / 3600 if "seconds" in runs else 0.0


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]


def _sinces(since: dict | list[dict] | None) -> list[dict]:
    """``since`` as a list: none, one earlier claims JSON (:func:`read_since`), or several."""
    return [] if since is None else [since] if isinstance(since, dict) else list(since)


def claim_markdown(number: int, claim: Claim, since: dict | list[dict] | None = None) -> list[str]:
    """One claim's markdown lines: its question and He & Choi's answer, its rule, its verdict with its
    stability, then, with ``since`` (an earlier claims JSON, or a list of them, see :func:`since_line`),
    what changed since each, then its lines (raw and Holm-adjusted p) and notes as a list."""
    out = [f"**{number}. {claim.question}** He & Choi: {claim.paper}.", "",
           f"*Rule:* {_capital(claim.rule)}", "",
           (f"*Verdict:* **{_capital(claim.word)}** ({claim.stability or 'stability not checked'}): "
            f"{claim.answer}."), ""]
    for earlier in _sinces(since):
        out += [since_line(claim, earlier), ""]
    return out + [f"- {line}" for line in claim.text_lines()] + [f"- note: {note}" for note in claim.notes] + [""]


def _then_now(then, now, form) -> str:
    """``then → now``, each by ``form`` (``n/a`` for a missing one)."""
    return " → ".join("n/a" if v is None else form(v) for v in (then, now))


def since_line(claim: Claim, since: dict) -> str:
    """``*Since <name>:* ...``: ``claim`` against the same claim (by id) in an earlier claims JSON.

    Args:
        claim: the claim as checked now.
        since: ``{"name": what the earlier claims are called (e.g. "round 1"), "data": the earlier file's
            JSON (:func:`claims_data`)}``.

    The line gives the verdict then and now (and the earlier answer, with its counts, where the verdict
    changed), whether the claim's rule text differed then, the stability where it changed, every test both
    hold whose significance changed (its Holm-adjusted p and its value, then → now), and how many tests are
    new or gone."""
    name = since["name"]
    before = next((c for c in since["data"].get("claims", []) if c.get("id") == claim.key), None)
    if before is None:
        return f"*Since {name}:* new (the earlier claims have no such claim)."
    was = str(before.get("verdict_word") or "cannot be tested")
    if was == claim.word:
        parts = [f"the same verdict (**{_capital(was)}**)"]
    else:
        parts = [f"the verdict **changed**: **{_capital(was)}** → **{_capital(claim.word)}** (then: "
                 f"{str(before.get('answer') or '').rstrip('.')})"]
    if before.get("rule") != claim.rule:  # then the change is partly the rule's, not only the runs'
        parts.append("its rule then was not today's (see the earlier file)")
    if (before.get("stability") or None) != (claim.stability_kind or None):
        parts.append(f"stability {_then_now(before.get('stability'), claim.stability_kind or None, str)}")
    earlier = {t["key"]: t for t in before.get("tests", []) if "key" in t}
    moved = []
    for key, test in claim.tests.items():
        old = earlier.get(key)
        if old is None or bool(old.get("significant")) == bool(test.significant):
            continue
        now_value = None if test.value is None or pd.isna(test.value) else float(test.value)
        moved.append(f"{key}: {'significant → not' if old.get('significant') else 'not → significant'} (Holm "
                     f"{_then_now(old.get('adjusted'), test.adjusted, format_p)}; value "
                     f"{_then_now(old.get('value'), now_value, lambda v: f'{v:.2f}')})")
    parts.append("tests that changed side: " + ("; ".join(moved) if moved else "none"))
    new, gone = len(set(claim.tests) - set(earlier)), len(set(earlier) - set(claim.tests))
    if new or gone:
        parts.append(f"{new} test{'s' if new != 1 else ''} new, {gone} gone")
    return f"*Since {name}:* " + "; ".join(parts) + "."


def _other_settings_hours(study: Study) -> str:
    """`` Of those, the settings no claim's cell uses ... took N hours: ...``: the hours of each setting
    that no regime cell uses (a DP on SP's schedule, a search's lambda: claim 5's further comparisons),
    each named with its runs' folder; ``""`` when every setting is a cell's."""
    others = study.runs[~study.runs["setting"].isin(set(study.cells.values()))]
    if others.empty or "seconds" not in others:
        return ""
    parts = [f"{setting} [{folder_of(study.runs, setting)}] {_hours(group):.1f} "
             f"({len(group)} run{'s' if len(group) != 1 else ''})" for setting, group in others.groupby("setting", sort=False)]
    return (f" Of those, the settings no claim's cell uses (compared in claim 5 where they pair with SP) took "
            f"{_hours(others):.1f} hours: " + "; ".join(parts) + ".")


def _ablation_hours(study: Study) -> str:
    """`` The head ablations ... took N hours ...`` from the ``seconds`` of the ablation records that have it
    (written since 27 November 2026); ``""`` when none has."""
    timed = [t for _, a in study.ablations if (t := as_number(a.get("seconds"))) is not None]
    if not timed:
        return ""
    return (f" The head ablations that record their time took {sum(timed) / 3600:.1f} hours ({len(timed)} of "
            f"{len(study.ablations)}: the sum of their `ablation.json` seconds).")


def _retraining_hours(study: Study) -> str:
    """`` The N runs trained again ... took H hours (...)`` from :attr:`Study.retrainings`, with the hours of
    each regime where the runs trained again have several and the earlier retrainings counted in; ``""``
    when there is none."""
    if not study.retrainings:
        return ""
    count, earlier, added = len(study.retrainings), study.earlier_retrainings, study.annex_retrainings
    kept = ("`retraining.metrics.json`" if not earlier else "`retraining.metrics.json` and of the "
            f"{earlier} earlier retraining{'s' if earlier != 1 else ''} of the same run{'s' if earlier != 1 else ''}, "
            "whose weights were lost, `retraining.<k>.metrics.json`")
    if added:
        kept += (f", and of the {added} retraining{'s' if added != 1 else ''} made by the study that continues the "
                 "record, whose annex of the run (`<study>/<setting>/seed<N>`) keeps its `retraining.metrics.json`")
    by_regime: dict[str, list[float]] = {}  # the runs' regimes (the study's stages: baselines, DP for claim 5)
    for run, seconds in study.retrainings.items():
        row = study.run_row(run)
        by_regime.setdefault(REGIME_NAMES.get(row["regime"], row["regime"]) if row is not None else "other",
                             []).append(seconds)
    split = "".join(f"{name} {sum(times) / 3600:.1f} hours, {len(times)} run{'s' if len(times) != 1 else ''}; "
                    for name, times in by_regime.items()) if len(by_regime) > 1 else ""
    return (f" The {count} run{'s' if count != 1 else ''} trained again for {'their' if count != 1 else 'its'} "
            f"weights took {sum(study.retrainings.values()) / 3600:.1f} hours ({split}the sum of the seconds of "
            f"their {kept}, which the record keeps since 27 November 2026).")


def page_markdown(study: Study, claims: list[Claim], grid: str, command: str = "",
                  since: dict | list[dict] | None = None) -> str:
    """The claims page as markdown: what it was generated from (and by ``command``), the score grid
    (``grid``: :func:`score_grid` as a markdown table), the statistics every claim shares, each claim
    (:func:`claim_markdown`, with what changed since each of ``since``: see :func:`since_line`; default
    none) and the study's notes."""
    seeds = study.runs.groupby("setting")["seed"].nunique()
    ablations = f" and {len(study.ablations)} head ablations" if study.ablations else ""
    out = [f"Generated from {len(study.runs)} runs in {len(seeds)} settings, {len(study.reports)} probe reports{ablations}"
           + (f" by `{command}`" if command else "") + f"; do not edit by hand. The runs took {_hours(study.runs):.1f} hours "
           "in all (the sum of their `metrics.json` seconds: wall time with loading and evaluation, of every "
           "process of a resumed run that lists them under `resumed`, else of its last; probes not counted)."
           + _other_settings_hours(study) + _ablation_hours(study) + _retraining_hours(study), "",
           "Test scores, mean ± sample standard deviation over seeds (n = seeds):", "", grid, "", study.rules.tests, ""]
    for earlier in _sinces(since):
        then = earlier["data"].get("study") or {}
        out += [f"*Since {earlier['name']}* (under each verdict): `{earlier['path']}` holds the claims of "
                f"{then.get('runs', '?')} runs and {then.get('ablations', '?')} head ablations, as "
                f"`{earlier['command'] or 'python -m mtl_heads claims'}` wrote them; claims and tests are matched by "
                "name, a claim whose rule text differs says so, and a test that changed side is named with its Holm "
                "p and value, then → now.", ""]
    for number, claim in enumerate(claims, 1):
        out += claim_markdown(number, claim, since)
    if study.notes:
        out += ["Notes:", ""] + [f"- {note}" for note in study.notes] + [""]
    return "\n".join(out)


def markers(block: str | None = None) -> tuple[str, str]:
    """The lines that enclose a claims block of a document: :data:`BEGIN` and :data:`END`, or for a named
    ``block`` (several claims in one document, e.g. one per round) ``<!-- claims:NAME:begin -->`` and
    ``<!-- claims:NAME:end -->``."""
    return (BEGIN, END) if not block else (f"<!-- claims:{block}:begin -->", f"<!-- claims:{block}:end -->")


def splice(doc: str, generated: str, path: str = "doc", block: str | None = None) -> str:
    """``doc`` with the text between the markers of ``block`` (:func:`markers`; default the unnamed block)
    replaced by ``generated``; ``path`` names the document in the ConfigError raised when it has no such
    markers."""
    begin, end_line = markers(block)
    start, end = doc.find(begin), doc.find(end_line)
    if start < 0 or end < start:
        raise ConfigError(f"{path}: no '{begin}' ... '{end_line}' markers to put the claims between")
    return doc[:start + len(begin)] + "\n" + generated.rstrip("\n") + "\n" + doc[end:]


# --- plain data (JSON) --------------------------------------------------------------------------------
def read_since(path: str | Path, name: str | None = None) -> dict:
    """An earlier claims JSON (``format=json``'s output) for :func:`page_markdown`'s ``since``:
    ``{"name", "path", "command", "data"}``, ``name`` defaulting to ``the claims in <path>``. A file that
    cannot be read, is no JSON or is no claims JSON of :data:`SCHEMA` is a ConfigError naming it (and
    the line, for bad JSON)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"config key 'since': {path}: {err.strerror or err}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"config key 'since': {path}, line {err.lineno}: not JSON ({err.msg})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA or not isinstance(data.get("claims"), list):
        raise ConfigError(f"config key 'since': {path} is no claims JSON (schema {SCHEMA}: write one with "
                          "python -m mtl_heads claims STUDY format=json out=FILE)")
    return {"name": name or f"the claims in {path}", "path": str(path), "command": str(data.get("command") or ""),
            "data": data}


def plain(value):
    """``value`` as JSON can hold it: numpy numbers as Python's, NaN and infinity as None, tuples and
    arrays as lists, paths as strings; dicts and lists converted all the way down."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, bool, int)):
        return value
    return None if pd.isna(value) else str(value)


def test_data(test: Test) -> dict:
    """One test as plain data (the module docstring's TEST)."""
    return plain({"key": test.key, "what": test.what, "value": test.value, "numbers": test.numbers, "p": test.p,
                  "adjusted": test.adjusted, "family": test.family, "floor": test.floor, "reach": test.reach,
                  "why": test.why, "significant": test.significant, "decides": test.decides, "few": test.few,
                  "stability": test.stability or None, "fragile": test.fragile, "too_few": test.too_few,
                  "runs": [shown(run) for run in test.runs]})


def claim_data(number: int, claim: Claim) -> dict:
    """One claim as plain data (the module docstring's CLAIM)."""
    return plain({"number": number, "id": claim.key, "question": claim.question, "paper": claim.paper,
                  "rule": claim.rule, "verdict": claim.verdict or None, "verdict_word": claim.word,
                  "answer": claim.answer, "stability": claim.stability_kind or None,
                  "stability_text": claim.stability, "fragile": claim.fragile, "too_few": claim.too_few,
                  "tests": [test_data(t) for t in claim.tests.values()], "lines": claim.text_lines(),
                  "notes": claim.notes})


def claims_data(study: Study, claims: list[Claim], command: str = "") -> dict:
    """The study and its claims as plain data, ready for ``json.dumps`` (schema: the module docstring)."""
    return plain({"schema": SCHEMA, "command": command, "tests_text": study.rules.tests,
                  "study": {"runs": len(study.runs), "settings": int(study.runs["setting"].nunique()),
                            "probe_reports": len(study.reports), "ablations": len(study.ablations),
                            "hours": _hours(study.runs), "seeds": study.seeds, "tasks": study.tasks, "mtl": study.mtl,
                            "notes": study.notes},
                  "claims": [claim_data(n, c) for n, c in enumerate(claims, 1)]})
