"""Task decoders and metrics against hand-computed cases, seqeval and brute force."""
import itertools

import pytest
import torch
from seqeval.metrics import f1_score

from mtl_heads.data.sentence import Sentence
from tasks import TASKS
from tasks.ner import CRFTagger, SpanF1, spans_to_bio
from tasks.pos import TagAccuracy

from helpers import overfit


def test_registry_has_spine_tasks():
    assert {"pos", "ner"} <= set(TASKS)
    for name, cls in TASKS.items():
        assert cls.name == name and cls.needs and cls.main_metric


def test_the_main_metrics_known_without_the_tasks_are_theirs():
    """Reading scores (compare, claims, the study) takes each task's main metric from ``MAIN_METRICS``, without
    importing the tasks: the metric each task's class names."""
    from mtl_heads.reports.curves import MAIN_METRICS, main_metric

    assert MAIN_METRICS == {name: task.main_metric for name, task in TASKS.items()}
    assert main_metric("dep", {"uas": 90.0, "las": 88.0}) == "las" and main_metric("dep", {"uas": 90.0}) == "uas"


def test_accuracy_hand_computed():
    m = TagAccuracy()
    m.update([["DT", "NN", "VB"], ["NN"]], [["DT", "NN", "NN"], ["NN"]])
    assert m.compute()["accuracy"] == pytest.approx(75.0)
    with pytest.raises(ValueError):
        m.update([["DT"]], [["DT", "NN"]])


def test_span_f1_hand_computed_and_against_seqeval():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "B-ORG", "I-ORG", "O"]]
    pred = [["B-PER", "I-PER", "O", "O"], ["O", "B-ORG", "O", "B-LOC"]]
    m = SpanF1()
    m.update(pred, gold)
    scores = m.compute()
    # gold: 3 entities; pred: 3 (PER ok, ORG[1:2] wrong span, LOC spurious) -> P = R = 1/3
    assert scores["precision"] == pytest.approx(100 / 3)
    assert scores["recall"] == pytest.approx(100 / 3)
    assert scores["f1"] == pytest.approx(100 * f1_score(gold, pred))


def test_spans_to_bio():
    assert spans_to_bio([(0, 2, "PER"), (3, 4, "LOC")], 5) == ["B-PER", "I-PER", "O", "B-LOC", "O"]


def test_crf_decode_matches_brute_force():
    torch.manual_seed(0)
    labels = ["B-X", "I-X", "O"]
    crf = CRFTagger(4, labels, dropout=0.0)
    with torch.no_grad():
        crf.transitions.normal_()
    scores = torch.randn(2, 4, 3)
    mask = torch.tensor([[True] * 4, [True, True, True, False]])
    decoded = crf.decode(scores, mask)
    trans = crf.transitions
    for b in range(2):
        n = int(mask[b].sum())
        best, best_seq = None, None
        for seq in itertools.product(range(3), repeat=n):
            s = trans[-1, seq[0]] + scores[b, 0, seq[0]]
            for i in range(1, n):
                s = s + trans[seq[i - 1], seq[i]] + scores[b, i, seq[i]]
            s = s + trans[seq[-1], -1]
            if best is None or s > best:
                best, best_seq = s, seq
        assert decoded[b] == [labels[i] for i in best_seq]


def test_crf_loss_is_negative_log_likelihood_by_enumeration():
    torch.manual_seed(1)
    crf = CRFTagger(4, ["B-X", "I-X", "O"], dropout=0.0)
    with torch.no_grad():
        crf.transitions.normal_()
    scores = torch.randn(1, 3, 3)
    mask = torch.ones(1, 3, dtype=torch.bool)
    target = torch.tensor([[0, 1, 2]])
    trans = crf.transitions

    def path(seq):
        s = trans[-1, seq[0]] + scores[0, 0, seq[0]]
        for i in range(1, 3):
            s = s + trans[seq[i - 1], seq[i]] + scores[0, i, seq[i]]
        return s + trans[seq[-1], -1]

    log_z = torch.logsumexp(torch.stack([path(s) for s in itertools.product(range(3), repeat=3)]), 0)
    nll = (log_z - path((0, 1, 2))) / 3  # mean per word
    assert crf.loss(scores, target, mask).item() == pytest.approx(nll.item(), rel=1e-5)


def test_tasks_declare_layers_and_build_targets():
    s = Sentence(words=["Ann", "met", "Bob"], pos=["NNP", "VBD", "NNP"], entities=[(0, 1, "PERSON"), (2, 3, "PERSON")])
    bare = Sentence(words=["x"], pos=["NN"])
    pos, ner = TASKS["pos"](), TASKS["ner"]()
    pos.fit_labels([s])
    ner.fit_labels([s])
    assert ner.labels == ["B-PERSON", "I-PERSON", "O"]
    assert pos.usable(bare) and not ner.usable(bare)
    assert ner.targets([s], 4).tolist() == [[0, 2, 0, -100]]
    assert pos.ids(["NNP", "XX"]) == [pos.index["NNP"], -100]


def test_biaffine_span_decoder_greedy_non_overlapping_and_learns():
    from tasks.ner import greedy_non_overlapping

    assert greedy_non_overlapping([(0.9, 1, 2, 0), (0.8, 2, 3, 1), (0.7, 0, 0, 1)]) == [(1, 3, 0), (0, 1, 1)]
    torch.manual_seed(0)
    s = Sentence(words=list("abcde"), entities=[(0, 2, "PER"), (3, 4, "LOC")])
    task = TASKS["ner"]({"decoder": "biaffine", "mlp_dropout": 0.0, "n_mlp": 16})
    task.fit_labels([s])
    assert task.types == ["LOC", "PER"]
    targets = task.targets([s], 6)
    assert targets[0, 0, 1] == 2 and targets[0, 3, 3] == 1 and targets.sum() == 3
    decoder = task.build_decoder(8)
    words, mask = torch.randn(1, 6, 8), torch.tensor([[True] * 5 + [False]])
    losses = overfit(decoder, words, mask, targets, steps=60)
    assert losses[-1] < losses[0] / 10
    assert decoder.decode(decoder(words, mask), mask) == [task.gold(s)]


def test_unknown_ner_decoder_is_a_config_error():
    from mtl_heads.config import ConfigError

    with pytest.raises(ConfigError, match="task.ner.decoder"):
        TASKS["ner"]({"decoder": "lstm"}).build_decoder(8)
