"""He & Choi's claims checked on one study, each with a rule written before its verdict (the library
of ``python -m mtl_heads claims``, whose command line is :mod:`mtl_heads.commands.claims`).

A *study* is a set of finished run folders, probe report folders and head ablation results
(``docs/ewt-study.sh`` writes one). Each run's *setting* is what ``python -m mtl_heads compare`` calls
one (configs equal apart from seed and folders); each setting is placed in a cell by its task list
(one task: single-task, STL; the setting with the most tasks: MTL) and its pruning regime
(:func:`regime`): ``none`` (unpruned), ``dp`` (``prune=dynamic`` with the L0 lambdas), ``budget``
(``prune=dynamic`` with ``prune.budget``: equal sparsity) or ``sp`` (``prune=static``).

The claims (:func:`check_claims`), each a :class:`Claim` with its question, He & Choi's answer, a
*rule* (the verdict's definition, fixed in :data:`VERDICT_RULES` before any number is read), its tests (each a
:class:`Test`: what it tests as fields, its statistic, raw and adjusted p), its lines and its verdict
(yes / partly / no, or none with the reason when the study cannot answer); one module each:

1. (:mod:`.mtl`) does MTL lose to STL (test score, Welch's t-test over seeds; a task with a known confound, such as
   training on another split, is shown but not counted);
2. (:mod:`.overlap`) do the heads that survive pruning overlap across tasks more than chance (the gate correlation and
   the kept-head Jaccard overlap of every pair of single-task settings that pruned, against a global
   and a layer-aware permutation null, :func:`mtl_heads.gates.permutation_baseline`);
3. (:mod:`.stem`) which heads survive in every task that pruned ("stem cells"), against the count expected by chance
   (global and within layers), and are they the pretrained encoder's best probe heads (against random
   sets anywhere and random sets matched per layer);
4. (:mod:`.probes`) does STL sharpen its own task's probe heads while MTL spreads them (:func:`probe_skill`), with
   the per-label best-head scores He & Choi quote beside ours;
5. (:mod:`.sp_dp`) does DP keep fewer heads than SP at an equal or better test score (and do they agree on which); with DP
   runs trained as SP was (its encoder rate, or its epochs in all), those matched comparisons decide;
6. (:mod:`.needed`) are the stem cells *needed*: the score each task loses when they are ablated
   (``python -m mtl_heads ablate``) against layer-matched random head sets of the same size.

Statistics shared by every claim (:data:`TESTS`): a setting that keeps at least :data:`NEAR_ALL` of
its heads *did not prune* and is left out of overlaps and intersections (named where it is); where a
test has a global and a layer-aware null the verdict reads the larger p; Holm-Bonferroni over each
claim's tests (:func:`mtl_heads.stats.holm`), raw and adjusted p side by side; every verdict is recomputed with each
seed left out in turn (:func:`check_claims`), and one that changes is marked fragile with the seed.

Each claim's module computes it as data, then writes its English from that data, so that its logic reads
without its prose: ``compute_<id>(study)`` returns the :class:`Claim` with its tests, verdict and ``facts``
(the module's dataclass: the numbers, counts and reasons, as fields, that its words need; no sentence), and
``words_<id>(claim)`` writes its question, He & Choi's answer, its answer, lines and notes from them
(:data:`CLAIMS` pairs the two; ``mtl_vs_stl``, ``overlap``, ``stem``, ``probes_claim``, ``sp_vs_dp`` and
``needed`` do both).

The rest of the package: :mod:`.rules` (the rules and the numbers they name), :mod:`.core` (:class:`Test`,
:class:`Claim`, :class:`Study` and the helpers every claim writes with), :mod:`.heads` (the
gates the head claims read) and :mod:`.render` (markdown, and the JSON of ``format=json``, whose schema
its docstring gives). This module reads a study (:func:`read_study`), checks its claims and writes them.
"""
from __future__ import annotations

import json
from pathlib import Path

from mtl_heads.study.core import (REGIME_NAMES, REGIMES, Claim, Study, Test, build_study, read_ablations, regime,
                                  too_few_text)
from mtl_heads.study.heads import gate_baseline, regime_gates, stem_heads, stem_table
from mtl_heads.study.mtl import compute_mtl, mtl_vs_stl, words_mtl
from mtl_heads.study.needed import compute_needed, needed, pooled_ablation, words_needed
from mtl_heads.study.overlap import compute_overlap, overlap, words_overlap
from mtl_heads.study.probes import PAPER_LABELS, compute_probes, probe_skill, probes_claim, words_probes
from mtl_heads.study.render import (BEGIN, END, SCHEMA, claims_data, page_markdown, read_since, score_grid,
                                    since_line, splice)
from mtl_heads.study.rules import (ALPHA, CLAIM_SHUFFLES, MARGIN, MATCHED_RULE, MIN_SEEDS, NEAR_ALL, REPLICATION,
                                   ROUND2, ROUND3, RULE_SETS, SUPPORT, TESTS, TOO_FEW, VERDICT_RULES, Rules,
                                   rules_named)
from mtl_heads.study.sp_dp import compute_sp_dp, sp_vs_dp, words_sp_dp
from mtl_heads.study.stem import compute_stem, stem, words_stem
from mtl_heads.reports.comparison import compare_runs, markdown
from mtl_heads.records.runs import RUNS, spec_folder
from mtl_heads.reports.significance import format_p

__all__ = ["ALPHA", "NEAR_ALL", "CLAIM_SHUFFLES", "MIN_SEEDS", "MARGIN", "VERDICT_RULES", "MATCHED_RULE", "REPLICATION",
           "SUPPORT", "Rules", "ROUND2", "ROUND3", "RULE_SETS", "rules_named",
           "TESTS", "TOO_FEW", "REGIMES", "REGIME_NAMES", "PAPER_LABELS", "BEGIN", "END", "SCHEMA", "Test", "Claim",
           "Study", "regime", "read_study", "read_ablations", "CLAIMS", "check_claims", "mtl_vs_stl", "overlap",
           "stem", "probes_claim", "sp_vs_dp", "needed", "regime_gates", "gate_baseline", "stem_table", "stem_heads",
           "probe_skill", "pooled_ablation", "score_grid", "claims_markdown", "claims_data", "claims_json", "splice",
           "read_since", "since_line"]

# each claim's computation (its tests, verdict and facts: no sentence) and the function that writes its English
# from them, in the order of the module docstring
CLAIMS = ((compute_mtl, words_mtl), (compute_overlap, words_overlap), (compute_stem, words_stem),
          (compute_probes, words_probes), (compute_sp_dp, words_sp_dp), (compute_needed, words_needed))


def read_study(specs: list[str], root: str | Path = RUNS, rules: Rules = ROUND2) -> Study:
    """The finished runs, probe reports and head ablations found in ``specs`` (run folders, folders
    searched at any depth, or experiment names looked up under ``root``, as ``compare`` takes them), to be
    judged by ``rules`` (a round of :data:`RULE_SETS`; default round 2's); a ConfigError when they hold no
    finished run, or a study that cannot be read."""
    comparison = compare_runs(specs, root, uses=("probe report", "probe comparison"))
    return build_study(comparison.runs, comparison.notes, [str(spec_folder(s, root)) for s in specs], rules)


def _too_few(again, rules: Rules) -> bool:
    """Is a test, recomputed with a seed left out (None: gone), left with too few seeds to test? Round 2
    (rules.md as the code read it): gone, a t-test under ``MIN_SEEDS`` a group, or one that cannot be tested
    or can no longer reach significance. Round 3 (rules-round3.md, *Seeds*: that label exactly as rules.md
    defines it): a t-test under ``MIN_SEEDS`` a group, or a family whose smallest attainable adjusted p
    reaches ALPHA; a test gone, or untestable for another reason, is a change like any other (fragile)."""
    if rules.named_families:
        return again is not None and (again.few or bool(again.reach))
    return again is None or again.few or bool(again.untestable)


def check_claims(study: Study, stability: bool = True) -> list[Claim]:
    """Every claim of the module docstring, in order: each computed as data (its tests, verdict and facts),
    then written (its question, answer, lines and notes: :data:`CLAIMS`). With ``stability`` (default True)
    each claim is computed again with each seed left out in turn (:meth:`Study.without_seed`; its tests and
    verdict are compared, so it is not written). A verdict that changes
    is listed in ``Claim.fragile``, unless the change comes from tests left with too few seeds alone
    (every deciding test whose significance changed is one, and there is one: ``Claim.too_few``); a
    significant test that stops being one (or a test that becomes
    significant) gets a ``fragile`` note, or a ``too_few`` one when it is left with too few seeds. Too few
    seeds (docs/ewt-study/rules.md): a t-test left with fewer than ``MIN_SEEDS`` a group, a test that can no
    longer reach significance, or one with nothing left to test (say a held-out ablation, whose heads change
    with the seeds that choose them, and which has none of the new heads)."""
    claims = [words(compute(study)) for compute, words in CLAIMS]
    if not stability:
        return claims
    seeds = study.seeds
    for (compute, _), claim in zip(CLAIMS, claims):
        if len(seeds) < 2 or not claim.verdict:
            claim.stability = "not checked (one seed)" if len(seeds) < 2 and claim.verdict else ""
            continue
        for test in claim.tests.values():
            test.checked = True
        for seed in seeds:
            other = compute(study.without_seed(seed))  # its tests and verdict: no words needed
            changed = []  # the tests whose significance changed, and whether each is too few to test now
            for key, test in claim.tests.items():
                again = other.tests.get(key)
                if again is None or again.significant != test.significant:
                    few = _too_few(again, study.rules)
                    if test.decides and not test.untestable:  # an untestable test decided nothing either way
                        changed.append(few)
                    if test.significant or (again is not None and again.significant):
                        now = "cannot be tested" if again is None or again.untestable else \
                            f"Holm {format_p(again.adjusted)}"
                        (test.too_few if few else test.fragile).append(f"without seed {seed}" + ("" if few else f": {now}"))
            lost = [k for k, test in claim.tests.items()  # deciding tests that leaving the seed out leaves too few
                    if test.decides and not test.untestable and _too_few(other.tests.get(k), study.rules)]
            if other.verdict != claim.verdict:
                if all(changed) and (changed or lost):
                    claim.too_few.append(f"without seed {seed}")
                else:
                    claim.fragile.append(f"without seed {seed}: {other.word}")
        stable = f"stable: the same verdict with any one of seeds {', '.join(map(str, seeds))} left out"
        parts = ([f"fragile: {'; '.join(claim.fragile)}"] if claim.fragile else []) + (
            [f"{too_few_text(claim.too_few)}: what is left cannot be tested (a t-test needs {MIN_SEEDS} seeds a "
             "group; a test of heads needs the runs that choose them)"] if claim.too_few else [])
        claim.stability = "; ".join(parts) if parts else stable
    return claims


def claims_markdown(study: Study, claims: list[Claim], command: str = "", since: dict | list[dict] | None = None) -> str:
    """The scores grid and the claims as markdown (what ``out=`` writes and ``doc=`` splices in): per
    claim its question and He & Choi's answer, its rule, then its verdict with its stability, then its
    lines (raw and Holm-adjusted p) and notes (:func:`~mtl_heads.study.render.page_markdown`);
    ``command`` is the command line named as the page's source (default none); ``since``, an earlier
    claims JSON read by :func:`~mtl_heads.study.render.read_since` (or a list of them), adds under each
    verdict what changed since each (default none)."""
    return page_markdown(study, claims, markdown(score_grid(study)), command, since)


def claims_json(study: Study, claims: list[Claim], command: str = "") -> str:
    """The study and its claims as JSON (``format=json``; the schema is
    :mod:`mtl_heads.study.render`'s docstring; NaN written as null); ``command`` as in
    :func:`claims_markdown`."""
    return json.dumps(claims_data(study, claims, command), indent=2, ensure_ascii=False, allow_nan=False)
