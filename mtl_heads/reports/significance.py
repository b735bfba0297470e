"""Is a difference between two settings more than seed noise? (``python -m mtl_heads compare test=A,B``).

For each score two settings share (per task, test and dev main metric; the mean score too when the
settings have the same tasks), :func:`significance_table` gives the mean ± sample standard deviation
of each over its seeds, the difference ``B - A``, and two two-sided tests over the seeds:

- Welch's t-test (:func:`mtl_heads.stats.welch`: ``scipy.stats.ttest_ind(a, b, equal_var=False)``), which
  assumes each setting's scores are normal, with variances that may differ;
- an exact permutation test (:func:`mtl_heads.stats.permutation_test`): the difference of means for every way to
  split the pooled seeds into groups of the two sizes; p = the share of splits whose difference is
  at least as large (in absolute value) as the one observed. It assumes nothing about the
  distribution, but with few seeds it has few splits: 3 + 3 seeds give C(6, 3) = 20 splits, so its
  smallest possible p is 2/20 = 0.1 (it can never reach 0.05); 2 + 2 give 6, p >= 1/3.

A setting with fewer than two seeds cannot be tested (its row says so). No correction is made for
testing many scores or pairs at once.

Every p-value the reports print goes through :func:`format_p` (this table's and the claims' of
:mod:`mtl_heads.study`), so that a p prints one way everywhere.
"""
from __future__ import annotations

import itertools
import math

import pandas as pd

from mtl_heads.config import ConfigError
from mtl_heads.stats import permutation_test, welch

__all__ = ["ALPHA", "TESTS_TEXT", "format_p", "resolve_pair", "resolve_pairs", "shared_scores", "significance_table",
           "format_significance"]

TESTS_TEXT = ("Tests, two-sided, over the seeds of each setting: Welch's t-test (unequal variances; "
              "scipy.stats.ttest_ind with equal_var=False) and an exact permutation test of the difference of "
              "means (every split of the pooled seeds into groups of the two sizes). The permutation test's "
              "smallest possible p is 2 / (number of splits) for equal groups: 0.1 with 3 + 3 seeds (20 splits), "
              "1/3 with 2 + 2, so with so few seeds it cannot reach 0.05. difference = B - A. A setting with "
              "fewer than 2 seeds cannot be tested. No correction for testing many scores or pairs.")
ALPHA = 0.05  # the significance level: the line that format_p shows which side of


def format_p(value: float | None, missing: str = "n/a") -> str:
    """A p-value as every report prints it: 2 significant digits; within 10% of :data:`ALPHA` (0.045 to
    0.055) 3, and more while it would print as the line itself (0.04997 as 0.04997, not 0.05), so that
    the side of the line shows.

    Args:
        value: the p-value; None or NaN when there is none.
        missing: what a missing p prints as (default ``n/a``; the significance table's cells use ``""``).
    """
    if value is None or pd.isna(value):
        return missing
    value = float(value)
    if abs(value - ALPHA) > 0.1 * ALPHA:
        return f"{value:.2g}"
    digits = 3
    while float(f"{value:.{digits}g}") == ALPHA and value != ALPHA and digits < 8:
        digits += 1
    return f"{value:.{digits}g}"


# --- which settings -------------------------------------------------------------------------------
def resolve_pair(text: str, settings: list[str]) -> tuple[str, str]:
    """The two settings named by ``A,B`` (names as the table prints them; a name may hold a comma,
    ``pos (dynamic, budget=36)``: the split is the one comma that leaves two known names).

    Raises ``ConfigError`` starting ``test=`` for anything else: one name, an unknown name, the same
    setting twice, or a text that splits into known names in more than one way.
    """
    known = ", ".join(repr(s) for s in settings)
    splits = [(text[:i].strip(), text[i + 1:].strip()) for i, c in enumerate(text) if c == ","]
    found = [(a, b) for a, b in splits if a in settings and b in settings]
    if not splits:
        raise ConfigError(f"test={text!r}: expected two settings as A,B (or 'all'); settings: {known}")
    if not found:
        raise ConfigError(f"test={text!r}: not two settings of the table joined by a comma; settings: {known}")
    if len(found) > 1:
        raise ConfigError(f"test={text!r}: splits into settings in {len(found)} ways "
                          f"({'; '.join(' vs '.join(p) for p in found)}); rename with care")
    a, b = found[0]
    if a == b:
        raise ConfigError(f"test={text!r}: a setting against itself; name two different settings")
    return a, b


def _tasks(runs: pd.DataFrame) -> dict[str, set[str]]:
    """``{setting: its tasks}`` from a run table's ``tasks`` column (``pos+ner``)."""
    first = runs.drop_duplicates("setting")
    return {s: set(str(t).split("+")) for s, t in zip(first["setting"], first["tasks"])}


def resolve_pairs(specs: list[str], runs: pd.DataFrame) -> list[tuple[str, str]]:
    """The pairs of settings to test, each once, in the order given.

    Args:
        specs: ``A,B`` texts (:func:`resolve_pair`), or ``all``: every pair of settings (in table
            order) that share a task.
        runs: the run table (``setting``, ``tasks`` columns) of the comparison.

    Raises ``ConfigError`` (``test=...``) for a bad spec or a pair that shares no task.
    """
    settings = list(dict.fromkeys(runs["setting"]))
    tasks = _tasks(runs)
    pairs = []
    for spec in specs:
        if spec.strip() == "all":
            pairs += [(a, b) for a, b in itertools.combinations(settings, 2) if tasks[a] & tasks[b]]
            continue
        a, b = resolve_pair(spec, settings)
        if not tasks[a] & tasks[b]:
            raise ConfigError(f"test={spec!r}: {a!r} and {b!r} share no task, so no score to compare")
        pairs.append((a, b))
    return list(dict.fromkeys(pairs))


def shared_scores(runs: pd.DataFrame, a: str, b: str) -> list[str]:
    """The score columns of the run table both settings have a value in: per task ``test <task> <metric>``
    and ``dev <task> <metric>`` (test first), and ``test score`` / ``dev score`` (the mean over the
    tasks) only when the two settings have the same tasks, more than one (with one task it is that
    task's score)."""
    tasks = _tasks(runs)
    mean_too = tasks[a] == tasks[b] and len(tasks[a]) > 1
    rows = {s: runs[runs["setting"] == s] for s in (a, b)}
    columns = []
    for role in ("test", "dev"):
        for column in runs.columns:
            if not column.startswith(f"{role} ") or (column == f"{role} score" and not mean_too):
                continue
            if all(rows[s][column].notna().any() for s in (a, b)):
                columns.append(column)
    return columns


def significance_table(runs: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """One row per pair and shared score (:func:`shared_scores`).

    Args:
        runs: the run table of the comparison (one row per run: ``setting``, ``tasks``, score columns).
        pairs: ``(A, B)`` settings (:func:`resolve_pairs`).

    Columns: ``A``, ``B``, ``score``, ``n A``, ``mean A``, ``std A`` (sample, ddof 1), ``n B``,
    ``mean B``, ``std B``, ``difference`` (mean B - mean A), ``welch t``, ``welch df``, ``welch p``,
    ``permutation p``, ``splits``, ``exact``, ``smallest p``, ``note`` (why a row is not tested).
    """
    rows = []
    for a, b in pairs:
        for score in shared_scores(runs, a, b):
            x = runs.loc[runs["setting"] == a, score].dropna().to_numpy(dtype=float)
            y = runs.loc[runs["setting"] == b, score].dropna().to_numpy(dtype=float)
            row = {"A": a, "B": b, "score": score, "n A": len(x), "mean A": x.mean(),
                   "std A": x.std(ddof=1) if len(x) > 1 else math.nan, "n B": len(y), "mean B": y.mean(),
                   "std B": y.std(ddof=1) if len(y) > 1 else math.nan, "difference": y.mean() - x.mean()}
            few = [s for s, v in ((a, x), (b, y)) if len(v) < 2]
            if few:
                row["note"] = f"cannot be tested: fewer than 2 seeds in {' and '.join(few)}"
                rows.append(row)
                continue
            row["welch t"], row["welch df"], row["welch p"] = welch(x, y)
            perm = permutation_test(x, y)
            row.update({"permutation p": perm["p"], "splits": perm["splits"], "exact": perm["exact"],
                        "smallest p": perm["smallest"]})
            row["note"] = "no spread within either setting: Welch's t undefined" if math.isnan(row["welch p"]) \
                else ("" if perm["exact"] else f"permutation p from {perm['splits']} random relabellings")
            rows.append(row)
    columns = ["A", "B", "score", "n A", "mean A", "std A", "n B", "mean B", "std B", "difference", "welch t",
               "welch df", "welch p", "permutation p", "splits", "exact", "smallest p", "note"]
    return pd.DataFrame(rows, columns=columns)


def _mean_std(mean: float, std: float) -> str:
    return "" if pd.isna(mean) else f"{mean:.2f}" + ("" if pd.isna(std) else f" ± {std:.2f}")


def format_significance(table: pd.DataFrame) -> pd.DataFrame:
    """The table as display strings: ``A vs B``, ``score``, each setting's ``mean ± std (n seeds)``,
    ``B - A``, ``welch p``, the permutation p with the smallest p it could give and its number of
    splits (``0.1 (0.1, 20)``), ``note``."""
    shown = pd.DataFrame({
        "A vs B": [f"{a} vs {b}" for a, b in zip(table["A"], table["B"])], "score": table["score"],
        "A mean ± std (n)": [f"{_mean_std(m, s)} ({n})" for m, s, n in zip(table["mean A"], table["std A"],
                                                                            table["n A"])],
        "B mean ± std (n)": [f"{_mean_std(m, s)} ({n})" for m, s, n in zip(table["mean B"], table["std B"],
                                                                            table["n B"])],
        "B - A": [f"{d:+.2f}" for d in table["difference"]],
        "welch p": [format_p(p, missing="") for p in table["welch p"]],
        "permutation p (smallest possible, splits)": ["" if pd.isna(p) else f"{format_p(p)} ({format_p(m)}, {int(k)})"
                                  for p, m, k in zip(table["permutation p"], table["smallest p"], table["splits"])],
        "note": table["note"].fillna(""),
    })
    return shown.astype(str)
