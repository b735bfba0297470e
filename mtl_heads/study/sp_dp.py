"""Claim 5: does dynamic pruning (DP) keep fewer heads than static pruning (SP) at a test score not
lower, and do they keep the same heads? One-sided Welch tests over seeds with a non-inferiority margin
(:data:`VERDICT_RULES` ``sp_dp``); DP runs trained on SP's schedule, where the study has them, decide."""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mtl_heads.study.core import (Claim, Study, Test, config_of, listed, mean_std, metric_name, run_folders,
                                           runs_of, score_column, setting_name)
from mtl_heads.study.heads import gate_baseline, not_pruned, pair_text, setting_gates
from mtl_heads.study.rules import MARGIN, MATCHED_RULE, MIN_SEEDS, TOO_FEW, VERDICT_RULES
from mtl_heads.reports.runs import read_yaml
from mtl_heads.stats import welch_lower_bound, welch_one_sided
from mtl_heads.folders import RETRAINED_FOLDER, match_name, record_folder_name

__all__ = ["SP_DP_TESTS", "sp_vs_dp"]


def _rate(value: float) -> str:
    """A learning rate as people write it: ``1e-4``, ``2.5e-5``."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _record_folder(folder: Path) -> Path:
    """A run folder as the record keeps it: a retraining that did not reproduce its record
    (``<setting>/.seed<N>.retrained``, which is not committed) reads as ``<setting>/seed<N>`` where it is
    absent: the same config by construction (docs/ewt-study.sh's retrain stage)."""
    if match_name(RETRAINED_FOLDER, folder.name) and not (folder / "config.yaml").is_file():
        return folder.parent / record_folder_name(folder.name)
    return folder


def _chain(cfg: dict, depth: int = 0) -> list[tuple[float, float]]:
    """How a run's encoder was trained, oldest first: ``[(epochs, encoder rate)]`` of the runs it started
    from (``init=``, and theirs) and its own; an ``init`` whose config cannot be read counts as
    ``(nan, nan)``, which matches nothing."""
    train = cfg.get("train") or {}
    own = (float(train.get("epochs", math.nan)), float(train.get("lr_encoder", math.nan)))
    if not cfg.get("init"):
        return [own]
    folder = _record_folder(Path(str(cfg["init"])))
    if depth > 8 or not (folder / "config.yaml").is_file():
        return [(math.nan, math.nan), own]
    return _chain(read_yaml(folder / "config.yaml"), depth + 1) + [own]


def _chain_text(chain: list[tuple[float, float]]) -> str:
    """``2 epochs at 1e-4, then 1 at 1e-5``."""
    parts = [f"{e:g} {'epoch' if e == 1 else 'epochs'} at {_rate(r)}" if np.isfinite(e) else "a run not found"
             for e, r in chain]
    return ", then ".join(parts)


def _epochs(chain: list[tuple[float, float]]) -> float:
    return float(sum(e for e, _ in chain))


def _sp_dp_confound(study: Study, dp: str, sp: str) -> str:
    """'' or how DP's and SP's encoder training differ (epochs and rates, SP's baseline counted)."""
    dp_chain, sp_chain = _chain(config_of(study, dp)), _chain(config_of(study, sp))
    if dp_chain == sp_chain:
        return ""
    dp_total, sp_total = _epochs(dp_chain), _epochs(sp_chain)
    effects = ([f"SP had more training ({sp_total:g} epochs against {dp_total:g})"] if sp_total > dp_total else []) \
        + (["SP's encoder moved at a lower rate while its gates learnt"] if sp_chain[-1][1] < dp_chain[-1][1] else []) \
        + (["DP's encoder moved at a lower rate"] if dp_chain[-1][1] < sp_chain[-1][1] else [])
    return (f"DP trained the encoder {_chain_text(dp_chain)}; SP {_chain_text(sp_chain)} ({sp_total:g} in all)"
            + (f": {' and '.join(effects)}, which can raise SP's score against DP's and so push the verdict towards "
               "'not replicated'" if effects else ""))


def _lambda(study: Study, setting: str) -> str:
    """A setting's ``prune.lambda`` as its config writes it (``auto`` when unset)."""
    return str((config_of(study, setting).get("prune") or {}).get("lambda", "auto"))


@dataclass
class _Pair:
    """One DP setting against one SP setting in claim 5: ``label`` (the line's name) and ``matched``
    (True when DP's encoder was trained on SP's schedule: the same epochs at the same rates, SP's
    baseline counted)."""

    dp: str
    sp: str
    label: str
    matched: bool = False


def _sp_dp_pairs(study: Study, tasks: str, name: str) -> list[_Pair]:
    """Claim 5's pairs of ``tasks``: the regime cells' DP and SP first, then each other DP setting of those
    tasks against the SP setting of its L0 lambda (the cell's when equal) where it was trained on SP's
    schedule (a *matched* pair) or at another lambda."""
    dp, sp = study.setting(tasks, "dp"), study.setting(tasks, "sp")
    if dp is None or sp is None:
        return []
    pairs = [_Pair(dp, sp, name)]
    runs = study.runs[study.runs["tasks"] == tasks]
    of = lambda kind: list(dict.fromkeys(runs.loc[runs["regime"] == kind, "setting"]))
    sps = [sp] + [s for s in of("sp") if s != sp]
    reference = _lambda(study, dp)
    for other in [d for d in of("dp") if d != dp]:
        lam = _lambda(study, other)
        partner = next((s for s in sps if _lambda(study, s) == lam), None)
        if partner is None:
            continue
        matched = _chain(config_of(study, other)) == _chain(config_of(study, partner))
        if not matched and lam == reference:
            continue  # another DP setting that is no comparison of this claim
        label = name + (f" at lambda {lam}" if lam != reference else "") + (" with DP on SP's schedule" if matched else "")
        pairs.append(_Pair(other, partner, label, matched))
    return pairs


# claim 5's tests of one pair: their statistic, and the hypothesis each one-sided Welch test supports
SP_DP_TESTS = {"fewer heads": ("heads kept", "DP < SP"), "not lower": ("test score", f"DP - SP > -{MARGIN:g}"),
               "SP fewer heads": ("heads kept", "DP > SP"), "lower": ("test score", f"DP - SP < -{MARGIN:g}")}


def _sp_dp_line(claim: Claim, study: Study, tasks: str, pair: _Pair) -> dict | None:
    """One pair's line of claim 5 (heads kept and test score, their one-sided tests, whether they keep the
    same heads) and its row for the verdict; None when it cannot be compared."""
    name = setting_name(study, tasks)
    gates = {f"{name} DP": setting_gates(study, pair.dp), f"{name} SP": setting_gates(study, pair.sp)}
    why = not_pruned(gates, gates)
    table = gate_baseline(gates)
    if table.empty:
        claim.notes.append(f"{pair.label}: the gates of DP or SP never moved")
        return None
    fields = {"tasks": tasks.split("+"), "setting": pair.label, "regimes": ["dp", "sp"], "matched": pair.matched}
    runs = run_folders(study, pair.dp, pair.sp)
    agreement = pair_text(claim, f"{pair.label} DP & SP", table.iloc[0].to_dict(), why, decides=False, what=fields,
                          runs=runs)
    score = "test score" if "+" in tasks else score_column(study.runs, tasks)  # the mean over tasks for MTL
    if score is None:
        return None
    heads = {s: runs_of(study, s)["heads kept"].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
    scores = {s: runs_of(study, s)[score].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
    few = min(len(v) for v in (*heads.values(), *scores.values())) < MIN_SEEDS
    dp_heads, sp_heads, dp_score, sp_score = heads[pair.dp], heads[pair.sp], scores[pair.dp], scores[pair.sp]
    p = {"fewer heads": welch_one_sided(dp_heads, sp_heads, "less"),
         "not lower": welch_one_sided(dp_score + MARGIN, sp_score, "greater"),
         "SP fewer heads": welch_one_sided(dp_heads, sp_heads, "greater"),
         "lower": welch_one_sided(dp_score + MARGIN, sp_score, "less")}
    bound = welch_lower_bound(dp_score, sp_score)
    numbers = {"heads kept": {"dp_mean": dp_heads.mean(), "sp_mean": sp_heads.mean()},
               "test score": {"dp_mean": dp_score.mean(), "sp_mean": sp_score.mean(), "margin": MARGIN,
                              "lower_bound": bound}}
    marks = {}
    for test, value in p.items():
        statistic, hypothesis = SP_DP_TESTS[test]
        numbers_of = numbers[statistic]
        untestable = "" if few or np.isfinite(value) else "no spread in either"
        marks[test] = claim.add(Test(f"{pair.label} {test}", value, untestable,
                                 few=few, value=numbers_of["dp_mean"] - numbers_of["sp_mean"], runs=runs,
                                 what={**fields, "score": score, "statistic": statistic, "hypothesis": hypothesis,
                                       "test": "welch one-sided"}, numbers=numbers_of))
    what = "mean test score" if "+" in tasks else f"test {metric_name(score)}"
    claim.lines.append(
        f"{pair.label}: heads kept DP {mean_std(dp_heads, 1)}, SP {mean_std(sp_heads, 1)}; {what} DP "
        f"{dp_score.mean():.2f}, SP {sp_score.mean():.2f}, DP - SP {dp_score.mean() - sp_score.mean():+.2f} (one-sided "
        f"95% lower bound {f'{bound:+.2f}' if np.isfinite(bound) else 'n/a'}); DP fewer heads: {marks['fewer heads']}; "
        f"DP not lower (margin {MARGIN:g}): {marks['not lower']}; SP fewer heads: {marks['SP fewer heads']}; DP more "
        f"than {MARGIN:g} lower: {marks['lower']}; same heads: {agreement}" + (f"; not counted: {why}" if why else ""))
    return {"name": pair.label, "counted": not why, "matched": pair.matched,
            "keys": {w: f"{pair.label} {w}" for w in SP_DP_TESTS}}


def _sp_dp_outcome(claim: Claim, row: dict) -> str:
    """``win``, ``loss``, ``open`` (neither shown) or ``untested`` (too few seeds, no spread, or tests that
    cannot reach significance) for one counted row of claim 5."""
    keys = row["keys"]
    if all(claim.tests[k].untestable for k in keys.values()):
        return "untested"
    if claim.significant(keys["fewer heads"]) and claim.significant(keys["not lower"]):
        return "win"
    if claim.significant(keys["SP fewer heads"]) or claim.significant(keys["lower"]):
        return "loss"
    return "open"


def _sp_dp_verdict(claim: Claim, rows: list[dict], what: str) -> str:
    """Claim 5's verdict over counted ``rows`` (sets ``claim.verdict``); returns the answer's sentence."""
    outcome = {r["name"]: _sp_dp_outcome(claim, r) for r in rows}
    named = lambda kind: [n for n, o in outcome.items() if o == kind]
    tested = [n for n, o in outcome.items() if o != "untested"]
    if not tested:
        claim.verdict = ""
        return (f"cannot be tested: {TOO_FEW} or no spread, in every {what}" if rows else
                f"cannot be tested: no {what} whose DP and SP both pruned")
    wins, losses = named("win"), named("loss")
    claim.verdict = ("yes" if len(wins) == len(rows) else "partly" if wins else
                     "no" if len(losses) == len(rows) else "inconclusive")
    return (f"DP wins (fewer heads, score not lower) {len(wins)} of the {len(rows)} {what}s whose DP and SP both "
            f"pruned ({listed([r['name'] for r in rows])}): wins {listed(wins)}; loses {listed(losses)}; neither "
            f"shown {listed(named('open'))}" + (f"; untested {listed(named('untested'))}" if named("untested") else ""))


def sp_vs_dp(study: Study) -> Claim:
    """Claim 5. Per pair of a DP and an SP setting (named by its line, ``POS``, ``POS with DP on SP's
    schedule``), four one-sided Welch tests, keyed ``<pair> fewer heads``, ``<pair> not lower``, ``<pair> SP
    fewer heads`` and ``<pair> lower`` (``what``: ``tasks``, ``setting``, ``regimes``, ``matched``,
    ``statistic`` ``heads kept`` or ``test score``, ``hypothesis``; ``value``: DP's mean minus SP's), and
    whether they keep the same heads (``<pair> DP & SP correlation`` / ``Jaccard``, shown)."""
    claim = Claim("sp_dp", "Does DP keep fewer heads than SP at an equal or better test score, and do they keep the "
                  "same heads?", "DP keeps fewer heads than SP at equal or better accuracy",
                  VERDICT_RULES["sp_dp"])
    rows, confounds = [], {}
    for tasks in study.tasks + ([study.mtl] if study.mtl else []):
        for pair in _sp_dp_pairs(study, tasks, setting_name(study, tasks)):
            row = _sp_dp_line(claim, study, tasks, pair)
            if row is None:
                continue
            rows.append(row)
            if not pair.matched:
                confounds.setdefault(_sp_dp_confound(study, pair.dp, pair.sp), []).append(pair.label)
    claim.adjust()
    matched = [r for r in rows if r["matched"]]
    skipped = [r["name"] for r in (matched or rows) if not r["counted"]]
    if matched:
        claim.rule = f"{VERDICT_RULES['sp_dp']} {MATCHED_RULE}"
        claim.answer = "on SP's schedule: " + _sp_dp_verdict(claim, [r for r in matched if r["counted"]], "comparison")
        first = [r for r in rows if not r["matched"] and r["counted"]]
        if first:
            shown = {r["name"]: _sp_dp_outcome(claim, r) for r in first}
            claim.answer += ("; as first run (shown, not counted; **confounded**: DP and SP trained the encoder "
                             f"differently, see the notes): DP wins {listed([n for n, o in shown.items() if o == 'win'])}"
                             f" of {listed(list(shown))}")
    else:
        claim.answer = _sp_dp_verdict(claim, [r for r in rows if r["counted"]], "setting")
    if skipped:
        claim.answer += f"; not counted: {listed(skipped)} (did not prune)"
    for confound, names in sorted((c, n) for c, n in confounds.items() if c):
        claim.notes.append(f"**confound** ({listed(names)}): {confound}; He & Choi's DP trained at 1e-5 for 30 epochs")
    if any(confounds) and not matched:
        claim.answer += "; **confounded**: DP and SP trained the encoder differently (epochs, rates; see the notes)"
    return claim

