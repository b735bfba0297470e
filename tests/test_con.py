"""Constituency parsing (tasks/con.py): EVALB metric by hand and against supar's SpanMetric,
CKY/MBR decoding against brute-force enumeration, the tree <-> chart round trip, the loss."""
import math
import random

import nltk
import pytest
import torch
from supar.structs import ConstituencyCRF
from supar.utils.metric import SpanMetric
from supar.utils.transform import Tree as SuparTree

from mtl_heads.data.demo import generate_demo
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from tasks.con import BracketF1, ConTask, CRFConstituencyDecoder, chart_to_tree, tree_to_chart

from helpers import overfit

T = nltk.Tree.fromstring


def score(pred: str, gold: str) -> dict[str, float]:
    metric = BracketF1()
    metric.update([T(pred)], [T(gold)])
    return metric.compute()


# ---------------------------------------------------------------- metric, by hand

GOLD = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (PRP it))) (. .)))"  # S, NP, VP, NP


def test_identical_trees_score_100():
    assert score(GOLD, GOLD) == {"f1": 100.0, "precision": 100.0, "recall": 100.0, "complete_match": 100.0}


def test_one_wrong_label():
    pred = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (ADJP (PRP it))) (. .)))"
    s = score(pred, GOLD)  # 3 of 4 brackets match on both sides
    assert s["precision"] == s["recall"] == s["f1"] == pytest.approx(75.0)
    assert s["complete_match"] == 0.0


def test_one_missing_bracket():
    pred = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (PRP it)) (. .)))"
    s = score(pred, GOLD)  # pred 3 brackets all right, gold 4
    assert s["precision"] == pytest.approx(100.0)
    assert s["recall"] == pytest.approx(75.0)
    assert s["f1"] == pytest.approx(2 * 100 * 75 / 175)


def test_punctuation_at_span_edge_does_not_matter():
    # the final period inside VP (pred) or under S (gold): after deleting it the spans agree
    pred = "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (PRP it)) (. .))))"
    assert score(pred, GOLD)["f1"] == pytest.approx(100.0)
    # same for a comma at the start of a phrase; the predicted tree's own tags are ignored
    gold = "(TOP (S (NP (NN x)) (, ,) (VP (VB go) (ADVP (RB now)))))"
    pred = "(TOP (S (NP (_ x)) (VP (_ ,) (_ go) (ADVP (_ now)))))"
    assert score(pred, gold)["complete_match"] == pytest.approx(100.0)
    # a constituent made of punctuation only disappears: 1 gold bracket (S), 2 predicted -> P = 50
    pred = "(TOP (S (NP (NN x)) (PRN (, ,))))"
    s = score(pred, "(TOP (S (NP (NN x)) (, ,)))")
    assert (s["precision"], s["recall"]) == (pytest.approx(100.0), pytest.approx(100.0))
    s = score("(TOP (S (NN x) (, ,)))", "(TOP (S (NP (NN x)) (, ,)))")
    assert (s["precision"], s["recall"]) == (pytest.approx(100.0), pytest.approx(50.0))


def test_advp_equals_prt():
    gold = "(TOP (S (NP (PRP I)) (VP (VBD gave) (PRT (RP up)))))"
    pred = "(TOP (S (NP (PRP I)) (VP (VBD gave) (ADVP (RP up)))))"
    assert score(pred, gold)["f1"] == pytest.approx(100.0)


def test_unary_chain_and_duplicates_are_a_multiset():
    gold = "(TOP (S (VP (VB Go))))"  # S(0,1), VP(0,1)
    assert score("(TOP (S (VB Go)))", gold) == pytest.approx(
        {"f1": 200 / 3, "precision": 100.0, "recall": 50.0, "complete_match": 0.0})
    gold = "(TOP (NP (NP (NN x)) (PP (IN of) (NP (NN y)))))"  # NP(0,3) NP(0,1) PP(1,3) NP(2,3)
    pred = "(TOP (NP (NP (NP (NN x))) (PP (IN of) (NP (NN y)))))"  # an extra NP(0,1)
    s = score(pred, gold)
    assert (s["precision"], s["recall"]) == (pytest.approx(80.0), pytest.approx(100.0))


def test_chart_rejects_tree_that_does_not_match_the_words():
    s = Sentence(words=["a", "c"], tree=T("(TOP (S (NN a) (NN b)))"), source="f.conll:3")
    with pytest.raises(DataError, match="^f.conll:3: tree leaves"):
        ConTask().chart(s)


def test_metric_rejects_length_mismatch():
    with pytest.raises(ValueError, match="leaves"):
        BracketF1().update([T("(TOP (S (NN a)))")], [T("(TOP (S (NN a) (NN b)))")])


# ---------------------------------------------------------------- metric vs supar's SpanMetric


def random_tree(rng: random.Random, words: list[str]) -> nltk.Tree:
    """A random n-ary tree without punctuation (random labels, some unary chains)."""
    def build(lo: int, hi: int) -> nltk.Tree:
        if hi - lo == 1 and rng.random() < 0.6:
            return nltk.Tree("NN", [words[lo]])
        if hi - lo == 1:
            return nltk.Tree(rng.choice("NP VP ADVP PRT".split()), [nltk.Tree("NN", [words[lo]])])
        cuts = sorted(rng.sample(range(lo + 1, hi), rng.randint(1, min(2, hi - lo - 1))))
        bounds = [lo, *cuts, hi]
        node = nltk.Tree(rng.choice("S NP VP PP".split()), [build(a, b) for a, b in zip(bounds, bounds[1:])])
        return nltk.Tree("S", [node]) if rng.random() < 0.2 else node
    return nltk.Tree("TOP", [build(0, len(words))])


def test_bracket_f1_matches_supar_span_metric_without_punctuation():
    rng = random.Random(0)
    golds, preds = [], []
    for _ in range(50):
        words = [f"w{i}" for i in range(rng.randint(1, 8))]
        golds.append(random_tree(rng, words))
        preds.append(golds[-1] if rng.random() < 0.2 else random_tree(rng, words))
    ours = BracketF1()
    ours.update(preds, golds)
    theirs = SpanMetric()
    delete, equal = {"TOP"}, {"ADVP": "PRT"}
    theirs([SuparTree.factorize(t, delete, equal) for t in preds],
           [SuparTree.factorize(t, delete, equal) for t in golds])
    s = ours.compute()
    assert s["f1"] == pytest.approx(100 * theirs.lf)
    assert s["precision"] == pytest.approx(100 * theirs.lp)
    assert s["recall"] == pytest.approx(100 * theirs.lr)
    assert s["complete_match"] == pytest.approx(100 * theirs.lcm)
    assert 0 < s["f1"] < 100


# ---------------------------------------------------------------- decoding vs brute force


def bracketings(i: int, j: int) -> list[list[tuple[int, int]]]:
    """All full binary bracketings of fenceposts i..j (each with its 2(j-i)-1 spans)."""
    if j - i == 1:
        return [[(i, j)]]
    return [[(i, j), *left, *right] for k in range(i + 1, j)
            for left in bracketings(i, k) for right in bracketings(k, j)]


def tree_score(s: torch.Tensor, spans) -> float:
    return sum(float(s[i, j]) for i, j in spans)


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_cky_and_partition_match_brute_force(n):
    torch.manual_seed(n)
    s = torch.randn(2, 6, 6)  # padded: 6 fenceposts; the sentences have n and 4 words
    lens = torch.tensor([n, 4])
    crf = ConstituencyCRF(s, lens)
    for b, length in enumerate(lens.tolist()):
        trees = bracketings(0, length)
        scores = [tree_score(s[b].detach(), t) for t in trees]
        best = max(range(len(trees)), key=scores.__getitem__)
        assert sorted(map(tuple, crf.argmax[b])) == sorted(trees[best])
        log_z = math.log(sum(math.exp(x) for x in scores))
        assert float(crf.log_partition[b].detach()) == pytest.approx(log_z, abs=1e-4)


def spans_of(tree: nltk.Tree) -> list[tuple[int, int]]:
    return sorted((i, j) for i, j, _ in tree_to_chart(tree))


def test_decoder_decode_plain_and_mbr_match_brute_force():
    torch.manual_seed(0)
    decoder = CRFConstituencyDecoder(8, ["A", "B"], n_span_mlp=4, n_label_mlp=4, mlp_dropout=0.0)
    s_span, s_label = torch.randn(1, 5, 5) * 2, torch.randn(1, 5, 5, 2)
    mask = torch.ones(1, 4, dtype=torch.bool)
    trees = bracketings(0, 4)
    probs = torch.tensor([tree_score(s_span[0], t) for t in trees]).softmax(0)
    marginals = torch.zeros(5, 5)
    for p, t in zip(probs, trees):
        for i, j in t:
            marginals[i, j] += p
    for mbr, objective in ((False, s_span[0]), (True, marginals)):
        decoder.mbr = mbr
        with torch.no_grad():
            tree = decoder.decode((s_span, s_label), mask)[0]
        best = max(trees, key=lambda t: tree_score(objective, t))
        assert spans_of(tree) == sorted(best)
        # each span's label is the argmax of its label scores (plain labels: the chart survives debinarisation)
        labels = {(i, j): decoder.labels[int(s_label[0, i, j].argmax())] for i, j in best}
        assert tree_to_chart(tree) == sorted(((i, j, labels[i, j]) for i, j in best), key=lambda x: (x[0], -x[1]))


# ---------------------------------------------------------------- tree <-> chart round trip


def strip_pos(tree: nltk.Tree) -> nltk.Tree:
    tree = tree.copy(deep=True)
    for position in tree.treepositions("leaves"):
        tree[position[:-1]].set_label("_")
    return tree


def check_round_trip(tree: nltk.Tree) -> None:
    words = tree.leaves()
    chart = tree_to_chart(tree)
    assert len(chart) == 2 * len(words) - 1  # a full binary bracketing
    rebuilt = chart_to_tree(words, chart)
    assert rebuilt == strip_pos(tree)
    metric = BracketF1()
    metric.update([rebuilt], [tree])
    assert metric.compute()["complete_match"] == 100.0


def test_round_trip_on_demo_and_special_trees():
    for sentence in generate_demo(20, seed=0):
        check_round_trip(sentence.tree)
    for text in ["(TOP (NP (NN x)))", "(TOP (NN x))", "(TOP (NN x) (NN y) (. .))", "(TOP (S (S (VP (VB Go))) (. !)))",
                 "(TOP (FRAG (NP (NN a) (NN b) (NN c) (NN d)) (: -) (ADVP (RB now))))",
                 "(TOP (X (Y (Z (NN a) (NN b)))))"]:
        check_round_trip(T(text))


@pytest.mark.integration
def test_round_trip_on_ewt_dev(ewt):
    from mtl_heads.data.conll2012 import read_conll2012

    sentences = read_conll2012(ewt / "en_ewt.dev.gold_conll")
    for sentence in sentences:
        check_round_trip(sentence.tree)
    task = ConTask()
    task.fit_labels(sentences)
    assert "NP" in task.labels and any("::" in label for label in task.labels)


# ---------------------------------------------------------------- task, loss, bad input


def tiny_sentences() -> list[Sentence]:
    trees = ["(TOP (S (NP (PRP She)) (VP (VBZ runs)) (. .)))",
             "(TOP (S (NP (DT the) (NN dog)) (VP (VBD saw) (NP (PRP it)))))",
             "(TOP (NP (NN x)))"]
    return [Sentence(words=T(t).leaves(), pos=[p for _, p in T(t).pos()], tree=T(t), source=f"tiny:{k}")
            for k, t in enumerate(trees)]


def test_task_declaration():
    assert (ConTask.name, ConTask.needs, ConTask.main_metric) == ("con", ("tree",), "f1")


def test_task_targets_and_decoder_options():
    task = ConTask({"n_span_mlp": 6, "n_label_mlp": 5, "mlp_dropout": 0.0, "mbr": False})
    sentences = tiny_sentences()
    task.fit_labels(sentences)
    assert task.labels == ["NP", "NP|<>", "S", "S|<>", "VP", "VP|<>"]
    # left binarisation with X|<> nodes, as supar: the period is attached last
    assert tree_to_chart(sentences[0].tree) == [(0, 3, "S"), (0, 2, "S|<>"), (0, 1, "NP"), (1, 2, "VP"), (2, 3, "S|<>")]
    assert tree_to_chart(T("(TOP (S (VP (VB Go) (NP (PRP it)))))"))[0] == (0, 2, "S::VP")
    targets = task.targets(sentences, 5)
    assert targets["spans"].shape == targets["labels"].shape == (3, 6, 6)
    assert targets["spans"].sum(-1).sum(-1).tolist() == [5, 7, 1]
    assert targets["labels"][0, 0, 3] == task.labels.index("S")
    assert targets["labels"][2, 0, 1] == task.labels.index("NP")
    assert int(targets["labels"].ge(0).sum()) == 13
    decoder = task.build_decoder(8)
    assert decoder.span_mlp_l.n_out == 6 and decoder.label_mlp_l.n_out == 5 and decoder.mbr is False
    assert ConTask().build_decoder(8).span_mlp_l.n_out == 500 and ConTask().build_decoder(8).mbr is True
    unseen = ConTask()
    unseen.load_labels(["NP"])
    assert int(unseen.targets(sentences, 5)["labels"].ge(0).sum()) == 4  # unseen labels -> -100


def test_loss_equals_brute_force_nll_and_overfits():
    torch.manual_seed(0)
    task = ConTask({"n_span_mlp": 16, "n_label_mlp": 8, "mlp_dropout": 0.0})
    sentences = tiny_sentences()
    task.fit_labels(sentences)
    decoder = task.build_decoder(12)
    targets = task.targets(sentences, 4)
    mask = torch.tensor([[True] * 3 + [False], [True] * 4, [True] + [False] * 3])
    words = torch.randn(3, 4, 12)

    # brute force: -log p(gold bracketing) per word + mean label cross-entropy
    s_span, s_label = decoder(words, mask)
    nll = 0.0
    for b, n in enumerate(mask.sum(-1).tolist()):
        gold = [tuple(x) for x in targets["spans"][b].nonzero().tolist()]
        log_z = torch.logsumexp(torch.stack([sum(s_span[b, i, j] for i, j in t) for t in bracketings(0, n)]), 0)
        nll = nll + log_z - sum(s_span[b, i, j] for i, j in gold)
    spans = targets["spans"]
    ce = torch.nn.functional.cross_entropy(s_label[spans], targets["labels"][spans])
    expected = float((nll / 8 + ce).detach())
    assert float(decoder.loss((s_span, s_label), targets, mask).detach()) == pytest.approx(expected, rel=1e-4)

    losses = overfit(decoder, words, mask, targets, steps=30)
    assert losses[-1] < 0.2 * losses[0]
    decoder.eval()
    with torch.no_grad():
        preds = decoder.decode(decoder(words, mask), mask)
    metric = task.metric()
    metric.update(preds, [task.gold(s) for s in sentences])
    assert metric.compute()["f1"] == pytest.approx(100.0)


def test_padding_does_not_change_scores():
    """In float64: products of another shape may sum in another order, and MLPs then biaffines have no
    simple float32 bound."""
    torch.manual_seed(0)
    decoder = CRFConstituencyDecoder(6, ["A"], n_span_mlp=4, n_label_mlp=3, mlp_dropout=0.0).double()
    words = torch.randn(1, 3, 6).double()
    padded = torch.cat((words, torch.randn(1, 2, 6).double()), 1)
    s1, l1 = decoder(words, torch.ones(1, 3, dtype=torch.bool))
    s2, l2 = decoder(padded, torch.tensor([[True] * 3 + [False] * 2]))
    torch.testing.assert_close(s1, s2[:, :4, :4], rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(l1, l2[:, :4, :4], rtol=1e-10, atol=1e-10)


def test_leaves_that_differ_from_words_raise_with_source():
    bad = Sentence(words=["a", "b"], tree=T("(TOP (S (NN a) (NN c)))"), source="bad.conll:12")
    with pytest.raises(ValueError, match="bad.conll:12"):
        ConTask().targets([bad], 2)
    with pytest.raises(ValueError, match="bad.conll:12"):
        ConTask().gold(bad)
