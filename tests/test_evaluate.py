"""python -m mtl_heads evaluate: a run on a corpus gives its training-time scores; files are scored
like decoded batches."""
import json
import re

import pytest

from mtl_heads.data.conll2012 import read_conll2012, write_conll2012
from mtl_heads.commands.evaluate import main
from mtl_heads.analysis.evaluation import score_sentences
from tasks import TASKS
from helpers import TINY_RUN

FIVE = ["pos", "ner", "dep", "con", "srl"]


@pytest.fixture(scope="module")
def trained(tiny_runs):
    """A one-epoch five-task run of the tiny BERT (helpers.TINY_RUN), shared with test_predict's; the corpus
    cache beside it, which the tests read their gold sentences from."""
    run_dir = tiny_runs(*TINY_RUN, "tasks=pos,ner,dep,con,srl")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MTL_HEADS_CACHE", str(run_dir.parent / "cache"))
        yield run_dir


def test_a_run_on_its_own_test_split_gives_its_metrics(trained, capsys):
    saved = json.loads((trained / "metrics.json").read_text())
    out = trained.parent / "scores.json"
    assert main([str(trained), "split=test", "progress=false", f"out={out}"]) == 0
    result = json.loads(out.read_text())
    assert result["scores"] == saved["test"]
    assert result["weights_sha256"] == saved["weights_sha256"]  # the weights scored, named
    assert "scores of" in capsys.readouterr().out


def test_subset_of_tasks_and_unknown_task(trained, capsys):
    assert main([str(trained), "tasks=pos", "progress=false"]) == 0
    assert "pos (8 sentences)" in capsys.readouterr().out
    assert main([str(trained), "tasks=pos,xyz"]) == 2
    assert "config key 'tasks'" in capsys.readouterr().err


def gold_sentences(cache):
    """The demo corpus's test split with dependencies converted from its trees (as training does)."""
    from mtl_heads.data.corpus import convert_trees

    files = sorted(cache.rglob("test*_conll")) or sorted(cache.rglob("*test*"))
    sentences = read_conll2012(files[0])
    convert_trees(sentences)
    return sentences


def test_gold_against_itself_is_perfect_and_a_broken_copy_is_not(trained, tmp_path):
    gold = gold_sentences(trained.parent / "cache")
    tasks = {n: TASKS[n]() for n in FIVE}
    perfect = score_sentences(gold, gold, tasks)["scores"]
    assert perfect["pos"]["accuracy"] == 100 and perfect["ner"]["f1"] == 100 and perfect["dep"]["las"] == 100
    assert perfect["con"]["f1"] == 100 and perfect["srl"]["f1"] == 100
    # hand-computed: one POS tag wrong out of all words
    broken = read_conll2012(write_conll2012(gold, tmp_path / "pred_conll"))
    broken[0].pos[0] = "XX"
    words = sum(len(s.words) for s in gold)
    assert score_sentences(broken, gold, {"pos": tasks["pos"]})["scores"]["pos"]["accuracy"] == pytest.approx(
        100 * (words - 1) / words)


def test_unpredicted_sentences_count_as_missed(trained):
    gold = gold_sentences(trained.parent / "cache")
    pred = read_conll2012(write_conll2012(gold, trained.parent / "p_conll"))
    for layer in ("pos", "tree", "entities", "predicates", "arguments", "heads", "rels"):
        setattr(pred[0], layer, None)  # what predict writes for a sentence over the encoder limit
    tasks = {n: TASKS[n]() for n in ("pos", "con")}
    result = score_sentences(pred, gold, tasks)
    assert result["unpredicted"] == {"pos": 1, "con": 1}
    words = sum(len(s.words) for s in gold)
    assert result["scores"]["pos"]["accuracy"] == pytest.approx(100 * (words - len(gold[0].words)) / words)
    assert result["scores"]["con"]["recall"] < 100 and result["scores"]["con"]["precision"] == 100


def test_files_that_do_not_match_are_clear_errors(trained, tmp_path, capsys):
    gold = gold_sentences(trained.parent / "cache")
    write_conll2012(gold, tmp_path / "gold_conll")
    write_conll2012(gold[:-1], tmp_path / "short_conll")
    assert main(["pred=" + str(tmp_path / "short_conll"), "gold=" + str(tmp_path / "gold_conll"), "tasks=pos"]) == 2
    assert "short_conll:1:" in capsys.readouterr().err
    assert main(["pred=" + str(tmp_path / "gold_conll"), "tasks=pos"]) == 2
    assert "give both files" in capsys.readouterr().err


def test_round_trip_predict_write_read_score_equals_the_run_metrics(trained, tmp_path):
    """Predicting the test split, writing it, reading it back and scoring it against gold gives
    exactly the test scores training wrote to metrics.json, for all five tasks."""
    from mtl_heads.data.formats import write
    from mtl_heads.analysis.inference import Predictor

    saved = json.loads((trained / "metrics.json").read_text())["test"]
    gold = gold_sentences(trained.parent / "cache")
    predicted, _ = Predictor.load(trained, device="cpu").predict_sentences(gold, batch_size=4)
    write(predicted, tmp_path / "pred.jsonl")
    write(gold, tmp_path / "gold.jsonl")
    out = tmp_path / "scores.json"
    assert main([f"pred={tmp_path / 'pred.jsonl'}", f"gold={tmp_path / 'gold.jsonl'}", "tasks=pos,ner,dep,con,srl",
                 f"out={out}"]) == 0
    assert json.loads(out.read_text())["scores"] == saved
    # CoNLL-2012 holds four of the layers (no dependencies): the same scores for those
    write(predicted, tmp_path / "pred_conll")
    write(gold, tmp_path / "gold_conll")
    assert main([f"pred={tmp_path / 'pred_conll'}", f"gold={tmp_path / 'gold_conll'}", "tasks=pos,ner,con,srl",
                 f"out={out}"]) == 0
    assert json.loads(out.read_text())["scores"] == {t: saved[t] for t in ("pos", "ner", "con", "srl")}


def test_counts_print_as_integers_and_rates_with_two_decimals(trained, capsys):
    from mtl_heads.analysis.evaluation import format_metric, format_metrics

    assert format_metrics({"accuracy": 93.6512, "tokens": 19083.0}) == "accuracy 93.65  tokens 19083"
    assert format_metric("words", 120.0) == "120" and format_metric("sentences", 7) == "7"
    assert format_metric("accuracy", 100.0) == "100.00"  # a whole rate stays a rate
    assert format_metric("tokens", 2.5) == "2.50"  # not a whole count: shown as it is
    assert main([str(trained), "tasks=pos,dep", "progress=false"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"pos \(8 sentences\): accuracy \d+\.\d\d  tokens \d+$", out, re.M), out
    assert re.search(r"dep \(\d+ sentences\): uas \d+\.\d\d  las \d+\.\d\d  words \d+$", out, re.M), out


def test_a_cut_split_is_named_beside_its_scores(trained, capsys):
    out = trained.parent / "cut.json"
    assert main([str(trained), "tasks=pos", "progress=false", "data.demo_sizes={train: 24, dev: 8, test: 8}",
                 "data.max_eval_sentences=3", f"out={out}"]) == 0
    printed = capsys.readouterr().out
    assert "on the test split, the first 3 of its 8 sentences (data.max_eval_sentences=3):" in printed
    assert json.loads(out.read_text())["eval_cut"] == {"kept": 3, "of": 8, "start": 0, "by": "data.max_eval_sentences=3"}
    whole = trained.parent / "whole.json"
    assert main([str(trained), "tasks=pos", "progress=false", f"out={whole}"]) == 0
    assert "eval_cut" not in json.loads(whole.read_text()) and ", the first" not in capsys.readouterr().out
