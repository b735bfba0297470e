"""The claims under round 3's rules (docs/ewt-study/rules-round3.md; mtl_heads.study.rules.ROUND3) on the made-up
study of helpers.make_study: each verdict's Holm family holds the tests it reads and no other, the global
Jaccard null is exact, and a Monte Carlo p is printed with its standard error and counts as not significant
when its adjusted p lies within 2 of them of 0.05. Round 2's output is unchanged: tests/test_published.py
regenerates its documents byte for byte."""
import json
import math
import shutil

import numpy as np
import pytest
import yaml
from scipy import stats

from mtl_heads.commands.claims import main
from mtl_heads.stats import holm, jaccard_null
from mtl_heads.study import MARGIN, ROUND2, ROUND3, Claim, mtl_vs_stl, overlap, read_study, sp_vs_dp
from mtl_heads.study import Test as ClaimTest  # not "Test": pytest would try to collect it
from mtl_heads.study.rules import DESCRIPTIVE
from helpers import NER_KEPT, POS_KEPT, gates_of, make_run, make_study
from helpers import STUDY_HEADS as HEADS
from helpers import STUDY_LAYERS as LAYERS


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory):
    return make_study(tmp_path_factory.mktemp("round3") / "study")


def test_claim_2s_family_is_the_dp_jaccard_tests_and_their_global_null_is_exact(study_dir):
    study = read_study([str(study_dir)], rules=ROUND3)
    claim = overlap(study)
    jaccard = claim.find(regime="dp", statistic="jaccard")
    correlation = claim.find(regime="dp", statistic="correlation")
    # POS and NER with DP keep 8 heads each, 6 of them shared, among 24
    overlap_count = len(set(POS_KEPT) & set(NER_KEPT))
    mean, exact = jaccard_null(LAYERS * HEADS, len(POS_KEPT), len(NER_KEPT), overlap_count)
    assert jaccard.numbers["p_global"] == pytest.approx(exact) and jaccard.numbers["null_mean"] == pytest.approx(mean)
    assert jaccard.p == pytest.approx(max(exact, jaccard.numbers["p_layer"]))
    assert jaccard.family == "" and jaccard.adjusted == pytest.approx(jaccard.p)  # the family's one test
    assert correlation.family.startswith(DESCRIPTIVE) and not correlation.decides
    # the layer-aware null is drawn from round 3's seed, 100,000 shuffles, and its p printed with its error
    assert correlation.draws == ROUND3.shuffles == 100_000
    line = next(line for line in claim.text_lines() if "gate correlation" in line and "Jaccard" in line)
    assert " ± " in line
    # round 2: one family of both tests, Monte Carlo global null, no standard errors
    before = overlap(read_study([str(study_dir)]))
    assert {t.family for t in before.tests.values()} == {""}
    assert " ± " not in "".join(before.text_lines())
    assert before.find(regime="dp", statistic="jaccard").numbers["p_global"] != pytest.approx(exact)


def test_claim_1_counts_the_tasks_trained_alike_and_shows_the_confounded_one_alone(study_dir):
    claim = mtl_vs_stl(read_study([str(study_dir)], rules=ROUND3))
    pos, ner = claim.tests["POS"], claim.tests["NER"]  # NER trains on dev: a known confound
    assert pos.decides and pos.family == "" and pos.adjusted == pytest.approx(pos.p)
    assert not ner.decides and ner.family.startswith(DESCRIPTIVE) and ner.adjusted == pytest.approx(ner.p)
    assert claim.rule == ROUND3.verdict_rules["mtl"] != ROUND2.verdict_rules["mtl"]


def test_a_monte_carlo_p_within_two_standard_errors_of_the_level_is_not_resolved():
    def claim_of(rules, draws):
        claim = Claim("x", rules=rules)
        claim.add(ClaimTest("near", 0.02, draws=draws))
        claim.add(ClaimTest("other", 0.5, draws=draws))
        claim.adjust()
        return claim

    near = claim_of(ROUND3, 250).tests["near"]
    assert near.adjusted == pytest.approx(holm([0.02, 0.5])[0]) == pytest.approx(0.04)
    assert near.factor == 2.0 and near.standard_error == pytest.approx(math.sqrt(0.02 * 0.98 / 250))
    assert near.unresolved.startswith("not resolved at 250 draws") and not near.significant
    assert "p 0.02 ± 0.009, Holm 0.04 ± 0.02; not resolved at 250 draws" in Claim.text_lines(_with_line(claim_of(ROUND3, 250), "near"))[0]
    assert claim_of(ROUND3, 1_000_000).tests["near"].significant  # enough draws: resolved
    assert claim_of(ROUND3, 0).tests["near"].significant  # an exact test has no standard error
    assert claim_of(ROUND2, 250).tests["near"].significant  # round 2 reads the p as it is
    assert not claim_of(ROUND3, 250).tests["other"].unresolved  # far from the level: no draws could move it


def _with_line(claim: Claim, key: str) -> Claim:
    claim.lines = ["{" + key + "}"]
    return claim


def test_rules_names_a_round(study_dir, tmp_path, capsys):
    assert main([str(study_dir), "rules=round9", f"out={tmp_path / 'c.md'}"]) == 2
    assert "config key 'rules': 'round9' is not one of round2, round3" in capsys.readouterr().err
    assert main([str(study_dir), "rules=round3", f"out={tmp_path / 'c.md'}"]) == 0
    written = (tmp_path / "c.md").read_text()
    assert "rules=round3" in written and "docs/ewt-study/rules-round3.md" in written


def _train(epochs: int, lr: float, **more) -> dict:
    """A run config's train section as a real run writes it (the decoder rate too)."""
    return {"epochs": epochs, "lr_encoder": lr, "lr_decoder": 1e-3, **more}


def test_claim_5_reads_the_runs_matched_but_for_the_pruning(tmp_path):
    """SP: 2 epochs at 1e-4 (its baseline), then 1 at 1e-5 with its decoders frozen. Round 3's matched DP
    (matched3) trains the same phases in one run, its decoders frozen in the last: it alone decides. Round 2's
    matched DP (DP's record, then 1 epoch at 1e-5 with its decoders training) is shown with that confound."""
    root = make_study(tmp_path / "study")
    shutil.rmtree(root / "pos-sp")
    for seed in (1, 2, 3):  # the baselines as real runs write them: with their decoder rate
        config = root / "pos" / f"seed{seed}" / "config.yaml"
        config.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "train": _train(2, 1e-4)}))
    dp_heads, sp_heads = [5, 5, 6], [15, 16, 15]
    dp_scores, sp_scores = [95.0, 95.1, 95.2], [93.9, 94.0, 94.1]
    phases = [{"epochs": 2}, {"epochs": 1, "lr_encoder": 1e-5, "freeze": ["decoders"]}]
    for seed in (1, 2, 3):
        i = seed - 1
        make_run(root / "pos-sp" / f"seed{seed}", ("pos",), seed, test={"pos": sp_scores[i]}, experiment="pos-sp",
                 gates=gates_of(POS_KEPT[:6] + [18, 19], seed), heads_kept=sp_heads[i], train=_train(1, 1e-5),
                 prune={"mode": "static", "lambda": "auto"}, init=str(root / "pos" / f"seed{seed}"))
        make_run(root / "pos-dp-matched3" / f"seed{seed}", ("pos",), seed, test={"pos": dp_scores[i]},
                 experiment="pos-dp-matched3", gates=gates_of(POS_KEPT[:6], seed), heads_kept=dp_heads[i],
                 train=_train(3, 1e-4, phases=phases), prune={"mode": "dynamic", "lambda": "auto"})
        make_run(root / "pos-dp-matched" / f"seed{seed}", ("pos",), seed, test={"pos": 90.0 + i},
                 experiment="pos-dp-matched", gates=gates_of(POS_KEPT[:6], seed), heads_kept=6, train=_train(1, 1e-5),
                 prune={"mode": "dynamic", "lambda": "auto"}, init=str(root / "pos-dp" / f"seed{seed}"))
    claim = sp_vs_dp(read_study([str(root)], rules=ROUND3))
    labels = [c.label for c in claim.facts.comparisons]
    assert labels[0] == "POS" and set(labels) == {"POS", "POS with DP on SP's schedule",
                                                  "POS with DP on SP's encoder schedule"}
    matched = "POS with DP on SP's schedule"
    assert claim.verdict == "yes" and [c.label for c in claim.facts.deciding] == [matched]
    assert claim.rule == ROUND3.verdict_rules["sp_dp"]  # round 2's matched-runs sentence is round 2's
    tests = claim.tests
    fewer = stats.ttest_ind(dp_heads, sp_heads, equal_var=False, alternative="less").pvalue
    not_lower = stats.ttest_ind(np.add(dp_scores, MARGIN), sp_scores, equal_var=False, alternative="greater").pvalue
    assert tests[f"{matched} fewer heads"].p == pytest.approx(fewer)
    # the verdict's family: the matched setting's two tests, and nothing else
    family = {k for k, t in tests.items() if t.family == ""}
    assert family == {f"{matched} fewer heads", f"{matched} not lower"}
    assert tests[f"{matched} fewer heads"].adjusted == pytest.approx(holm([fewer, not_lower])[0])
    assert {tests[f"{matched} {w}"].family for w in ("SP fewer heads", "lower")} == {"losses"}
    assert tests["POS fewer heads"].family == DESCRIPTIVE and not tests["POS fewer heads"].decides
    assert tests[f"{matched} DP & SP Jaccard"].family == f"{DESCRIPTIVE} same heads"
    assert claim.answer.startswith("matched but for the pruning: DP wins (fewer heads, score not lower) 1 of the 1 "
                                   f"comparisons whose DP and SP both pruned ({matched})")
    assert any(note.startswith("**confound** (POS with DP on SP's encoder schedule): DP's encoder trained on SP's "
                               "schedule, but its decoders trained on") for note in claim.notes)
    assert claim.answer.count("confounded") == 1  # said once, beside what it shows
    # round 2 reads the same folders as it did: its matched runs decide, round 3's are no comparison of it
    before = sp_vs_dp(read_study([str(root)]))
    assert sorted(c.label for c in before.facts.comparisons) == ["POS", "POS with DP on SP's schedule"]
    assert before.facts.deciding[0].heads[0].tolist() == [6, 6, 6]  # round 2's matched runs
    # a matched setting with more seeds than the regime's own DP (round 3 trains five) is still no DP cell: the
    # stem cells, claims 2 and 3 read DP's reference schedule, and claim 5 still pairs the matched runs with SP
    dp_setting = read_study([str(root)], rules=ROUND3).setting("pos", "dp")
    make_run(root / "pos-dp-matched3" / "seed4", ("pos",), 4, test={"pos": 95.1}, experiment="pos-dp-matched3",
             gates=gates_of(POS_KEPT[:6], 4), heads_kept=5, train=_train(3, 1e-4, phases=phases),
             prune={"mode": "dynamic", "lambda": "auto"})
    more = read_study([str(root)], rules=ROUND3)
    assert more.setting("pos", "dp") == dp_setting == more.run_row(root / "pos-dp" / "seed1")["setting"]
    assert [c.label for c in sp_vs_dp(more).facts.deciding] == [matched]
    shutil.rmtree(root / "pos-dp-matched3" / "seed4")
    # counted only when both pruned in every seed: one matched seed that keeps 23 of 24 heads leaves it out
    metrics = root / "pos-dp-matched3" / "seed2" / "metrics.json"
    metrics.write_text(json.dumps({**json.loads(metrics.read_text()), "heads_kept": 23}))
    left = sp_vs_dp(read_study([str(root)], rules=ROUND3))
    assert left.verdict == "" and f"not counted: {matched}" in left.answer


def test_too_few_seeds_is_only_what_rules_md_defines_under_round_3():
    from mtl_heads.study import _too_few

    few = ClaimTest("t", math.nan, few=True)
    unreachable = ClaimTest("t", 0.01, reach="cannot reach significance: ...")
    no_spread = ClaimTest("t", math.nan, why="no spread")
    for rules in (ROUND2, ROUND3):
        assert _too_few(few, rules) and _too_few(unreachable, rules)
    # round 2 also read a test gone, or untestable for another reason, as too few seeds; round 3 calls it a change
    assert _too_few(None, ROUND2) and _too_few(no_spread, ROUND2)
    assert not _too_few(None, ROUND3) and not _too_few(no_spread, ROUND3)
