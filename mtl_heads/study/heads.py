"""The gates the head claims read (2, 3, 5 and 6): a setting's gates, a regime's single-task settings,
the permutation nulls of their overlaps (:func:`gate_baseline`) and their stem cells (:func:`stem_heads`)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mtl_heads.study.core import Claim, Study, Test, run_folders, slot, task_name
from mtl_heads.study.rules import NEAR_ALL, ROUND2, Rules
from mtl_heads.gates.read import moved_flags, read_run
from mtl_heads.gates.grids import kept_heads, permutation_baseline
from mtl_heads.gates.survivors import stem_cells
from mtl_heads.reports.significance import format_p
from mtl_heads.stats import jaccard_null

__all__ = ["Gates", "setting_gates", "regime_gates", "gate_baseline", "stricter", "Unpruned", "unpruned",
           "unpruned_text", "not_pruned", "pair_tests", "pair_words",
           "stem_table", "stem_heads", "gate_runs"]


@dataclass
class Gates:
    """The gates of one setting's runs: ``grids`` ([layers, heads] each), ``moved`` (whether each
    run's gates moved), ``block`` (query heads per gate), ``setting`` (its name in the run table) and
    ``task`` (its task id, ``pos``, for a regime's single-task setting; else ``""``)."""

    grids: list
    moved: list
    block: int
    setting: str = ""
    task: str = ""

    @property
    def kept(self) -> np.ndarray:
        """``[layers * heads]`` bool: kept in more than half of the runs (:func:`kept_heads`)."""
        return kept_heads(self.grids)

    @property
    def pruned(self) -> bool:
        """False when the setting keeps at least :data:`NEAR_ALL` of its heads: it did not prune."""
        return bool(self.kept.mean() < NEAR_ALL)

    def kept_text(self) -> str:
        return f"{int(self.kept.sum())} of {self.kept.size}"


def setting_gates(study: Study, setting: str, task: str = "") -> Gates:
    """The gates of a setting's runs in ``study`` (``task``: its task id, for :attr:`Gates.task`; default
    ``""``); each run folder is read once per study (its seed-left-out copies share the cache)."""
    runs = []
    for folder in study.runs_of(setting)["run"]:
        if folder not in study.gates:
            study.gates[folder] = read_run(Path(folder))
        runs.append(study.gates[folder])
    flags = moved_flags({setting: runs})[setting]
    return Gates([r.values for r in runs], flags, max(r.group_size for r in runs), setting, task)


def regime_gates(study: Study, kind: str) -> dict[str, Gates]:
    """``{TASK: gates}`` of the single-task settings of a regime, in task order (``TASK`` as the claims
    write it, ``POS``; each :class:`Gates` knows its task id)."""
    return {task_name(t): setting_gates(study, s, t) for t in study.tasks if (s := study.setting(t, kind)) is not None}


def gate_baseline(gates: dict[str, Gates], rules: Rules = ROUND2) -> pd.DataFrame:
    """:func:`permutation_baseline` over ``{label: gates}`` with the shuffles and seed of ``rules`` (default round
    2's), and per pair the grid's ``heads`` and, under rules with exact tests, the global Jaccard null computed
    exactly (:func:`mtl_heads.stats.jaccard_null`: ``jaccard p`` and ``jaccard null mean`` replaced, the Monte
    Carlo ones kept as ``jaccard mc p`` and ``jaccard mc null mean``)."""
    table = permutation_baseline({n: g.grids for n, g in gates.items()}, {n: g.moved for n, g in gates.items()},
                                 shuffles=rules.shuffles, seed=rules.seed, block=max(g.block for g in gates.values()))
    if table.empty:
        return table
    table["heads"] = [gates[a].kept.size for a in table["A"]]
    if rules.exact:
        table["jaccard mc p"], table["jaccard mc null mean"] = table["jaccard p"], table["jaccard null mean"]
        exact = [_exact_jaccard(gates[row["A"]], gates[row["B"]]) for row in table.to_dict("records")]
        table["jaccard null mean"] = [mean for mean, _ in exact]
        table["jaccard p"] = [p for _, p in exact]
    return table


def _exact_jaccard(a: Gates, b: Gates) -> tuple[float, float]:
    """The exact global null of two settings' kept-head Jaccard (:func:`mtl_heads.stats.jaccard_null`): the null's
    mean and the one-sided p of their overlap."""
    kept_a, kept_b = a.kept.ravel(), b.kept.ravel()
    return jaccard_null(kept_a.size, int(kept_a.sum()), int(kept_b.sum()), int((kept_a & kept_b).sum()))


def stricter(row: dict, prefix: str = "") -> float:
    """The larger of a row's global and layer-aware p (``prefix`` ``jaccard `` for the overlap); NaN when either is."""
    values = [row.get(f"{prefix}p"), row.get(f"{prefix}layer p")]
    return math.nan if any(v is None or not np.isfinite(v) for v in values) else max(values)


@dataclass(frozen=True)
class Unpruned:
    """A setting that did not prune (it keeps at least :data:`NEAR_ALL` of its heads): ``name`` (``POS``),
    ``kept`` and ``heads`` (all of them)."""

    name: str
    kept: int
    heads: int


def unpruned(gates: dict[str, Gates], names) -> list[Unpruned]:
    """The named settings of ``gates`` that did not prune, in the order of ``names``."""
    return [Unpruned(n, int(gates[n].kept.sum()), gates[n].kept.size) for n in names if not gates[n].pruned]


def unpruned_text(settings: list[Unpruned]) -> str:
    """'' or ``X did not prune (keeps 72 of 72)`` for each of ``settings``."""
    return "; ".join(f"{s.name} did not prune (keeps {s.kept} of {s.heads})" for s in settings)


def not_pruned(gates: dict[str, Gates], names) -> str:
    """'' or ``X did not prune (keeps 72 of 72)`` for the named settings that did not."""
    return unpruned_text(unpruned(gates, names))


def pair_tests(claim: Claim, key: str, row: dict, why: str, decides: bool = True, what: dict | None = None,
               runs: list[str] | None = None) -> None:
    """Registers a pair's gate correlation and kept-head Jaccard against both nulls as the tests ``{key}
    correlation`` (shown beside) and ``{key} Jaccard`` (it decides a verdict with ``decides``); their line is
    :func:`pair_words`.

    Args:
        claim: the claim the two tests are registered with.
        key: the pair's name, the start of both tests' keys.
        row: the pair's row of :func:`gate_baseline`.
        why: why the Jaccard test cannot be tested (a setting that did not prune), or ``""``.
        decides: whether the Jaccard test decides the verdict (default True).
        what: the pair's fields (regime and pair, or setting), to which each test adds its ``statistic``.
        runs: the run folders of the two settings.
    """
    what = what or {}
    floor, draws = 1 / (int(row["shuffles"]) + 1), int(row["shuffles"])
    claim.add(Test(f"{key} correlation", stricter(row), floor=floor, decides=False, draws=draws,
                   what={**what, "statistic": "correlation"}, value=row["correlation"], runs=runs,
                   numbers={"null_mean": row["null mean"], "null_95": row["null 95%"], "p_global": row["p"],
                            "layer_null_mean": row["layer null mean"], "p_layer": row["layer p"]}))
    jaccard_why = why or (row["jaccard note"] if isinstance(row.get("jaccard note"), str) else "")
    exact = "jaccard mc p" in row  # the global null exact: the layer-aware one alone is drawn
    layer_floor = floor if not exact or row["jaccard layer p"] >= row["jaccard p"] else 0.0
    claim.add(Test(f"{key} Jaccard", stricter(row, "jaccard "), jaccard_why, floor=layer_floor, decides=decides,
                   draws=draws if not exact or row["jaccard layer p"] >= row["jaccard p"] else 0,
                   what={**what, "statistic": "jaccard"}, value=row["jaccard"], runs=runs,
                   numbers={"null_mean": row["jaccard null mean"], "p_global": row.get("jaccard p"),
                            "layer_null_mean": row["jaccard layer null mean"],
                            "p_layer": row.get("jaccard layer p"), "kept_a": row["kept A"],
                            "kept_b": row["kept B"]}))


def pair_words(claim: Claim, key: str) -> str:
    """A pair's gate correlation and kept-head Jaccard against both nulls, as its line shows them, from its
    two tests (:func:`pair_tests`), with their slots."""
    corr, jaccard = claim.tests[f"{key} correlation"], claim.tests[f"{key} Jaccard"]
    c, j = corr.numbers, jaccard.numbers
    return (f"gate correlation {corr.value:.2f} (global null: mean {c['null_mean']:.2f}, 95th pct "
            f"{c['null_95']:.2f}, p {format_p(c['p_global'])}; layer-aware: mean {c['layer_null_mean']:.2f}, p "
            f"{format_p(c['p_layer'])}; the stricter: {slot(corr.key)}); kept-head Jaccard {jaccard.value:.2f} (global "
            f"null mean {j['null_mean']:.2f}, layer-aware {j['layer_null_mean']:.2f}; {slot(jaccard.key)}); "
            f"heads kept {int(j['kept_a'])} and {int(j['kept_b'])}")


def stem_table(gates: dict[str, Gates]) -> pd.DataFrame | None:
    """:func:`stem_cells` of the settings that pruned (None with fewer than two)."""
    pruned = {n: g for n, g in gates.items() if g.pruned}
    if len(pruned) < 2:
        return None
    return stem_cells({n: g.grids for n, g in pruned.items()}, {n: g.moved for n, g in pruned.items()})


def stem_heads(study: Study, kind: str, without: str | None = None) -> list[str]:
    """The stem cells of a regime in ``study``: heads kept in every single-task setting that pruned;
    with ``without`` (a task), that task's own setting left out (claim 6's held-out sets: the heads
    found without T, ablated in T's runs). ``[]`` with fewer than two such settings."""
    gates = {n: g for n, g in regime_gates(study, kind).items() if without is None or n != task_name(without)}
    table = stem_table(gates)
    return [] if table is None else list(table.loc[table["stem cell"], "name"])


def gate_runs(study: Study, gates: dict[str, Gates], names=None) -> list[str]:
    """The run folders of the named settings of ``gates`` (all by default)."""
    return run_folders(study, *(gates[n].setting for n in (names if names is not None else gates)))
