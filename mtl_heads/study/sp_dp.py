"""Claim 5: does dynamic pruning (DP) keep fewer heads than static pruning (SP) at a test score not
lower, and do they keep the same heads? One-sided Welch tests over seeds with a non-inferiority margin
(:data:`VERDICT_RULES` ``sp_dp``); DP runs trained on SP's schedule, where the study has them, decide.

:func:`compute_sp_dp` computes it as data (its tests, verdict and :class:`SpDpFacts`); :func:`words_sp_dp`
writes its English from them; :func:`sp_vs_dp` does both."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from omegaconf import OmegaConf

from mtl_heads.study.core import (Claim, Study, Test, config_of, listed, mean_std, metric_name, run_folders,
                                  score_column, display_name, slot)
from mtl_heads.study.heads import (Unpruned, gate_baseline, not_pruned, pair_tests, pair_words, setting_gates,
                                   unpruned, unpruned_text)
from mtl_heads.study.rules import MARGIN, MATCHED_RULE, MIN_SEEDS, NEAR_ALL, TOO_FEW
from mtl_heads.config import ConfigError, train_phases
from mtl_heads.records.runs import read_yaml
from mtl_heads.stats import welch_lower_bound, welch_one_sided
from mtl_heads.folders import RETRAINED_FOLDER, match_name, record_folder_name

__all__ = ["SP_DP_TESTS", "Schedules", "SpDpComparison", "SpDpFacts", "compute_sp_dp", "words_sp_dp",
           "sp_vs_dp"]


def _record_folder(folder: Path) -> Path:
    """A run folder as the record keeps it: a retraining that did not reproduce its record
    (``<setting>/.seed<N>.retrained``, which is not committed) reads as ``<setting>/seed<N>`` where it is
    absent: the same config by construction (docs/ewt-study.sh's retrain stage)."""
    if match_name(RETRAINED_FOLDER, folder.name) and not (folder / "config.yaml").is_file():
        return folder.parent / record_folder_name(folder.name)
    return folder


def _walk(cfg: dict, own_of: Callable[[dict], list], missing: tuple, depth: int = 0) -> list:
    """A run's training, oldest first: ``own_of`` of each run it started from (``init=``, and theirs), then of
    its own; an ``init`` whose config cannot be read counts as ``missing``, which matches nothing."""
    own = own_of(cfg)
    if not cfg.get("init"):
        return own
    folder = _record_folder(Path(str(cfg["init"])))
    if depth > 8 or not (folder / "config.yaml").is_file():
        return [missing, *own]
    return _walk(read_yaml(folder / "config.yaml"), own_of, missing, depth + 1) + own


def _encoder_run(cfg: dict) -> list[tuple[float, float]]:
    """``[(epochs, encoder rate)]`` of one run's config."""
    train = cfg.get("train") or {}
    return [(float(train.get("epochs", math.nan)), float(train.get("lr_encoder", math.nan)))]


def _chain(cfg: dict) -> list[tuple[float, float]]:
    """How a run's encoder was trained, oldest first: ``[(epochs, encoder rate)]`` of the runs it started
    from (``init=``, and theirs) and its own; an ``init`` whose config cannot be read counts as
    ``(nan, nan)``, which matches nothing."""
    return _walk(cfg, _encoder_run, (math.nan, math.nan))


def _run_phases(cfg: dict) -> list[tuple[float, float, float | None]]:
    """``[(epochs, encoder rate, decoder rate)]`` per phase of one run's config (:func:`_phase_chain`)."""
    train = cfg.get("train") or {}
    static = str((cfg.get("prune") or {}).get("mode") or "") == "static"
    try:
        phases = train_phases(OmegaConf.create(train))
        return [(float(p["epochs"]), float(p["lr_encoder"]),
                 None if static or "decoders" in p["freeze"] else float(p["lr_decoder"])) for p in phases]
    except (ConfigError, AttributeError, TypeError, ValueError):
        return [(math.nan, math.nan, math.nan)]


def _phase_chain(cfg: dict) -> list[tuple[float, float, float | None]]:
    """How a run trained everything but its gates, oldest first: per phase of the runs it started from
    (``init=``) and of its own (``train.phases``; one phase without it), ``(epochs, encoder rate, decoder rate)``,
    the decoder rate None where the decoders were frozen (every phase of a static pruning run, or a phase that
    freezes ``decoders``). Round 3's claim 5 counts a DP run matched to SP when the two chains are equal: then
    only the pruning differs. An ``init`` whose config cannot be read, or a schedule that cannot be read,
    counts as ``(nan, nan, nan)``, which matches nothing."""
    return _walk(cfg, _run_phases, (math.nan, math.nan, math.nan))


@dataclass
class Schedules:
    """How a DP and an SP setting trained their encoders, where the two differ: ``dp`` and ``sp``, each
    ``[(epochs, encoder rate)]`` oldest first (:func:`_chain`, SP's baseline counted)."""

    dp: list[tuple[float, float]]
    sp: list[tuple[float, float]]


def _schedules(study: Study, dp: str, sp: str) -> Schedules | None:
    """None, or how DP's and SP's encoder training differ (a confound of their comparison)."""
    schedules = Schedules(_chain(config_of(study, dp)), _chain(config_of(study, sp)))
    return None if schedules.dp == schedules.sp else schedules


def _lambda(study: Study, setting: str) -> str:
    """A setting's ``prune.lambda`` as its config writes it (``auto`` when unset)."""
    return str((config_of(study, setting).get("prune") or {}).get("lambda", "auto"))


@dataclass
class _Pair:
    """One DP setting against one SP setting in claim 5: ``label`` (the line's name), ``matched``
    (True when DP was trained as SP was by the study's rules: under round 2 its encoder, the same epochs at
    the same rates, SP's baseline counted; under round 3 everything but the pruning, :func:`_phase_chain`)
    and ``decoders`` (round 3: DP's encoder trained on SP's schedule but its decoders not frozen where SP's
    were, round 2's matched runs: shown with that confound, not counted)."""

    dp: str
    sp: str
    label: str
    matched: bool = False
    decoders: bool = False


def _matched(study: Study, dp: str, sp: str) -> tuple[bool, bool]:
    """``(matched, decoders)`` of a DP and an SP setting (:class:`_Pair`) under the study's rules."""
    encoder = _chain(config_of(study, dp)) == _chain(config_of(study, sp))
    if study.rules.matched != "phases":
        return encoder, False
    full = _phase_chain(config_of(study, dp)) == _phase_chain(config_of(study, sp))
    return full, encoder and not full


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
        matched, decoders = _matched(study, other, partner)
        if not matched and not decoders and lam == reference:
            continue  # another DP setting that is no comparison of this claim
        label = name + (f" at lambda {lam}" if lam != reference else "") + (
            " with DP on SP's schedule" if matched else " with DP on SP's encoder schedule" if decoders else "")
        pairs.append(_Pair(other, partner, label, matched, decoders))
    return pairs


# claim 5's tests of one pair: their statistic, and the hypothesis each one-sided Welch test supports
SP_DP_TESTS = {"fewer heads": ("heads kept", "DP < SP"), "not lower": ("test score", f"DP - SP > -{MARGIN:g}"),
               "SP fewer heads": ("heads kept", "DP > SP"), "lower": ("test score", f"DP - SP < -{MARGIN:g}")}


@dataclass
class SpDpComparison:
    """One DP setting against one SP setting in claim 5: ``label`` (its line's name, the start of its tests'
    keys), ``matched`` (DP trained on SP's schedule), ``tasks`` (``pos``, or ``pos+ner`` for MTL), ``score``
    (the score column compared: ``test score``, the mean over tasks, for MTL), ``left_out`` (its settings
    that did not prune: then it is not counted), the heads kept and test scores of DP's and SP's runs, ``bound``
    (the one-sided 95% lower bound of DP - SP on the score), ``schedules`` (for a comparison not matched,
    how DP's and SP's encoder training differ, or None), ``outcome`` (:func:`_outcome`) and ``decoders``
    (:class:`_Pair`'s: DP's encoder on SP's schedule, its decoders not frozen where SP's were)."""

    label: str
    matched: bool
    tasks: str
    score: str
    left_out: list[Unpruned]
    heads: tuple[np.ndarray, np.ndarray]
    scores: tuple[np.ndarray, np.ndarray]
    bound: float
    schedules: Schedules | None = None
    outcome: str = ""
    decoders: bool = False

    @property
    def counted(self) -> bool:
        return not self.left_out

    @property
    def keys(self) -> dict[str, str]:
        """The keys of its four tests, by :data:`SP_DP_TESTS` name."""
        return {w: f"{self.label} {w}" for w in SP_DP_TESTS}


@dataclass
class SpDpFacts:
    """What claim 5 found beside its tests: ``comparisons`` (:class:`SpDpComparison`), ``unmoved`` (the labels
    of pairs whose DP or SP gates never moved: not compared)."""

    comparisons: list[SpDpComparison] = field(default_factory=list)
    unmoved: list[str] = field(default_factory=list)

    @property
    def matched(self) -> list[SpDpComparison]:
        return [c for c in self.comparisons if c.matched]

    phases: bool = False  # round 3: only the comparisons matched but for the pruning decide, none without them

    @property
    def deciding(self) -> list[SpDpComparison]:
        """The comparisons the verdict reads: the matched ones where there are, else all (round 3: the matched
        ones only); those counted."""
        return [c for c in (self.matched if self.phases else self.matched or self.comparisons) if c.counted]


def _compare(claim: Claim, study: Study, tasks: str, pair: _Pair) -> SpDpComparison | None:
    """One pair's tests in claim 5 (heads kept and test score, their one-sided tests, whether they keep the
    same heads) and its facts; None when it cannot be compared."""
    name = display_name(study, tasks)
    gates = {f"{name} DP": setting_gates(study, pair.dp), f"{name} SP": setting_gates(study, pair.sp)}
    table = gate_baseline(gates, study.rules)
    if table.empty:
        claim.facts.unmoved.append(pair.label)
        return None
    fields = {"tasks": tasks.split("+"), "setting": pair.label, "regimes": ["dp", "sp"], "matched": pair.matched}
    runs = run_folders(study, pair.dp, pair.sp)
    pair_tests(claim, f"{pair.label} DP & SP", table.iloc[0].to_dict(), not_pruned(gates, gates), decides=False,
               what=fields, runs=runs)
    if study.rules.named_families:  # whether they keep the same heads: a descriptive family of its own kind
        for statistic in ("correlation", "Jaccard"):
            claim.tests[f"{pair.label} DP & SP {statistic}"].family = "same heads"
    score = "test score" if "+" in tasks else score_column(study.runs, tasks)  # the mean over tasks for MTL
    if score is None:
        return None
    heads = {s: study.runs_of(s)["heads kept"].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
    scores = {s: study.runs_of(s)[score].dropna().to_numpy(float) for s in (pair.dp, pair.sp)}
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
    for test, value in p.items():
        statistic, hypothesis = SP_DP_TESTS[test]
        numbers_of = numbers[statistic]
        untestable = "" if few or np.isfinite(value) else "no spread in either"
        claim.add(Test(f"{pair.label} {test}", value, untestable,
                       few=few, value=numbers_of["dp_mean"] - numbers_of["sp_mean"], runs=runs,
                       what={**fields, "score": score, "statistic": statistic, "hypothesis": hypothesis,
                             "test": "welch one-sided"}, numbers=numbers_of))
    left_out = unpruned(gates, gates)
    if study.rules.matched == "phases" and not left_out:  # round 3: counted when both pruned in every seed
        left_out = _unpruned_seeds(study, gates, (pair.dp, pair.sp))
    return SpDpComparison(pair.label, pair.matched, tasks, score, left_out, (dp_heads, sp_heads),
                          (dp_score, sp_score), bound,
                          None if pair.matched else _schedules(study, pair.dp, pair.sp), decoders=pair.decoders)


def _unpruned_seeds(study: Study, gates: dict, settings: tuple[str, str]) -> list[Unpruned]:
    """Round 3's count rule (a setting is counted when its SP and its matched DP pruned in every seed): the
    settings of ``settings`` (DP's, SP's; ``gates`` by label in that order) with a run that kept at least
    :data:`NEAR_ALL` of its heads, each as :class:`Unpruned` with that run's count."""
    out = []
    for (label, found), setting in zip(gates.items(), settings):
        size = found.kept.size
        kept = study.runs_of(setting)["heads kept"].dropna()
        most = kept.max() if len(kept) else math.nan
        if np.isfinite(most) and most >= NEAR_ALL * size:
            out.append(Unpruned(f"{label} (one seed at least)", int(most), size))
    return out


def _outcome(claim: Claim, comparison: SpDpComparison) -> str:
    """``win``, ``loss``, ``open`` (neither shown) or ``untested`` (too few seeds, no spread, or tests that
    cannot reach significance) for one comparison of claim 5."""
    keys = comparison.keys
    if all(claim.tests[k].untestable for k in keys.values()):
        return "untested"
    if claim.significant(keys["fewer heads"]) and claim.significant(keys["not lower"]):
        return "win"
    if claim.significant(keys["SP fewer heads"]) or claim.significant(keys["lower"]):
        return "loss"
    return "open"


def _verdict(comparisons: list[SpDpComparison]) -> str:
    """Claim 5's verdict over the counted ``comparisons`` (their outcomes): ``""`` when none was tested."""
    outcomes = [c.outcome for c in comparisons]
    if all(o == "untested" for o in outcomes):
        return ""
    wins, losses = outcomes.count("win"), outcomes.count("loss")
    return ("yes" if wins == len(outcomes) else "partly" if wins else
            "no" if losses == len(outcomes) else "inconclusive")


def compute_sp_dp(study: Study) -> Claim:
    """Claim 5 as data. Per pair of a DP and an SP setting (named by its line, ``POS``, ``POS with DP on SP's
    schedule``), four one-sided Welch tests, keyed ``<pair> fewer heads``, ``<pair> not lower``, ``<pair> SP
    fewer heads`` and ``<pair> lower`` (``what``: ``tasks``, ``setting``, ``regimes``, ``matched``,
    ``statistic`` ``heads kept`` or ``test score``, ``hypothesis``; ``value``: DP's mean minus SP's), and
    whether they keep the same heads (``<pair> DP & SP correlation`` / ``Jaccard``, shown). With matched
    comparisons, the rule gains :data:`MATCHED_RULE`. Its facts: :class:`SpDpFacts`."""
    facts = SpDpFacts()
    claim = Claim("sp_dp", rule=study.rules.verdict_rules["sp_dp"], rules=study.rules, facts=facts)
    for tasks in study.tasks + ([study.mtl] if study.mtl else []):
        for pair in _sp_dp_pairs(study, tasks, display_name(study, tasks)):
            comparison = _compare(claim, study, tasks, pair)
            if comparison is not None:
                facts.comparisons.append(comparison)
    if study.rules.named_families:  # round 3: the verdict's family is its matched counted settings' two tests
        for comparison in facts.comparisons:
            for name, key in comparison.keys.items():
                if key not in claim.tests:
                    continue
                if not (comparison.matched and comparison.counted):
                    claim.tests[key].decides = False
                elif name in ("SP fewer heads", "lower"):  # read for a loss only: a family of their own
                    claim.tests[key].family = "losses"
    claim.adjust()
    for comparison in facts.comparisons:
        comparison.outcome = _outcome(claim, comparison)
    facts.phases = study.rules.matched == "phases"
    if facts.matched and not facts.phases:  # round 2's rule, with runs on SP's encoder schedule
        claim.rule = f"{study.rules.verdict_rules['sp_dp']} {MATCHED_RULE}"
    claim.verdict = _verdict(facts.deciding)
    return claim


# --- the words ----------------------------------------------------------------------------------------
def _rate(value: float) -> str:
    """A learning rate as people write it: ``1e-4``, ``2.5e-5``."""
    mantissa, exponent = f"{value:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def _chain_text(chain: list[tuple[float, float]]) -> str:
    """``2 epochs at 1e-4, then 1 at 1e-5``."""
    parts = [f"{e:g} {'epoch' if e == 1 else 'epochs'} at {_rate(r)}" if np.isfinite(e) else "a run not found"
             for e, r in chain]
    return ", then ".join(parts)


def _epochs(chain: list[tuple[float, float]]) -> float:
    return float(sum(e for e, _ in chain))


def _schedules_text(schedules: Schedules | None) -> str:
    """'' or how DP's and SP's encoder training differ (epochs and rates, SP's baseline counted)."""
    if schedules is None:
        return ""
    dp_chain, sp_chain = schedules.dp, schedules.sp
    dp_total, sp_total = _epochs(dp_chain), _epochs(sp_chain)
    effects = ([f"SP had more training ({sp_total:g} epochs against {dp_total:g})"] if sp_total > dp_total else []) \
        + (["SP's encoder moved at a lower rate while its gates learnt"] if sp_chain[-1][1] < dp_chain[-1][1] else []) \
        + (["DP's encoder moved at a lower rate"] if dp_chain[-1][1] < sp_chain[-1][1] else [])
    return (f"DP trained the encoder {_chain_text(dp_chain)}; SP {_chain_text(sp_chain)} ({sp_total:g} in all)"
            + (f": {' and '.join(effects)}, which can raise SP's score against DP's and so push the verdict towards "
               "'not replicated'" if effects else ""))


DECODERS = ("DP's encoder trained on SP's schedule, but its decoders trained on (at their rate) in SP's epochs, "
            "where SP's were frozen: round 2's matched runs, which round 3's rules show and do not count")


def _line(claim: Claim, comparison: SpDpComparison) -> str:
    """One comparison's line: heads kept and test score, their one-sided tests, whether they keep the same heads."""
    (dp_heads, sp_heads), (dp_score, sp_score), bound = comparison.heads, comparison.scores, comparison.bound
    marks = {test: slot(key) for test, key in comparison.keys.items()}
    what = "mean test score" if "+" in comparison.tasks else f"test {metric_name(comparison.score)}"
    why = unpruned_text(comparison.left_out)
    return (f"{comparison.label}: heads kept DP {mean_std(dp_heads, 1)}, SP {mean_std(sp_heads, 1)}; {what} DP "
            f"{dp_score.mean():.2f}, SP {sp_score.mean():.2f}, DP - SP {dp_score.mean() - sp_score.mean():+.2f} "
            f"(one-sided 95% lower bound {f'{bound:+.2f}' if np.isfinite(bound) else 'n/a'}); DP fewer heads: "
            f"{marks['fewer heads']}; DP not lower (margin {MARGIN:g}): {marks['not lower']}; SP fewer heads: "
            f"{marks['SP fewer heads']}; DP more than {MARGIN:g} lower: {marks['lower']}; same heads: "
            f"{pair_words(claim, f'{comparison.label} DP & SP')}" + (f"; not counted: {why}" if why else ""))


def _verdict_words(comparisons: list[SpDpComparison], what: str) -> str:
    """The answer's sentence for the verdict over the counted ``comparisons`` (``what``: ``setting`` or
    ``comparison``)."""
    named = lambda kind: [c.label for c in comparisons if c.outcome == kind]
    if all(c.outcome == "untested" for c in comparisons):
        return (f"cannot be tested: {TOO_FEW} or no spread, in every {what}" if comparisons else
                f"cannot be tested: no {what} whose DP and SP both pruned")
    wins = named("win")
    return (f"DP wins (fewer heads, score not lower) {len(wins)} of the {len(comparisons)} {what}s whose DP and SP "
            f"both pruned ({listed([c.label for c in comparisons])}): wins {listed(wins)}; loses "
            f"{listed(named('loss'))}; neither shown {listed(named('open'))}"
            + (f"; untested {listed(named('untested'))}" if named("untested") else ""))


def words_sp_dp(claim: Claim) -> Claim:
    """Claim 5's question, answer, lines (one per comparison) and notes (gates that never moved, confounds),
    written from its tests and facts."""
    facts: SpDpFacts = claim.facts
    claim.question = ("Does DP keep fewer heads than SP at an equal or better test score, and do they keep the same "
                      "heads?")
    claim.paper = "DP keeps fewer heads than SP at equal or better accuracy"
    claim.notes += [f"{label}: the gates of DP or SP never moved" for label in facts.unmoved]
    claim.lines += [_line(claim, c) for c in facts.comparisons]
    confounds: dict[str, list[str]] = {}
    for c in facts.comparisons:
        if c.decoders:
            confounds.setdefault(DECODERS, []).append(c.label)
        elif not c.matched:
            confounds.setdefault(_schedules_text(c.schedules), []).append(c.label)
    if facts.phases:
        claim.answer = ("matched but for the pruning: " + _verdict_words(facts.deciding, "comparison") if facts.matched
                        else "cannot be tested: no DP runs matched to SP but for the pruning (docs/ewt-study.sh "
                             "matched3)")
        shown = [c.label for c in facts.comparisons if not c.matched and c.counted]
        if shown:
            wins = [c.label for c in facts.comparisons if not c.matched and c.counted and c.outcome == "win"]
            claim.answer += (f"; shown, not counted (**confounded**, see the notes): DP wins {listed(wins)} of "
                             f"{listed(shown)}")
    elif facts.matched:
        claim.answer = "on SP's schedule: " + _verdict_words(facts.deciding, "comparison")
        first = [c for c in facts.comparisons if not c.matched and c.counted]
        if first:
            wins = [c.label for c in first if c.outcome == "win"]
            claim.answer += ("; as first run (shown, not counted; **confounded**: DP and SP trained the encoder "
                             f"differently, see the notes): DP wins {listed(wins)} of {listed([c.label for c in first])}")
    else:
        claim.answer = _verdict_words(facts.deciding, "setting")
    skipped = [c.label for c in (facts.matched if facts.phases else facts.matched or facts.comparisons)
               if not c.counted]
    if skipped:
        claim.answer += f"; not counted: {listed(skipped)} (did not prune)"
    for confound, names in sorted((c, n) for c, n in confounds.items() if c):
        claim.notes.append(f"**confound** ({listed(names)}): {confound}; He & Choi's DP trained at 1e-5 for 30 epochs")
    if any(confounds) and not facts.matched and not facts.phases:  # round 3 says so beside what it shows
        claim.answer += "; **confounded**: DP and SP trained the encoder differently (epochs, rates; see the notes)"
    return claim


def sp_vs_dp(study: Study) -> Claim:
    """Claim 5, computed (:func:`compute_sp_dp`) and written (:func:`words_sp_dp`)."""
    return words_sp_dp(compute_sp_dp(study))
