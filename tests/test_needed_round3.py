"""Claim 6 under round 3's rules (docs/ewt-study/rules-round3.md, "Claim 6: the second null" and "Statistics";
mtl_heads.study.rules.ROUND3) on made-up ablation records of helpers.make_study's study: both nulls read, one Holm
family per (regime, method, null), a (model, task) needing its held-out stem cells only when zero and mean
ablation beat both nulls, a place without one null's ablation unable to need them, the held-out sets chosen by
seeds 1 to 3 of the full study whatever seed stability leaves out, a random-set test within 2 standard errors of
0.05 not resolved (with what to run to draw it again with 1,000 sets a seed), and round 2's claim unchanged. The
committed ablation records' random sets are those today's code draws, and the first N sets of a draw stay the
same when more are drawn (so that a record is extended by drawing it again)."""
import json
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mtl_heads.folders import ABLATION_FOLDER, IMPORTANCE_ABLATION_FOLDER
from mtl_heads.study import REGIME_NAMES, ROUND2, ROUND3, read_study, stem_heads
from mtl_heads.study.needed import choosing_study, compute_needed, needed
from helpers import STEM, gates_of, make_run, make_study

REPO = Path(__file__).resolve().parents[1]
DP = REGIME_NAMES["dp"]
HELD_OUT = sorted(STEM)  # the DP stem cells found without POS (NER's and CON's kept heads) and without NER
CON_KEPT = [0, 1, 2, 3, 6, 7, 8, 9]  # with NER's [0, 1, 2, 3, 6, 7, 20, 21]: STEM (L1H1 is flat index 7)


@pytest.fixture
def study_dir(tmp_path):
    """make_study's study with CON pruned by DP too, seed 3 of CON without L1H1: kept in 2 of 3 seeds, L1H1 is in
    CON's kept heads, and with seed 1 or 2 left out it is not (kept in 1 of 2), so that round 2's held-out sets
    change with the seed left out."""
    root = make_study(tmp_path / "study")
    for seed in (1, 2, 3):
        kept = CON_KEPT if seed != 3 else [k for k in CON_KEPT if k != 7]
        make_run(root / "con-dp" / f"seed{seed}", ("con",), seed, test={"con": 80.0}, experiment="con-dp",
                 gates=gates_of(kept, seed), heads_kept=len(kept), prune={"mode": "dynamic", "lambda": "auto"})
    return root


def write_record(root: Path, task: str, seed: int, null: str, drops: dict, random: dict, setting: str | None = None):
    """An ablation.json where docs/ewt-study.sh's ablate stage writes it (``<setting>/seed<N>/ablation-dp-stem-cells-
    without-<task>[-importance-matched]``), of the held-out DP stem cells in ``setting``'s run of ``seed`` (default
    the task's STL setting), scored on ``task``: ``drops`` ``{method: drop}``, ``random`` ``{method: [drops of the
    random sets]}``, ``null`` ``layer`` or ``importance``."""
    template = ABLATION_FOLDER if null == "layer" else IMPORTANCE_ABLATION_FOLDER
    run = root / (setting or task) / f"seed{seed}"
    folder = run / template.format(kind="dp", task=task)
    folder.mkdir(parents=True)
    methods = {m: {task: {"metric": "accuracy", "base": 90.0, "ablated": 90.0 - d, "drop": d, "random_drops": random[m]}}
               for m, d in drops.items()}
    sets = min(len(r) for r in random.values())
    (folder / "ablation.json").write_text(json.dumps({
        "kind": "head ablation", "run": str(run), "heads": HELD_OUT, "label": f"dp stem cells without {task}",
        "tasks": [task], "methods": methods, "random_sets": sets, "seed": 0, "possible_sets": 1000, "degenerate": False,
        "matched": "layer" if null == "layer" else "layer and importance"}))
    return folder


def beaten(sets: int, hits: int = 0, spread: bool = False) -> list[float]:
    """``sets`` random-set drops of which ``hits`` (10.0) reach the held-out set's drop of 5.0, the rest 0.0: pooled
    over seeds that all draw these, p = (1 + hits) / (1 + sets). The hits come first, or with ``spread`` evenly
    spaced (so that the first quarter of the sets holds a quarter of them)."""
    if spread:
        return [10.0 if i in set(np.linspace(0, sets, hits, endpoint=False).astype(int)) else 0.0 for i in range(sets)]
    return [10.0] * hits + [0.0] * (sets - hits)


def all_four(root: Path, task: str = "pos", sets: int = 400, hits: dict | None = None, nulls=("layer", "importance"),
             spread: bool = False):
    """Zero and mean ablation of ``task``'s held-out set against each of ``nulls`` in seeds 1 to 3, drop 5.0, with
    ``hits`` ``{(method, null): random sets reaching it}`` (default none; :func:`beaten`, with ``spread``)."""
    hits = hits or {}
    for seed in (1, 2, 3):
        for null in nulls:
            write_record(root, task, seed, null, {"zero": 5.0, "mean": 5.0},
                         {m: beaten(sets, hits.get((m, null), 0), spread) for m in ("zero", "mean")})


def test_both_nulls_are_read_each_method_and_null_its_own_family_and_needed_is_all_four(study_dir):
    all_four(study_dir)
    study = read_study([str(study_dir)], rules=ROUND3)
    assert stem_heads(study, "dp", without="pos") == HELD_OUT
    claim = needed(study)
    keys = [f"{DP} STL POS {m}{n}" for m in ("zero", "mean") for n in ("", " importance")]
    assert sorted(claim.tests) == sorted(keys)
    for key in keys:  # 400 sets a seed, the rules read the first 250: p = 1/251 in a family of 1, resolved
        test = claim.tests[key]
        null = "importance" if key.endswith("importance") else "layer"
        assert test.what["null"] == null and test.family == f"dp {test.what['method']} {null}"
        assert test.p == pytest.approx(1 / 251) == test.adjusted and test.factor == 1.0 and test.draws == 250
        assert test.significant and not test.unresolved
    assert claim.facts.regimes[0].need == ["STL POS"] and claim.verdict == "yes" and claim.word == "supported"
    line = next(line for line in claim.text_lines() if line.startswith(f"{DP}, STL POS"))
    assert line.startswith(f"{DP}, STL POS (accuracy): zero: drop 5.00 (by seed: 1 5.00, 2 5.00, 3 5.00) against "
                           "layer-matched random sets' 0.00 (95th pct 0.00, 250 sets; p 0.004 ± 0.004, Holm 0.004 ± "
                           "0.004) and importance-matched random sets' 0.00 (95th pct 0.00, 250 sets; p 0.004")
    assert "; mean: drop 5.00" in line and not claim.notes


def test_drops_by_seed_are_listed_in_seed_order_whatever_order_the_records_were_read_in(study_dir):
    """A record read from a later round's annex comes after the stem's records; the line lists seeds 1, 2, 3."""
    for seed in (1, 2, 3):
        for null in ("layer", "importance"):
            write_record(study_dir, "pos", seed, null, {"zero": 4.0 + seed, "mean": 4.0 + seed},
                         {m: beaten(250) for m in ("zero", "mean")})
    study = read_study([str(study_dir)], rules=ROUND3)
    study.ablations.sort(key=lambda path_record: "seed2" not in str(path_record[0]))  # seed 2's first, as an annex's
    claim = needed(study)
    line = next(line for line in claim.text_lines() if line.startswith(f"{DP}, STL POS"))
    assert line.startswith(f"{DP}, STL POS (accuracy): zero: drop 6.00 (by seed: 1 5.00, 2 6.00, 3 7.00) against ")
    assert claim.tests[f"{DP} STL POS zero"].numbers["drop_by_seed"] == {"1": 5.0, "2": 6.0, "3": 7.0}
    assert list(claim.tests[f"{DP} STL POS zero"].numbers["drop_by_seed"]) == ["1", "2", "3"]


@pytest.mark.parametrize("failing", [("zero", "layer"), ("mean", "layer"), ("zero", "importance"),
                                     ("mean", "importance")])
def test_one_of_the_four_not_significant_and_the_pair_does_not_need_them(study_dir, failing):
    all_four(study_dir, hits={failing: 100})  # p = 101/401 for that one
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    method, null = failing
    assert not claim.tests[f"{DP} STL POS {method}" + (" importance" if null == "importance" else "")].significant
    assert sum(t.significant for t in claim.tests.values()) == 3
    assert claim.facts.regimes[0].need == [] and claim.verdict == "no" and claim.word == "not supported"


def test_a_place_without_the_importance_matched_null_cannot_need_them(study_dir):
    all_four(study_dir)  # POS: both nulls, NER: the layer-matched one alone (its families now hold 2 tests)
    all_four(study_dir, "ner", nulls=("layer",))
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    assert claim.tests[f"{DP} STL NER zero"].significant and f"{DP} STL NER zero importance" not in claim.tests
    assert claim.tests[f"{DP} STL NER zero"].family == "dp zero layer" and \
        claim.tests[f"{DP} STL POS zero"].adjusted == pytest.approx(2 / 251)  # 250 sets read first
    assert claim.tests[f"{DP} STL POS zero importance"].adjusted == pytest.approx(1 / 251)  # its family: POS alone
    found = claim.facts.regimes[0]
    assert found.need == ["STL POS"] and [p.missing for p in found.places] == [[], ["importance"]]
    # 1 of 2 pairs need them ("partly"), but NER's missing record could make it 2 of 2 ("yes"): no verdict yet
    assert claim.verdict == "" and found.open == ["STL NER"] and claim.word == "cannot be tested"
    assert "no importance-matched ablation, so not counted as needing them: STL NER" in claim.answer
    assert "records still to come (an ablation against a null, or more random sets for a test not resolved) could " \
           "change the verdict for STL NER, so it waits for them" in claim.answer
    assert "untestable" not in claim.answer
    line = next(line for line in claim.text_lines() if line.startswith(f"{DP}, STL NER"))
    assert line.endswith("; no importance-matched ablation, so not counted as needing them")
    # round 2 reads the layer-matched null alone: both pairs need them, the importance records shown as not counted
    before = needed(read_study([str(study_dir)]))
    assert before.verdict == "yes" and before.facts.regimes[0].need == ["STL POS", "STL NER"]
    assert any("is drawn against another null (layer and importance matched)" in n for n in before.notes)


def test_the_held_out_sets_stay_those_of_seeds_1_to_3_of_the_full_study_whatever_seed_is_left_out(study_dir):
    all_four(study_dir)
    study = read_study([str(study_dir)], rules=ROUND3)
    for seed in (1, 2, 3):
        left = study.without_seed(seed)
        assert stem_heads(choosing_study(left), "dp", without="pos") == HELD_OUT  # round 3: fixed
        if seed != 3:  # round 2's, from what is left: L1H1 kept in 1 of CON's 2 seeds
            assert stem_heads(left, "dp", without="pos") == [h for h in HELD_OUT if h != "L1H1"]
        again = compute_needed(left)
        assert sorted(again.tests) == sorted(compute_needed(study).tests)
        assert again.tests[f"{DP} STL POS zero importance"].numbers["drop_by_seed"].keys() == \
            {str(s) for s in (1, 2, 3) if s != seed}
    # round 2 chooses them from what is left: with seed 1 out the 6-head records are no held-out set of it
    round2 = read_study([str(study_dir)])
    assert compute_needed(round2).tests and not compute_needed(round2.without_seed(1)).tests
    # a seed outside rules.stem_seeds chooses nothing: seed 4's DP runs keep other heads
    for task, kept in (("pos", [4, 5, 10, 11]), ("ner", [4, 5, 10, 11]), ("con", [4, 5, 10, 11])):
        make_run(study_dir / f"{task}-dp" / "seed4", (task,), 4, test={task: 90.0}, experiment=f"{task}-dp",
                 gates=gates_of(kept, 4), heads_kept=4, prune={"mode": "dynamic", "lambda": "auto"})
    study = read_study([str(study_dir)], rules=ROUND3)
    assert stem_heads(choosing_study(study), "dp", without="pos") == HELD_OUT
    assert sorted(compute_needed(study).tests) == sorted(compute_needed(study.without_seed(4)).tests)


def test_a_test_within_two_standard_errors_is_not_resolved_and_says_what_to_draw(study_dir):
    # zero against the importance-matched null: 9 of 250 sets reach the drop, p = 10/251 = 0.0398 ± 0.012
    all_four(study_dir, sets=250, hits={("zero", "importance"): 9})
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    near = claim.tests[f"{DP} STL POS zero importance"]
    assert near.p == pytest.approx(10 / 251) and near.draws == 250
    assert near.unresolved.startswith("not resolved at 250 draws") and not near.significant
    # the pair's four tests are not all significant today ("no"), but the rules draw 750 more sets for this one,
    # which may settle it as significant ("yes"): no verdict until then
    assert claim.verdict == "" and claim.facts.regimes[0].open == ["STL POS"]
    assert "could change the verdict for STL POS, so it waits for them" in claim.answer
    assert "not resolved, counted as not significant: STL POS zero importance (at 250 sets)" in claim.answer
    # at the floor of 250 sets a family of 1 is resolved: 1/251 ± 0.004 is far from 0.05
    assert not claim.tests[f"{DP} STL POS zero"].unresolved
    [note] = claim.notes  # the one test to draw again: its three records, by the study script's ablate stage
    assert note == (f"{DP} STL POS zero importance: not resolved at 250 random sets (Holm p within 2 standard errors "
                    "of 0.05); the rules draw 1,000 a seed for such a test, and an ablation drawn again with more goes "
                    "on from the sets it holds (the i-th set does not depend on how many are drawn): "
                    f"`ABLATE_SETS=1000 ABLATE=dp ABLATE_NULLS=importance ABLATE_TASKS=pos "
                    f"SETTINGS=pos SEEDS='1 2 3' STUDY={study_dir} STEMS={study_dir} bash docs/ewt-study.sh ablate`")


@pytest.mark.parametrize("importance_hits", [100, 30])
def test_a_pair_with_a_test_no_record_can_make_significant_does_not_hold_the_verdict(study_dir, importance_hits):
    """STL POS's layer-matched tests are not resolved at 250 sets (9 hits: the rules draw them again), and its zero
    ablation against the importance-matched null has 100 (p 0.40 ± 0.03) or 30 (p 0.12 ± 0.02) of 250 sets as high:
    more than 2 standard errors above 0.05, so no Holm factor (at least 1) brings it below 0.05 or into the band
    the rules draw again, the pair cannot need its stem cells whatever the layer-matched records say, and the
    verdict does not wait for them. With 3 sets as high (p 0.016, significant) the layer-matched records still to
    come decide the pair: it is open again and the verdict waits."""
    hits = {("zero", "layer"): 9, ("mean", "layer"): 9, ("zero", "importance"): importance_hits}
    all_four(study_dir, sets=250, hits=hits)
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    assert claim.tests[f"{DP} STL POS zero"].unresolved and not claim.tests[f"{DP} STL POS zero importance"].unresolved
    assert claim.verdict == "no" and claim.facts.regimes[0].open == [] and "waits" not in claim.answer
    for path in study_dir.rglob("ablation-dp-stem-cells-without-pos-importance-matched/ablation.json"):
        record = json.loads(path.read_text())
        record["methods"]["zero"]["pos"]["random_drops"] = beaten(250, 3)
        path.write_text(json.dumps(record))
    again = needed(read_study([str(study_dir)], rules=ROUND3))
    assert again.verdict == "" and again.facts.regimes[0].open == ["STL POS"]
    assert "could change the verdict for STL POS, so it waits for them" in again.answer


def test_a_test_still_within_two_standard_errors_at_1000_sets_is_named_and_not_drawn_again(study_dir):
    # 44 hits spread over the 1,000 (11 in the first 250: p = 12/251 = 0.048 ± 0.013, read again at 1,000)
    all_four(study_dir, sets=1000, hits={("mean", "layer"): 44}, spread=True)  # p = 45/1001 = 0.045 ± 0.007
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    near = claim.tests[f"{DP} STL POS mean"]
    assert near.unresolved.startswith("not resolved at 1,000 draws") and not near.significant
    assert "not resolved, counted as not significant: STL POS mean (at 1,000 sets)" in claim.answer
    assert not claim.notes  # nothing more to draw
    # nothing more to come: the verdict stands as the rule reads it (a test not resolved counts as not significant)
    assert claim.verdict == "no" and claim.facts.regimes[0].open == [] and "waits" not in claim.answer


def test_round_2_reads_the_same_records_as_before(study_dir):
    """Round 2 (docs/ewt-study/rules.md): the layer-matched null alone, one family per (regime, method), the
    held-out sets from the study as it is, no standard errors, the importance-matched records shown as not counted:
    the words pinned here are those of the code before round 3's null was read (test_published checks the
    published documents byte for byte)."""
    all_four(study_dir, sets=250, hits={("zero", "importance"): 9})
    study = read_study([str(study_dir)], rules=ROUND2)
    claim = needed(study)
    assert sorted(claim.tests) == [f"{DP} STL POS mean", f"{DP} STL POS zero"]
    assert {t.family for t in claim.tests.values()} == {"dp zero", "dp mean"}
    assert all(t.draws == 0 and "null" not in t.what and not t.unresolved for t in claim.tests.values())
    assert claim.verdict == "yes" and claim.answer == (
        f"the {DP} stem cells found without each task are needed by 1 of 1 (model, task) pairs (STL POS)")
    assert claim.text_lines()[1] == (
        f"{DP}, STL POS (accuracy): zero: drop 5.00 (by seed: 1 5.00, 2 5.00, 3 5.00) against random sets' 0.00 "
        "(95th pct 0.00, 250 sets; p 0.004, Holm 0.004); mean: drop 5.00 (by seed: 1 5.00, 2 5.00, 3 5.00) against "
        "random sets' 0.00 (95th pct 0.00, 250 sets; p 0.004, Holm 0.004)")
    assert claim.notes == [
        "'dp stem cells without pos' (6 heads: L0H0, L0H1, L0H2, L0H3, L1H0, L1H1) is drawn against another null "
        "(layer and importance matched) than the rule's layer-matched one: shown, not counted (STL POS seed 1 zero; "
        "STL POS seed 1 mean; STL POS seed 2 zero; STL POS seed 2 mean; STL POS seed 3 zero; STL POS seed 3 mean)"]


# --- the random sets: extended by drawing again ---------------------------------------------------------------
def _committed_records() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "docs/ewt-study*/**ablation.json"], cwd=REPO, capture_output=True,
                            text=True)
    found = [REPO / p for p in listed.stdout.split()] if listed.returncode == 0 else []
    return found or sorted(REPO.glob("docs/ewt-study*/**/ablation.json"))


def test_todays_draws_are_the_committed_records_sets_and_their_first_sets_stay_when_more_are_drawn():
    """Every committed ablation.json's random_heads are what matched_sets draws today from its heads, random_sets,
    seed and block (MiniLM: 12 heads a layer); drawing 1,000 keeps the first 250, for layer- and cell-matched
    (importance) sets alike."""
    from mtl_heads.analysis.ablation import matched_sets
    from mtl_heads.model.headsets import head_grid, head_names, importance_cells

    records = _committed_records()
    assert len(records) >= 40
    for path in records:
        record = json.loads(path.read_text())
        chosen = head_grid(record["heads"], len(record["heads_per_layer"]), 12)
        assert chosen.sum(1).tolist() == record["heads_per_layer"], path
        cells = np.array(record["importance_cells"]) if record.get("matched") == "layer and importance" else None
        sets = matched_sets(chosen, record["random_sets"], record["seed"], record["block"], cells=cells)
        assert [head_names(s) for s in sets] == record["random_heads"], path
    chosen = np.zeros((6, 12), dtype=bool)
    chosen[0, [2, 5]] = chosen[1, [2, 4, 6]] = chosen[2, 8] = True
    cells = importance_cells(np.random.default_rng(1).random((6, 12)), 3)
    for kw in ({}, {"cells": cells}):
        few, more = matched_sets(chosen, 250, 0, **kw), matched_sets(chosen, 1000, 0, **kw)
        assert (more[:250] == few).all() and (more.sum((1, 2)) == chosen.sum()).all()
        assert not (more[250:500] == few).all()  # 750 new sets, not the first 250 again


def test_a_test_not_resolved_at_250_sets_is_read_at_1000_where_its_records_hold_them(study_dir):
    """The rules read 250 sets a seed first, and 1,000 for a test whose Holm p lies within 2 standard errors of
    0.05: records drawn with 1,000 from the start hold that extension (their first 250 are the first draw)."""
    # zero against the layer null: 9 hits, all among the first 250 (p = 10/251 = 0.040 ± 0.012: not resolved), and
    # none after (p = 10/1001 = 0.010 ± 0.003 at 1,000: significant); the other tests resolve at 250
    all_four(study_dir, sets=1000, hits={("zero", "layer"): 9})
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    read_again = claim.tests[f"{DP} STL POS zero"]
    assert read_again.draws == 1000 and read_again.p == pytest.approx(10 / 1001) and read_again.numbers["sets"] == 1000
    assert read_again.significant and not read_again.unresolved
    assert all(t.draws == 250 for k, t in claim.tests.items() if k != f"{DP} STL POS zero")
    assert claim.verdict == "yes" and not claim.notes


@pytest.mark.parametrize("failing", [("zero", "importance"), ("zero", "layer")])
def test_where_the_second_null_changes_a_pair_the_answer_shows_the_layer_null_alone_beside(study_dir, failing):
    all_four(study_dir, hits={failing: 100})
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    assert claim.verdict == "no"
    beside = ("against the layer-matched null alone (round 2's null, every other rule round 3's) they are needed by "
              "1 of 1 (STL POS), which reads *supported*")
    if failing[1] == "importance":  # the second null changes the pair, and the verdict: both shown
        assert claim.facts.regimes[0].layer_need == ["STL POS"] and beside in claim.answer
    else:  # the layer-matched null fails too: nothing changes, nothing more said
        assert claim.facts.regimes[0].layer_need == [] and "layer-matched null alone" not in claim.answer


# --- amendment 1: a small null read from its exact law --------------------------------------------------------
NAMES = [f"L{layer}H{head}" for layer in range(2) for head in range(6)]  # helpers' study: 2 layers of 6 heads
CELLS = {1: [[0] * 6, [1, 2, 1, 2, 1, 2]], 2: [[0] * 6, [1, 2, 2, 1, 1, 2]], 3: [[0] * 6, [1, 2, 1, 2, 1, 2]]}
HIGH = {"L0H4", "L0H5", "L1H2"}  # the heads whose sets drop more


def set_drop(heads: set[str], seed: int) -> float:
    """A random set's drop in a seed: 5.0 for the held-out set itself, else 2 per head of HIGH, plus 0.1 x seed."""
    return 5.0 if heads == set(HELD_OUT) else 2.0 * len(heads & HIGH) + 0.1 * seed


def write_cells_records(root: Path, sets: int = 3000, short: int | None = None):
    """Seeds 1 to 3 of STL POS, zero and mean alike: a layer-matched record no random set beats (250 sets) and an
    importance-matched record whose ``sets`` random sets are what matched_sets draws in CELLS (layer 0 one cell of
    6 heads, 4 held out: 15 sets; layer 1 two cells of 3, one held out in each: 9; seed 2's cells of layer 1 not
    seeds 1 and 3's), each scored by set_drop; ``short`` (a seed): that seed's record holds its first 20 sets only."""
    from mtl_heads.analysis.ablation import matched_sets
    from mtl_heads.model.headsets import head_names

    all_four(root, sets=250, nulls=("layer",))
    grid = np.isin(np.array(NAMES).reshape(2, 6), HELD_OUT)
    for seed in (1, 2, 3):
        drawn = [head_names(s) for s in matched_sets(grid, 20 if seed == short else sets, 0,
                                                     cells=np.array(CELLS[seed]))]
        folder = write_record(root, "pos", seed, "importance", {"zero": 5.0, "mean": 5.0},
                              {m: [set_drop(set(h), seed) for h in drawn] for m in ("zero", "mean")})
        record = json.loads((folder / "ablation.json").read_text())
        record.update(random_heads=drawn, importance_cells=CELLS[seed], heads_per_layer=[4, 2])
        (folder / "ablation.json").write_text(json.dumps(record))


def brute_force_law() -> tuple[float, float]:
    """(P(pooled drop >= 5.0), P(every seed draws the held-out set)) over every order of each layer's 6 heads:
    in each cell the heads first in the order are drawn, one order a layer for all seeds (records of one seed)."""
    import itertools
    from collections import Counter

    firsts = []
    for layer in range(2):
        seen = Counter()
        for order in itertools.permutations(range(6)):
            sets = []
            for seed in (1, 2, 3):
                cells, chosen = CELLS[seed][layer], [f"L{layer}H{h}" in HELD_OUT for h in range(6)]
                picked = []
                for cell in set(cells):
                    members = [h for h in order if cells[h] == cell]
                    picked += members[:sum(chosen[h] for h in members)]
                sets.append(frozenset(f"L{layer}H{h}" for h in picked))
            seen[tuple(sets)] += 1
        firsts.append({k: v / 720 for k, v in seen.items()})
    reach = stem = 0.0
    for (zero, p0), (one, p1) in itertools.product(firsts[0].items(), firsts[1].items()):
        drops = [set_drop(set(zero[i] | one[i]), seed) for i, seed in enumerate((1, 2, 3))]
        reach += p0 * p1 * (np.mean(drops) >= 5.0 - 1e-9)
        stem += p0 * p1 * all(set(zero[i] | one[i]) == set(HELD_OUT) for i in range(3))
    return reach, stem


def test_a_null_whose_every_set_is_scored_is_read_from_its_exact_law(study_dir):
    """Amendment 1: each seed's importance-matched record scored all 15 x 9 sets its cells allow, so the pooled
    test's p is the law of the joint draw (seeds share row i), P(pooled drop >= observed), checked against every
    order of the heads; its floor is the chance that a draw is the held-out set in every seed, no standard error;
    the Monte Carlo reading of the rules as first written is shown beside it."""
    write_cells_records(study_dir)
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    reach, stem = brute_force_law()
    for method in ("zero", "mean"):
        test = claim.tests[f"{DP} STL POS {method} importance"]
        assert test.p == pytest.approx(reach, abs=1e-12) and test.floor == pytest.approx(stem, abs=1e-12)
        assert test.draws == 0 and test.exact_floor and not test.unresolved and np.isnan(test.standard_error)
        assert test.numbers["exact"]["sets_by_seed"] == {"1": 135, "2": 135, "3": 135}
        mc = claim.facts.monte_carlo.tests[test.key]  # the random sets alone: a Monte Carlo p of the same null
        assert mc.draws == 250 and "exact" not in mc.numbers and abs(mc.p - reach) < 4 * mc.standard_error + 1 / 251
    assert 1 / 135 ** 3 < stem < 1 / 135  # seeds drawn from one row are tied: more often than independent ones
    line = claim.text_lines()[1]
    assert line.count(f"exact law: all 135 sets a seed's null can draw are scored, and 1 draw in {1 / stem:,.0f} is "
                      "the ablated set in every seed; p ") == 2
    assert line.count("; from the 250 random sets alone (the rules as first written): p ") == 2
    assert ("read from their null's exact law, every set of it scored in each seed "
            "(docs/ewt-study/rules-round3-amendment-1.md, written after these records): STL POS zero importance, "
            "STL POS mean importance") in claim.answer
    # round 2 reads the layer-matched null alone, as before; a seed left out reads the law of the two left
    assert all("exact" not in t.numbers for t in needed(read_study([str(study_dir)], rules=ROUND2)).tests.values())
    study = read_study([str(study_dir)], rules=ROUND3)
    left = compute_needed(study.without_seed(2))
    assert left.tests[f"{DP} STL POS zero importance"].numbers["exact"]["sets_by_seed"] == {"1": 135, "3": 135}
    assert left.facts.monte_carlo is None  # the Monte Carlo reading is the full study's only


def test_a_null_with_a_set_not_scored_is_read_by_monte_carlo_and_a_floor_too_high_cannot_reach(study_dir):
    """A seed whose record holds 20 of its 135 sets: the test is the rules' Monte Carlo one, as first written.
    And an exact floor times the family's size at 0.05 or more cannot reach significance, said in the law's words."""
    write_cells_records(study_dir, short=2)
    claim = needed(read_study([str(study_dir)], rules=ROUND3))
    test = claim.tests[f"{DP} STL POS zero importance"]
    assert "exact" not in test.numbers and test.draws == 20 and not test.exact_floor
    assert claim.facts.monte_carlo is None and "exact law" not in claim.answer
    from mtl_heads.study.core import Claim, Test

    high = Claim("x", rule="", rules=ROUND3)
    high.add(Test("a", 0.01, floor=0.01, family="f", exact_floor=True))
    for key in "bcdef":
        high.add(Test(key, 0.5, floor=0.0, family="f"))
    high.adjust()
    assert high.tests["a"].reach == ("cannot reach significance: its null's exact law allows p >= 0.01, and Holm over "
                                     "6 tests needs a p below 0.0083")


def test_an_importance_matched_record_with_a_head_outside_its_cells_is_an_error_naming_the_file(study_dir):
    """A head of an importance-matched record outside the grid its cells span (or listed twice) stops the claims
    with a DataError naming the record, not an IndexError from deep inside."""
    from mtl_heads.data.errors import DataError

    write_cells_records(study_dir, sets=40)
    path = next(p for p in sorted(study_dir.rglob("ablation.json")) if "importance_cells" in json.loads(p.read_text()))
    record = json.loads(path.read_text())
    for heads, says in ((record["heads"] + ["L5H0"], "L5H0: outside the 2 x 6 grid"),
                        (record["heads"] + record["heads"][:1], f"{record['heads'][0]}: listed twice")):
        path.write_text(json.dumps({**record, "heads": heads}))
        with pytest.raises(DataError, match=f"{re.escape(str(path))}: 'heads': {re.escape(says)}"):
            needed(read_study([str(study_dir)], rules=ROUND3))


@pytest.mark.parametrize("family, settled", [(4, True), (5, False)])
def test_a_test_is_settled_against_only_where_no_holm_factor_can_bring_it_into_the_band(family, settled):
    """p 0.6 from 25 draws (standard error 0.098): more than 2 standard errors above 0.05, but an adjusted p capped
    at 1 lies within 2 x factor x 0.098 of 0.05 once the factor can reach 5, so in a family of 5 the rules could
    still draw it again: not settled; in a family of 4 it is."""
    from mtl_heads.study.core import Claim, Test
    from mtl_heads.study.needed import _settled_against

    claim = Claim("x", rule="", rules=ROUND3)
    claim.add(Test("a", 0.6, floor=1 / 26, family="f", draws=25))
    for key in "bcdefgh"[:family - 1]:
        claim.add(Test(key, 0.001, floor=0.0, family="f"))
    claim.adjust()
    assert not claim.tests["a"].unresolved and _settled_against(claim, "a") is settled
