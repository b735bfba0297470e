"""What every claim is made of: a :class:`Claim` holds its :class:`Test` s (each a record of what it
tests, its statistic and its p-values), its verdict and its ``facts`` (the numbers its words are written
from), then its lines, templates whose ``{test key}`` slots (:func:`slot`) :meth:`Claim.text_lines` fills
with the test's p-values; :func:`mtl_heads.stats.holm` adjusts a claim's p-values; a :class:`Study` holds
the runs, probe reports and ablations the claims read; and the small helpers that write numbers and names
the same way in every claim.

Each claim's module computes it as data first (its tests, its verdict and its facts: no sentence), then
writes its English from that data (``question``, ``paper``, ``answer``, ``lines``, ``notes``).
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.files import UnreadableFile, file_sha256, read_json
from mtl_heads.folders import ABLATION_FILE, annexes, is_probe_report, shown
from mtl_heads.study.rules import ALPHA, REPLICATION, ROUND2, TOO_FEW, Rules
from mtl_heads.reports.curves import main_metric
from mtl_heads.records.probe_reports import read_report
from mtl_heads.records.runs import is_null, read_yaml, walk_runs
from mtl_heads.reports.significance import format_p
from mtl_heads.stats import holm, mc_standard_error, unresolved
from mtl_heads.folders import EARLIER_RETRAINING, RETRAINED_FOLDER, RETRAINING_METRICS, match_name, record_folder_name

__all__ = ["REGIMES", "REGIME_NAMES",
           "regime", "Test", "Claim", "slot", "test_text", "too_few_text", "cannot_reach", "unreachable", "Study",
           "as_number",
           "kept_retrainings", "read_ablations", "folder_of", "one_encoder", "build_study", "mean_std", "heads_text",
           "metric_name", "listed",
           "task_name", "mtl_name", "display_name", "run_folders", "config_of", "score_column", "majority",
           "share"]

REGIMES = ("dp", "budget", "sp")  # the paper's regime (DP) first: gate verdicts read the first one present
REGIME_NAMES = {"none": "unpruned", "dp": "dynamic pruning (DP)", "budget": "DP at equal sparsity",
                "sp": "static pruning (SP)"}
SLOT = re.compile(r"\{([^{}]+)\}")  # a test's place in a line: its key in braces


def regime(prune_mode: str, budget) -> str:
    """The pruning regime of a run: ``none``, ``dp``, ``budget`` (dynamic with a head budget) or ``sp``."""
    mode = str(prune_mode or "none")
    if mode == "dynamic":
        return "dp" if is_null(budget) else "budget"
    return {"static": "sp"}.get(mode, mode)


@dataclass
class Test:
    """One test of a claim.

    What it tests: ``key`` (names it within the claim, the same in every seed-left-out recomputation;
    also its slot ``{key}`` in the claim's lines), ``what`` (the setting, task, pair, method and statistic
    as fields, e.g. ``{"regime": "dp", "pair": ["pos", "ner"], "statistic": "jaccard"}``; tasks by their
    ids, as ``tasks=`` names them), ``value`` (the statistic's value, NaN where there is none), ``numbers``
    (the other numbers its line shows: means, null means, the global and layer-aware p) and ``runs``
    (the run folders behind it, where known).

    Its p-values: ``p`` (raw; the larger of a global and a layer-aware null's), ``why`` (why it cannot be
    tested; ``p`` is then NaN), ``floor`` (the smallest p it can reach: ``1 / (n + 1)`` for n shuffles or
    random sets, 0 for a t-test), ``family`` (its Holm family within the claim; one by default), ``few``
    (a t-test left with fewer than :data:`~mtl_heads.study.rules.MIN_SEEDS` seeds a group),
    ``decides`` (the verdict reads it; False for tests shown beside, such as claim 2's gate correlation),
    ``adjusted`` (Holm over its family), ``reach`` (``""``, or the sets it needs when its family is too
    large for its floor: it cannot be significant), ``fragile`` (what leaving out a seed does to a
    significant result), ``too_few`` (the seeds whose leaving out leaves it too few to test) and
    ``checked`` (recomputed with each seed left out, by ``check_claims``); ``draws`` (the Monte Carlo draws
    behind ``p``: shuffles or random sets; 0 for an exact test or a t-test), ``exact_floor`` (True: ``floor`` is
    the smallest p of an exact null's law, not ``1 / (n + 1)``) and, under rules that print
    standard errors (round 3), ``factor`` (its Holm multiplier) and ``unresolved`` (``""``, or why its
    adjusted p is too close to the level for its draws to say which side it falls on: it then counts as not
    significant); ``family_size`` (the tests with a p-value in its family, Holm's m; set by ``Claim.adjust``)."""

    key: str
    p: float
    why: str = ""
    floor: float = 0.0
    family: str = ""
    few: bool = False
    decides: bool = True
    adjusted: float = math.nan
    reach: str = ""
    fragile: list[str] = field(default_factory=list)
    too_few: list[str] = field(default_factory=list)
    checked: bool = False
    what: dict = field(default_factory=dict)
    value: float = math.nan
    numbers: dict = field(default_factory=dict)
    runs: list[str] = field(default_factory=list)
    draws: int = 0
    exact_floor: bool = False
    factor: float = math.nan  # set by Claim.adjust under rules that print standard errors only
    unresolved: str = ""
    family_size: int = 0  # set by Claim.adjust

    @property
    def significant(self) -> bool:
        return bool(np.isfinite(self.adjusted) and self.adjusted < ALPHA and not self.reach and not self.unresolved)

    @property
    def standard_error(self) -> float:
        """The standard error of its Monte Carlo p (NaN for an exact test, a t-test, or no p)."""
        return mc_standard_error(self.p, self.draws) if self.draws else math.nan

    @property
    def untestable(self) -> str:
        """Why no verdict can rest on it: ``why``, or that it cannot reach significance; ``""`` when it can."""
        return self.why or self.reach

    @property
    def stability(self) -> str:
        """``fragile``, ``too few seeds`` (leaving a seed out leaves too few to test), ``stable`` or ``""``
        (not checked)."""
        return "fragile" if self.fragile else "too few seeds" if self.too_few else "stable" if self.checked else ""


@dataclass
class Claim:
    """One claim: ``key`` (its id, as :data:`~mtl_heads.study.rules.VERDICT_RULES` names it: ``mtl``,
    ``overlap``, ``stem``, ``probes``, ``sp_dp``, ``needed``), ``question``, ``paper`` (what He & Choi
    report), ``rule`` (how the verdict is decided), ``verdict`` (``yes`` | ``partly`` | ``no`` |
    ``inconclusive``; ``""`` when the study cannot answer), ``words`` (the verdicts as words:
    :data:`~mtl_heads.study.rules.REPLICATION` for the paper's claims,
    :data:`~mtl_heads.study.rules.SUPPORT` for one it does not make), ``answer`` (the verdict's
    key numbers, or why there is none), ``lines`` (one per task or pair: templates whose ``{test key}``
    slots :meth:`text_lines` fills), ``notes``, ``tests`` (by key), ``fragile`` (the verdicts found with a
    seed left out, where they differ), ``too_few`` (the seeds whose leaving out changes the verdict
    through tests left with too few seeds only), ``stability`` (the sentence ``check_claims`` writes) and
    ``facts`` (what the claim's computation found beside its tests, as its module's dataclass: the numbers
    and reasons its words are written from; None until computed) and ``rules`` (the round of rules it is
    judged by, the study's: :class:`~mtl_heads.study.rules.Rules`; its families and standard errors).

    A claim's computation fills ``key``, ``rule``, ``words``, ``tests``, ``verdict`` and ``facts``; its
    words (``question``, ``paper``, ``answer``, ``lines``, ``notes``) are written from them after."""

    key: str
    question: str = ""
    paper: str = ""
    rule: str = ""
    verdict: str = ""
    answer: str = ""
    words: dict = field(default_factory=lambda: REPLICATION)
    lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: dict[str, Test] = field(default_factory=dict)
    fragile: list[str] = field(default_factory=list)
    too_few: list[str] = field(default_factory=list)
    stability: str = ""  # "" (not checked), or the sentence of check_claims
    facts: object = field(default=None, repr=False)  # the claim module's facts, for its words
    rules: Rules = field(default=ROUND2, repr=False)

    @property
    def word(self) -> str:
        """The verdict as a word (``cannot be tested`` without one)."""
        return self.words.get(self.verdict, "cannot be tested")

    @property
    def stability_kind(self) -> str:
        """``stable``, ``fragile``, ``too few seeds`` or ``""`` (not checked)."""
        return ("fragile" if self.fragile else "too few seeds" if self.too_few else
                "stable" if self.stability.startswith("stable") else "")

    def add(self, test: Test) -> str:
        """Register ``test`` and return its slot, ``{key}``, for a line to hold where its p-values go.

        Its p-value is made plain on the way in: a ``p`` of None or NaN without a ``why`` reads ``no p-value``,
        a test with ``few`` reads :data:`~mtl_heads.study.rules.TOO_FEW`, and a test with a ``why`` has no p
        (NaN); a ``value`` of None is NaN.
        """
        key = test.key
        if "{" in key or "}" in key:
            raise ValueError(f"test key {key!r}: braces mark a test's slot in a line; name it without them")
        p = float(test.p) if test.p is not None else math.nan
        why = test.why or (TOO_FEW if test.few else "")
        if not why and not np.isfinite(p):
            why = "no p-value"
        self.tests[key] = replace(test, p=math.nan if why else p, why=why, what=dict(test.what or {}),
                                  value=math.nan if test.value is None else float(test.value),
                                  numbers=dict(test.numbers or {}), runs=list(test.runs or []))
        return slot(key)

    def adjust(self) -> None:
        """Holm-Bonferroni within each family of tests that have a p-value; a test whose family of m is too
        large for its floor (``m * floor >= ALPHA``) gets ``reach``: the sets it would need, 20 m. Under named
        families (round 3) a test no verdict reads is adjusted in a descriptive family of its kind
        (:meth:`~mtl_heads.study.rules.Rules.family`); under standard errors a Monte Carlo test whose adjusted p
        lies within 2 standard errors (times its Holm factor) of ALPHA gets ``unresolved``."""
        families: dict[str, list[Test]] = {}
        for test in self.tests.values():
            test.reach, test.unresolved = "", ""  # computed here, afresh each time
            test.family = self.rules.family(test.family, test.decides)
            families.setdefault(test.family, []).append(test)
        for tests in families.values():
            for test, adjusted in zip(tests, holm([t.p for t in tests])):
                test.adjusted = adjusted
            m = sum(np.isfinite(t.p) for t in tests)
            for test in tests:
                test.family_size = m
            if self.rules.standard_errors:
                for rank, test in enumerate(sorted((t for t in tests if np.isfinite(t.p)), key=lambda t: t.p)):
                    test.factor = float(m - rank)  # Holm's multiplier of the (rank + 1)-th smallest p
            for test in tests:
                if np.isfinite(test.p) and test.floor > 0 and m * test.floor >= ALPHA:
                    test.reach = (f"cannot reach significance: its null's exact law allows p >= {format_p(test.floor)}, "
                                  f"and Holm over {m} tests needs a p below {format_p(ALPHA / m)}" if test.exact_floor
                                  else f"cannot reach significance: {round(1 / test.floor) - 1} sets or shuffles "
                                  f"allow p >= {format_p(test.floor)}, and Holm over {m} tests needs at least {20 * m}")
                if self.rules.standard_errors and test.draws and np.isfinite(test.p) and \
                        unresolved(test.adjusted, test.p, test.draws, test.factor, ALPHA):
                    test.unresolved = (f"not resolved at {test.draws:,} draws: Holm {format_p(test.adjusted)} lies "
                                       f"within 2 standard errors ({_se(test.factor * test.standard_error)}) of "
                                       f"{ALPHA}; counted as not significant")

    def significant(self, key: str) -> bool:
        return key in self.tests and self.tests[key].significant

    def find(self, **fields) -> Test | None:
        """The first test whose ``what`` has every one of ``fields`` (a tuple matches a list), or None:
        ``claim.find(regime="dp", pair=["pos", "ner"], statistic="correlation")``."""
        wanted = {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}
        return next((t for t in self.tests.values() if all(t.what.get(k) == v for k, v in wanted.items())), None)

    def text_lines(self) -> list[str]:
        """The lines with each test's ``p raw, Holm adjusted`` (or ``cannot be tested: why``) in its slot."""
        def fill(slot: re.Match) -> str:
            return test_text(self.tests[slot[1]]) if slot[1] in self.tests else slot[0]  # a brace that is no slot

        return [SLOT.sub(fill, line) for line in self.lines]


def slot(key: str) -> str:
    """A test's place in a claim's line: its key in braces (``{POS}``), which :meth:`Claim.text_lines`
    fills with its p-values."""
    return "{" + key + "}"


def test_text(test: Test) -> str:
    """A test's p-values as its line shows them: ``p 0.001, Holm 0.004, stable``, with why it cannot be
    tested or reach significance, and what leaving a seed out does."""
    if test.why:
        return f"cannot be tested: {test.why}"
    notes = ([f"fragile: {'; '.join(test.fragile)}"] if test.fragile else []) + \
        ([too_few_text(test.too_few)] if test.too_few else [])
    stability = f" ({'; '.join(notes)})" if notes else ", stable" if test.checked else ""
    se = test.standard_error
    raw, adjusted = format_p(test.p), format_p(test.adjusted)
    if np.isfinite(se) and np.isfinite(test.factor):  # a Monte Carlo p, under rules that print its error (round 3)
        raw += f" ± {_se(se)}"
        adjusted += f" ± {_se(test.factor * se)}"
    return f"p {raw}, Holm {adjusted}" + (f"; {test.reach}" if test.reach else "") \
        + (f"; {test.unresolved}" if test.unresolved else "") + stability


def _se(value: float) -> str:
    """A standard error to 1 significant digit (``0.0007``), or ``0`` (every draw on one side)."""
    return "0" if value == 0 else f"{value:.1g}" if value >= 1e-4 else f"{value:.0e}"


def too_few_text(entries: list[str]) -> str:
    """``too few seeds to test with seed 1, 2 or 3 left out`` from ``["without seed 1", ...]``."""
    left = [entry.removeprefix("without seed ") for entry in entries]
    return f"too few seeds to test with seed {', '.join(left[:-1]) + ' or ' if len(left) > 1 else ''}{left[-1]} left out"


def cannot_reach(claim: Claim, keys: list[str]) -> bool:
    """Do a claim's deciding tests (``keys``, one at least) all fail to reach significance (:attr:`Test.reach`)?
    Its verdict then cannot be decided."""
    reach = [k for k in keys if k in claim.tests and claim.tests[k].reach]
    return bool(keys) and len(reach) == len(keys)


def unreachable(claim: Claim, keys: list[str]) -> str:
    """``""``, or the answer of a claim whose deciding tests (``keys``) all cannot reach significance
    (:func:`cannot_reach`)."""
    if not cannot_reach(claim, keys):
        return ""
    return f"cannot be tested: {next(claim.tests[k].reach for k in keys if k in claim.tests and claim.tests[k].reach)}"


# --- the study ----------------------------------------------------------------------------------------
@dataclass
class Study:
    """The runs, probe reports and head ablations of a study.

    runs: one row per run (:func:`mtl_heads.reports.comparison.compare_runs`, plus ``regime``);
    cells: ``{(tasks, regime): setting}`` (``tasks`` as ``pos`` or ``pos+ner+...``; where several
    settings share a cell, the one with the most runs, and a note says so); mtl: the task list of the
    MTL setting (the unpruned one with the most tasks) or None; reports: probe reports
    (:class:`mtl_heads.reports.probe_report.Report`; the first whose model is no run stands for the pretrained
    encoder); ablations: ``[(path, record)]`` of ``ablation.json`` files (:func:`read_ablations`);
    notes: what was found and not used, and why; left_out: the seed left out (stability), or None;
    retrainings: ``{run folder: seconds}`` of the runs trained again for their weights whose record's
    folder keeps the retraining's metrics (:data:`~mtl_heads.folders.RETRAINING_METRICS`, and :data:`~mtl_heads.folders.EARLIER_RETRAINING`
    where it was trained again more than once: the seconds of all of them); earlier_retrainings: how
    many such earlier retrainings the record keeps in all; annexes: ``{run folder: annex}`` of the runs of a study
    that another study read continues (:func:`mtl_heads.folders.annexes`: what the continuing study adds to the run,
    its retraining's metrics and ablations drawn again, which replace the record's of the same heads);
    annex_retrainings: how many retrainings' metrics the annexes keep (counted in ``retrainings``);
    rules: the round of rules its claims are judged by
    (:class:`~mtl_heads.study.rules.Rules`; default :data:`~mtl_heads.study.rules.ROUND2`); full_runs: the run
    table before any seed was left out (:meth:`without_seed` keeps it; None: ``runs``), from which claim 6's
    held-out stem cells are chosen under rules that fix their seeds (``Rules.stem_seeds``).
    """

    runs: pd.DataFrame
    cells: dict
    mtl: str | None
    reports: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    ablations: list = field(default_factory=list)
    left_out: int | None = None
    gates: dict = field(default_factory=dict, repr=False)  # run folder -> RunGates, read once
    retrainings: dict = field(default_factory=dict)  # run folder -> seconds of its retrainings
    earlier_retrainings: int = 0
    annex_retrainings: int = 0
    annexes: dict = field(default_factory=dict)  # run folder -> its annex in a study that continues it
    rules: Rules = ROUND2
    full_runs: pd.DataFrame | None = field(default=None, repr=False)
    configs: dict = field(default_factory=dict, repr=False)  # config.yaml path -> its dict, read once (config_of)
    _rows: tuple | None = field(default=None, init=False, repr=False, compare=False)  # run_row's index of runs
    _of_setting: dict | None = field(default=None, init=False, repr=False, compare=False)  # runs_of's cuts, made once

    def setting(self, tasks: str | None, kind: str) -> str | None:
        setting = self.cells.get((tasks, kind)) if tasks else None
        return setting if setting is not None and not self.runs_of(setting).empty else None

    @property
    def tasks(self) -> list[str]:
        """Tasks in the order of the MTL setting, then those of single-task settings only."""
        order = self.mtl.split("+") if self.mtl else []
        single = [t for t, _ in self.cells if "+" not in t]
        return list(dict.fromkeys(order + sorted(single)))

    @property
    def seeds(self) -> list[int]:
        return sorted(int(s) for s in self.runs["seed"].dropna().unique())

    def runs_of(self, setting: str) -> pd.DataFrame:
        """The rows of ``runs`` of one setting, in table order (empty for a setting without runs); the claims
        ask for each many times, so each is cut once per study (not to be changed in place)."""
        if self._of_setting is None:
            self._of_setting = {name: rows for name, rows in self.runs.groupby("setting", sort=False)}
        rows = self._of_setting.get(setting)
        return self.runs.iloc[:0] if rows is None else rows

    def run_row(self, folder) -> pd.Series | None:
        """The run table's row of a run folder (by resolved path, else by its last two path parts:
        ``<setting folder>/seed<N>``, for a study moved since), or None. A retraining of a run that did
        not reproduce its record (``<setting folder>/.seed<N>.retrained``, docs/ewt-study.sh's retrain
        stage) stands for that run: same config and seed, its own weights."""
        target = Path(str(folder))
        target = target.parent / record_folder_name(target.name)
        if self._rows is None:  # each run's resolved path and last two parts, the first row of each, made once
            resolved, tails = {}, {}
            for i, run in enumerate(self.runs["run"]):
                resolved.setdefault(Path(run).resolve(), i)
                tails.setdefault(Path(run).parts[-2:], i)
            self._rows = (resolved, tails)
        resolved, tails = self._rows
        found = resolved.get(target.resolve())
        found = tails.get(target.parts[-2:]) if found is None else found
        return None if found is None else self.runs.iloc[found]

    def ablation_row(self, record: dict) -> pd.Series | None:
        """:meth:`run_row` of the run an ablation.json read: its ``run`` (the folder as the ablation was given
        it), or the absolute ``run_resolved`` that records kept until 1 December 2026 (a machine's path, no
        longer written: a record is shared data)."""
        return self.run_row(record.get("run_resolved") or record["run"])

    def without_seed(self, seed: int) -> Study:
        """The same study without the runs of ``seed``, their probe reports and their ablations; its
        ``full_runs`` stays the run table with every seed."""
        runs = self.runs[self.runs["seed"] != seed]
        reports = [r for r in self.reports if (row := self.report_row(r)) is None or row["seed"] != seed]
        ablations = [(p, a) for p, a in self.ablations
                     if (row := self.ablation_row(a)) is None or row["seed"] != seed]
        return replace(self, runs=runs, reports=reports, ablations=ablations, left_out=seed, gates=self.gates,
                       configs=self.configs,
                       full_runs=self.full_runs if self.full_runs is not None else self.runs)

    def report_row(self, report) -> pd.Series | None:
        """The run table's row of the run a probe report probed, or None (the pretrained encoder)."""
        model = report.meta.get("model")
        if report.meta.get("model_kind") != "run" or not model:
            return None
        return self.run_row(model)


def _budget(runs: pd.DataFrame) -> pd.Series:
    if "prune.budget" in runs:
        return runs["prune.budget"].where(runs["prune.budget"].notna(), None)
    return pd.Series([None] * len(runs), index=runs.index)


def _cell_preference(runs: pd.DataFrame, kind: str) -> tuple:
    """How a setting ranks for its (tasks, regime) cell: the reference L0 lambda first, then trained from
    the pretrained encoder (no ``init``; static pruning always has one), then on one schedule (no
    ``train.phases``), then the most seeds; so that a searched lambda, a DP run trained on (round 2's matched
    schedule) or a DP run on SP's schedule in phases (round 3's matched runs) never becomes the regime's
    setting, however many seeds it has."""
    def missing(value) -> bool:  # unset (None or NaN in the run table) or empty
        return is_null(value) or not str(value)

    lam = runs["prune.lambda"].iloc[0] if "prune.lambda" in runs else "auto"
    init = runs["init"].iloc[0] if "init" in runs else None
    phases = runs["train.phases"].iloc[0] if "train.phases" in runs else None
    fresh = kind == "sp" or missing(init)
    return str(lam) in ("auto", "nan", "None"), fresh, missing(phases), len(runs)


def read_ablations(specs: list[str]) -> tuple[list[tuple[Path, dict]], list[str]]:
    """``([(path, record)], notes)``: the ``ablation.json`` files of ``python -m mtl_heads ablate`` in
    ``specs`` (files, or folders searched at any depth); one that cannot be read is a note naming it."""
    found, notes = [], []
    for spec in map(Path, specs):
        paths = [spec] if spec.is_file() and spec.name == ABLATION_FILE else \
            sorted(spec.rglob(ABLATION_FILE)) if spec.is_dir() else []
        for path in paths:
            try:
                record = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as err:
                notes.append(f"{path}: not used ({err})")
                continue
            if not isinstance(record, dict) or not isinstance(record.get("methods"), dict) or "run" not in record:
                notes.append(f"{path}: not used (no 'run' and 'methods': not written by python -m mtl_heads ablate)")
                continue
            found.append((path, record))
    return found, notes


def folder_of(runs: pd.DataFrame, setting: str) -> str:
    """What names a setting's runs better than the run table's generic ``dep (dynamic) #3``: the folder
    holding them (``dep-dp-matched``) when it holds no other setting's runs, else the run folders themselves
    (``runs/tour, runs/llama``: runs side by side in one folder).

    Args:
        runs: the run table (one row per run, with ``run`` and ``setting``): every setting, so that a
            folder shared with another setting is seen.
        setting: the setting to name.
    """
    folders = runs["run"].map(lambda run: Path(str(run)))
    mine = folders[runs["setting"] == setting]
    parents = set(mine.map(lambda path: path.parent))
    if len(parents) == 1 and not folders[runs["setting"] != setting].map(lambda path: path.parent).isin(parents).any():
        return next(iter(parents)).name
    return ", ".join(shown(path) for path in mine)


def one_encoder(runs: pd.DataFrame) -> None:
    """Refuse a study whose runs fine-tuned different encoders (their ``encoder.name``): the claims compare
    the settings of one encoder, and runs of another would take a cell of the score grid in their place.
    The ConfigError names each encoder with its runs (``runs``: the run table, with ``run``)."""
    if "encoder.name" not in runs or runs["encoder.name"].nunique(dropna=False) < 2:
        return
    found = "; ".join(f"{name}: {heads_text([shown(run) for run in group], 8)}"
                      for name, group in runs.groupby("encoder.name", sort=False, dropna=False)["run"])
    raise ConfigError(f"runs of {runs['encoder.name'].nunique(dropna=False)} encoders (encoder.name), and the claims "
                      f"compare the settings of one encoder: {found}; name the folders of one encoder's runs")


def build_study(runs: pd.DataFrame, notes: list[str], specs: list[str], rules: Rules = ROUND2) -> Study:
    """The study of a run table (``compare_runs(specs).runs``, whose ``notes`` are kept): each run's regime
    and cell, the MTL setting, and the probe reports and head ablations found in ``specs``; judged by
    ``rules`` (default round 2's)."""
    one_encoder(runs)
    runs = runs.copy()
    runs["regime"] = [regime(p, b) for p, b in zip(runs["prune"], _budget(runs))]
    cells, notes = {}, [str(n) for n in notes]
    for (tasks, kind), group in runs.groupby(["tasks", "regime"], sort=False):
        settings = list(dict.fromkeys(group["setting"]))
        chosen = max(settings, key=lambda s: _cell_preference(group[group["setting"] == s], kind))
        cells[(tasks, kind)] = chosen
        if len(settings) > 1:  # each named with its runs' folder too (dep-dp-matched), which says what it is
            named = [f"{s} [{folder_of(runs, s)}]" for s in settings]
            notes.append(f"{tasks}, {REGIME_NAMES.get(kind, kind)}: several settings ({', '.join(named)}); "
                         f"the claims use '{chosen}' (the reference lambda, trained from the pretrained encoder "
                         "unless static, on one schedule, then the most seeds); the others are compared in claim 5 "
                         "where they pair with SP")
    multi = [t for t, k in cells if "+" in t and k == "none"] or [t for t, _ in cells if "+" in t]
    mtl = max(multi, key=lambda t: t.count("+")) if multi else None
    for (tasks, kind), setting in cells.items():  # the grid and the claims read single-task settings and MTL's
        if "+" in tasks and tasks != mtl:
            notes.append(f"{setting} [{folder_of(runs, setting)}]: a multi-task setting of other tasks than MTL "
                         f"({mtl}, the unpruned setting with the most tasks); not in the score grid or the claims")
    reports = []
    for spec in map(Path, specs):
        found = walk_runs(spec, is_run=is_probe_report, is_unfinished=lambda p: False)[0] if spec.is_dir() else []
        for folder in ([spec] if is_probe_report(spec) else found):
            try:
                reports.append(read_report(folder))
            except (OSError, ValueError) as err:
                notes.append(f"{folder}: not used ({err})")
    ablations, more = read_ablations(specs)
    study = Study(runs, cells, mtl, reports, notes + more, ablations, rules=rules)
    study.annexes = annexes(list(runs["run"]), specs)
    matched = []
    for path, record in ablations:  # each matched to its run once
        row = study.ablation_row(record)
        if row is None:
            study.notes.append(f"{path}: its run {record['run']} is not among the study's runs; not used")
        else:
            matched.append((path, record, str(row["run"])))
    study.ablations, stand_ins = [], {}
    for path, record, run in _superseded(study, matched):
        study.ablations.append((path, record))
        if match_name(RETRAINED_FOLDER, Path(str(record["run"])).name):
            stand_ins.setdefault(run, (Path(str(record["run"])).name, [], []))[1].append(
                (path, record.get("run_metrics_sha256")))
    kept = {}  # run folder -> [(file, metrics, digest)] of its retrainings that the record's folder keeps
    for run in map(Path, study.runs["run"]):
        # a run that started from a retraining's weights (claim 5's matched DP): the table's init reads seed*
        init = str(read_yaml(run / "config.yaml").get("init") or "") if (run / "config.yaml").is_file() else ""
        row = study.run_row(init) if match_name(RETRAINED_FOLDER, Path(init).name) else None
        if row is not None:
            stand_ins.setdefault(str(row["run"]), (Path(init).name, [], []))[2].append(run)
        own = kept_retrainings(run, study.notes)
        annex = Path(study.annexes[str(run)]) if str(run) in study.annexes else None
        added = [(shown(annex / name), metrics, digest)
                 for name, metrics, digest in (kept_retrainings(annex, study.notes) if annex is not None else [])]
        kept[run] = own + added  # the record's folder's first, then the annex's (made later, by the continuing study)
        seconds = [s for s in (as_number(metrics.get("seconds")) for _, metrics, _ in kept[run]) if s is not None]
        if seconds:
            study.retrainings[str(run)] = sum(seconds)
        study.earlier_retrainings += max(len(own) - 1, 0)
        study.annex_retrainings += len(added)
    study.notes += [_retraining_note(Path(run), retraining, paths, started, kept.get(Path(run), []))
                    for run, (retraining, paths, started) in stand_ins.items()]
    return study


def _superseded(study: Study, matched: list[tuple[Path, dict, str]]) -> list[tuple[Path, dict, str]]:
    """``matched`` (``(path, record, run folder)`` of each ablation matched to its run) without the ablations that a
    continuing study drew again in the run's annex (:attr:`Study.annexes`): the same heads, null and tasks of the
    same run, the annex's read and the earlier one named in a note as not used."""
    def key(record: dict, run: str) -> tuple:
        return run, tuple(sorted(map(str, record.get("heads") or []))), record.get("matched", "layer"), \
            tuple(sorted(map(str, record.get("tasks") or [])))

    def in_annex(path: Path, run: str) -> bool:
        annex = study.annexes.get(run)
        return annex is not None and path.resolve().is_relative_to(Path(annex).resolve())

    again = {key(record, run): path for path, record, run in matched if in_annex(path, run)}
    kept = []
    for path, record, run in matched:
        later = again.get(key(record, run))
        if later is not None and not in_annex(path, run):
            study.notes.append(f"{shown(path)}: not used: drawn again in {shown(later.parent)} (the same heads, null "
                               f"and tasks of {shown(run)}, in its annex of the study that continues it)")
        else:
            kept.append((path, record, run))
    return kept


def kept_retrainings(run: Path, notes: list[str]) -> list[tuple[str, dict, str]]:
    """``[(file name, metrics, SHA-256 of the file)]`` of the retrainings of a run whose record's folder
    keeps their metrics.json, the first first: :data:`~mtl_heads.folders.EARLIER_RETRAINING` by number, then
    :data:`~mtl_heads.folders.RETRAINING_METRICS` (the latest). A file that cannot be read is a note in ``notes``."""
    earlier = sorted((int(m["k"]), f) for f in (run.iterdir() if run.is_dir() else [])
                     if (m := match_name(EARLIER_RETRAINING, f.name)))
    kept = []
    for path in [f for _, f in earlier] + [run / RETRAINING_METRICS]:
        try:
            metrics = read_json(path)
        except UnreadableFile as err:
            notes.append(f"{err}: not used")
            continue
        if metrics is not None:
            kept.append((path.name, metrics, file_sha256(path)))
    return kept


def as_number(value) -> float | None:
    """A record's value (seconds, a score) as a float; None where it is absent or no number (a bool is none)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _retraining_note(run: Path, retraining: str, paths: list[tuple[Path, str | None]], started: list[Path],
                     kept: list[tuple[str, dict, str]]) -> str:
    """The note of a run whose ablations (``paths``: each ablation.json with the digest of the metrics.json
    whose weights it read, ``run_metrics_sha256``, None in records older than it) read a retraining's weights
    (``<setting>/.seed<N>.retrained``), or whose weights other runs (``started``: claim 5's DP on SP's
    schedule) started from, with the retrainings' test scores (``kept``: :func:`kept_retrainings`, ``[]``
    where the record's folder keeps none) against the record's.

    It says the retraining did not reproduce the record only on evidence the record keeps: an ablation of
    it (docs/ewt-study.sh ablates a retraining only when it did not reproduce, else the record's folder
    holds its weights) or a test score of the kept metrics that differs from the record's. A run started
    from a retraining with neither (an earlier comparison's, since relaxed) gets no such word. A run trained
    again more than once (its weights lost with a machine), or an ablation whose digest is not the kept
    retraining's, gets one sentence per retraining, naming what read its weights."""
    record = (read_json(run / "metrics.json") or {}) if kept else {}
    digests = [digest for _, _, digest in kept]
    named = {}  # which retraining's weights (an index of kept; -1 one it does not keep; None not named) -> ablations
    for path, digest in paths:
        if digest is None:  # an older record: where one retraining is kept, the one it read
            key = 0 if len(kept) == 1 else None
        else:
            key = digests.index(digest) if digest in digests else -1
        named.setdefault(key, []).append(path)
    if not kept or (len(kept) == 1 and set(named) <= {0}):
        return _one_retraining_note(run, retraining, [path for path, _ in paths], started,
                                    kept[0][1] if kept else {}, record)
    differs = any(_scores(record, again)[1] for _, again, _ in kept)
    times = f" {len(kept)} times" if len(kept) > 1 else ""
    note = (f"{shown(run)}: trained again{times} for its weights ({retraining}: same config and seed)"
            + (", not reproducing the record's files" if paths or differs else "")
            + "; the record's scores are the first training's.")
    for index, (name, again, _) in enumerate(kept):
        seconds = as_number(again.get("seconds"))
        read = named.get(index, [])
        note += (f" Retraining {index + 1} ({name}): test scores " + (", ".join(_scores(record, again)[0]) or "none")
                 + (f"; it took {seconds / 3600:.1f} hours" if seconds is not None else "")
                 + (f"; {_ablations(read)} read its weights." if read else "; no ablation names its weights."))
    if named.get(-1):
        note += (f" {_ablations(named[-1])} read weights whose metrics.json the record does not keep (their "
                 "run_metrics_sha256 is none of these).")
    unnamed = [f"{_ablations(named[None])} read"] if named.get(None) else []
    unnamed += [f"{_started(started)} started from"] if started else []
    if unnamed:
        note += (f" {' and '.join(unnamed)} the weights of one of them, not named (ablations name them, by "
                 "run_metrics_sha256, since 28 November 2026; runs started from one do not).")
    return note


def _ablations(paths: list[Path]) -> str:
    """``2 ablations (a, b)``: the folders of ablation.json files."""
    return (f"{len(paths)} ablation{'s' if len(paths) != 1 else ''} "
            f"({', '.join(path.parent.name for path in paths)})")


def _started(runs: list[Path]) -> str:
    """``2 runs (a, b)``: the runs that started from a retraining's weights."""
    return f"{len(runs)} run{'s' if len(runs) != 1 else ''} ({', '.join(shown(r) for r in runs)})"


def _scores(record: dict, again: dict) -> tuple[list[str], bool]:
    """``(["pos accuracy 96.12 (the record: 95.80)", ...], differs)``: a retraining's test scores
    (``again``: its metrics) against the record's (``record``: its metrics.json), and whether one differs."""
    scores, differs = [], False
    for task, new in (again.get("test") or {}).items():
        metric = main_metric(task, new)
        old = as_number((record.get("test") or {}).get(task, {}).get(metric))
        if metric is not None and as_number(new.get(metric)) is not None and old is not None:
            scores.append(f"{task} {metric} {new[metric]:.2f} (the record: {old:.2f})")
            differs |= new[metric] != old
    return scores, differs


def _one_retraining_note(run: Path, retraining: str, paths: list[Path], started: list[Path], again: dict,
                         record: dict) -> str:
    """:func:`_retraining_note` where the record keeps one retraining's metrics (``again``) or none
    (``{}``), and every ablation read that one."""
    what = [f"{_ablations(paths)} read"] if paths else []
    if started:
        what.append(f"{_started(started)} started from")
    scores, differs = _scores(record, again)
    note = f"{shown(run)}: {' and '.join(what)} the weights of its retraining ({retraining}: same config and seed)"
    if paths or differs:
        note += ", which did not reproduce the record's files; the record's scores are the first training's"
    else:
        note += ", not the record's own"
    if not again:
        return note + f" (the retraining's scores are not in the record: no readable {RETRAINING_METRICS})"
    seconds = as_number(again.get("seconds"))
    return (note + f". The retraining's test scores ({RETRAINING_METRICS}): " + (", ".join(scores) or "none")
            + (f"; it took {seconds / 3600:.1f} hours" if seconds is not None else ""))


# --- numbers and names as text, the same in every claim ---------------------------------------------------
def mean_std(values: np.ndarray | list[float], digits: int = 2, count: bool = True) -> str:
    """``mean ± sample std (n=seeds)``; the std only with two or more values, ``(n=..)`` with ``count``."""
    values = np.asarray(values, dtype=float)
    if not len(values):
        return "n/a"
    text = f"{values.mean():.{digits}f}"
    return text + (f" ± {values.std(ddof=1):.{digits}f}" if len(values) > 1 else "") \
        + (f" (n={len(values)})" if count else "")


def heads_text(names: list[str], limit: int = 16) -> str:
    """At most ``limit`` head names, then how many more."""
    more = f", and {len(names) - limit} more" if len(names) > limit else ""
    return (", ".join(names[:limit]) or "none") + more


def metric_name(score: str) -> str:
    """The metric of a score column, as papers write it: ``test dep las`` -> ``LAS``, ``accuracy`` as is."""
    metric = score.split(" ", 2)[2]
    return metric.upper() if len(metric) <= 3 else metric


def listed(names: list[str]) -> str:
    """``A, B``, or ``none``."""
    return ", ".join(names) or "none"


def task_name(task: str) -> str:
    """A task as the claims write it: its id in capitals (``pos`` -> ``POS``)."""
    return task.upper()


def mtl_name(setting: str | None) -> str:
    """An MTL setting (``pos+ner+dep+con+srl``, its tasks joined by ``+``) as the claims write it: ``MTL-5``;
    ``MTL`` for a study without one (None)."""
    return f"MTL-{setting.count('+') + 1}" if setting else "MTL"


def display_name(study: Study, tasks: str) -> str:
    """A setting's tasks as the claims write them: ``POS``, or ``MTL-5`` for the study's MTL setting."""
    return mtl_name(study.mtl) if tasks == study.mtl else task_name(tasks)


def run_folders(study: Study, *settings: str | None) -> list[str]:
    """The run folders of ``settings`` (None skipped), in table order: the runs behind a test."""
    return [str(r) for s in settings if s is not None for r in study.runs_of(s)["run"]]


def config_of(study: Study, setting: str) -> dict:
    """The config of a setting's first run."""
    path = Path(study.runs_of(setting)["run"].iloc[0]) / "config.yaml"
    if path not in study.configs:  # read once per study (and the studies check_claims makes with a seed left out)
        study.configs[path] = read_yaml(path)
    return study.configs[path]


def score_column(runs: pd.DataFrame, task: str, role: str = "test") -> str | None:
    """The run table's main score column of ``task`` (``test pos accuracy``), or None."""
    found = [c for c in runs.columns if c.startswith(f"{role} {task} ")]
    return found[0] if found else None


def majority(verdicts: int, total: int) -> bool:
    return total > 0 and verdicts > total / 2


def share(hits: int, total: int) -> str:
    """yes (every case), partly (some), no (none)."""
    return "yes" if total and hits == total else "partly" if hits else "no"
