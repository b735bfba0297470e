"""DEP task: supar conventions proven by brute force, loss, metric, targets and bad input."""
import itertools

import pytest
import torch
from supar.utils.metric import AttachmentMetric

from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from tasks.dep import AttachmentScore, BiaffineParser, DepTask, Parse, is_punct

from helpers import overfit



def is_tree(heads):
    """Brute-force check: one root child, every word reaches 0."""
    if sum(h == 0 for h in heads) != 1:
        return False
    for w in range(1, len(heads) + 1):
        seen = set()
        while w != 0:
            if w in seen:
                return False
            seen.add(w)
            w = heads[w - 1]
    return True


def is_projective(heads):
    arcs = [(min(h, d), max(h, d)) for d, h in enumerate(heads, 1)]
    return not any(a < c < b < e for a, b in arcs for c, e in arcs)


def all_trees(n, projective):
    for heads in itertools.product(range(n + 1), repeat=n):
        if any(h == d for d, h in enumerate(heads, 1)):
            continue
        if is_tree(heads) and (not projective or is_projective(heads)):
            yield list(heads)


def tree_score(s_arc, heads):
    return sum(s_arc[d, h].item() for d, h in enumerate(heads, 1))


def make_parser(decode="mst", labels=("a", "b", "c")):
    return BiaffineParser(8, list(labels), n_arc_mlp=6, n_rel_mlp=4, mlp_dropout=0.0, decode=decode)


@pytest.mark.parametrize("decode", ["mst", "eisner"])
def test_decode_matches_brute_force(decode):
    torch.manual_seed(0)
    parser = make_parser(decode)
    lengths = [3, 4, 2]
    seq = 1 + max(lengths)
    mask = torch.tensor([[True] * (1 + n) + [False] * (seq - 1 - n) for n in lengths])
    for trial in range(6):
        s_arc = torch.randn(len(lengths), seq, seq) * 3
        s_arc = s_arc.masked_fill(~mask.unsqueeze(1), -1e32)
        s_rel = torch.randn(len(lengths), seq, seq, 3)
        with torch.no_grad():
            preds = parser.decode((s_arc, s_rel), mask)
        for b, n in enumerate(lengths):
            best = max(all_trees(n, decode == "eisner"), key=lambda h: tree_score(s_arc[b], h))
            assert preds[b].heads == best, (trial, b)
            expected_rels = [parser.labels[s_rel[b, d, h].argmax().item()] for d, h in enumerate(best, 1)]
            assert preds[b].rels == expected_rels


def test_eisner_and_mst_differ_only_by_projectivity():
    # a score matrix whose best tree is non-projective: arcs 1<-3 and 2<-4 cross
    s = torch.full((1, 5, 5), -10.0)
    s[0, 3, 0] = 5  # word 3 is the root child
    s[0, 1, 3] = 5
    s[0, 4, 1] = 5
    s[0, 2, 4] = 5
    assert not is_projective([3, 4, 0, 1])
    mask = torch.ones(1, 5, dtype=torch.bool)
    s_rel = torch.zeros(1, 5, 5, 3)
    with torch.no_grad():
        assert make_parser("mst").decode((s, s_rel), mask)[0].heads == [3, 4, 0, 1]
        proj = make_parser("eisner").decode((s, s_rel), mask)[0].heads
    assert is_projective(proj) and is_tree(proj)


def test_loss_equals_hand_computation_and_decreases():
    torch.manual_seed(1)
    parser = make_parser()
    words = torch.randn(2, 4, 8)
    mask = torch.tensor([[True, True, True, True], [True, True, True, False]])
    heads = torch.tensor([[2, 0, 2], [0, 1, -100]])
    rels = torch.tensor([[0, 1, -100], [2, 0, -100]])
    # make scores non-trivial (Biaffine starts at zero)
    for p in parser.parameters():
        torch.nn.init.normal_(p, std=0.5)
    parser.eval()
    s_arc, s_rel = parser(words, mask)
    loss = parser.loss((s_arc, s_rel), (heads, rels), mask)
    arc_terms, rel_terms = [], []
    for b in range(2):
        for d in range(1, int(mask[b].sum())):
            h = heads[b, d - 1].item()
            cands = [j for j in range(4) if mask[b, j]]
            arc_terms.append(-torch.log_softmax(s_arc[b, d, cands], 0)[cands.index(h)])
            if rels[b, d - 1] >= 0:
                rel_terms.append(-torch.log_softmax(s_rel[b, d, h], 0)[rels[b, d - 1]])
    expected = torch.stack(arc_terms).mean() + torch.stack(rel_terms).mean()
    assert torch.allclose(loss, expected, atol=1e-5)

    parser.train()
    losses = overfit(parser, words, mask, (heads, rels), steps=30)
    assert losses[-1] < 0.5 * losses[0]


def test_metric_against_supar_and_by_hand():
    metric = AttachmentScore()
    gold = Parse([2, 0, 2, 2], ["nsubj", "root", "dobj", "punct"], [False, False, False, True])
    pred = Parse([2, 0, 1, 3], ["nsubj", "root", "iobj", "punct"])
    metric.update([pred], [gold])
    # non-punct words 1..3: heads right for 1, 2 (3 wrong); labels right for 1, 2
    assert metric.compute() == {"uas": pytest.approx(200 / 3), "las": pytest.approx(200 / 3), "words": 3.0}

    torch.manual_seed(2)
    ours, theirs = AttachmentScore(), AttachmentMetric()
    for _ in range(5):
        b, n = 3, 6
        ph, gh = torch.randint(0, 3, (b, n)), torch.randint(0, 3, (b, n))
        pr, gr = torch.randint(0, 2, (b, n)), torch.randint(0, 2, (b, n))
        lens = torch.randint(1, n + 1, (b,))
        punct = torch.rand(b, n) < 0.2
        mask = (torch.arange(n) < lens[:, None]) & ~punct
        theirs(ph, pr, gh, gr, mask)
        name = lambda r: ["x", "y"][r]  # noqa: E731
        preds = [Parse(ph[i, :lens[i]].tolist(), [name(r) for r in pr[i, :lens[i]].tolist()]) for i in range(b)]
        golds = [Parse(gh[i, :lens[i]].tolist(), [name(r) for r in gr[i, :lens[i]].tolist()],
                       punct[i, :lens[i]].tolist()) for i in range(b)]
        ours.update(preds, golds)
    scores = ours.compute()
    assert scores["uas"] == pytest.approx(100 * theirs.uas)
    assert scores["las"] == pytest.approx(100 * theirs.las)


def test_metric_rejects_length_mismatch():
    with pytest.raises(ValueError, match="2 heads"):
        AttachmentScore().update([Parse([0, 1], ["root", "x"])], [Parse([0], ["root"], [False])])


def test_punctuation_rule():
    assert is_punct(",", ",") and is_punct("-", "HYPH") and is_punct("(", "-LRB-")
    assert not is_punct("$", "$") and not is_punct("#", "#") and not is_punct("!", "UH")
    assert is_punct("...", None) and is_punct("«", None) and not is_punct("a.", None) and not is_punct("$", None)


def sentences():
    return [
        Sentence(words=["I", "saw", "it", "."], pos=["PRP", "VBD", "PRP", "."], heads=[2, 0, 2, 2],
                 rels=["nsubj", "root", "dobj", "punct"], source="a.conllu:1"),
        Sentence(words=["Go", "!"], heads=[0, 1], rels=["root", "weird"], source="a.conllu:7"),
    ]


def test_task_targets_gold_and_decoder():
    task = DepTask({"n_arc_mlp": 6, "n_rel_mlp": 4, "decode": "eisner"})
    train = sentences()[:1]
    task.fit_labels(train)
    assert task.labels == ["dobj", "nsubj", "punct", "root"]
    heads, rels = task.targets(sentences(), 4)
    assert heads.tolist() == [[2, 0, 2, 2], [0, 1, -100, -100]]
    assert rels.tolist() == [[1, 3, 0, 2], [3, -100, -100, -100]]  # unseen "weird" -> -100
    assert task.gold(sentences()[0]).punct == [False, False, False, True]
    assert task.gold(sentences()[1]).punct == [False, True]  # no POS: Unicode punctuation
    decoder = task.build_decoder(8)
    assert decoder.with_root and decoder.algorithm == "eisner"
    assert decoder.arc_mlp_d.linear.out_features == 6 and decoder.rel_attn.n_out == 4
    mask = torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    scores = decoder(torch.randn(2, 5, 8), mask)
    assert scores[0].shape == (2, 5, 5) and scores[1].shape == (2, 5, 5, 4)
    loss = decoder.loss(scores, (heads, rels), mask)
    assert torch.isfinite(loss)
    with torch.no_grad():
        preds = decoder.decode(scores, mask)
    assert [len(p.heads) for p in preds] == [4, 2] and all(is_tree(p.heads) for p in preds)


def test_bad_input():
    task = DepTask()
    task.fit_labels(sentences())
    cyclic = Sentence(words=["a", "b", "c"], heads=[2, 1, 0], rels=["x", "y", "z"], source="bad.conllu:3")
    with pytest.raises(DataError, match=r"^bad.conllu:3: .*cycle"):
        task.targets([cyclic], 3)
    two_roots = Sentence(words=["a", "b"], heads=[0, 0], rels=["x", "y"], source="bad.conllu:9")
    with pytest.raises(DataError, match=r"^bad.conllu:9: 2 roots"):
        task.targets([two_roots], 2)
    out_of_range = Sentence(words=["a"], heads=[3], rels=["x"], source="bad.conllu:12")
    with pytest.raises(DataError, match=r"^bad.conllu:12: .*0..1"):
        task.targets([out_of_range], 1)
    short = Sentence(words=["a", "b"], heads=[0], rels=["x"], source="bad.conllu:20")
    with pytest.raises(DataError, match=r"^bad.conllu:20: 1 heads"):
        task.targets([short], 2)
    with pytest.raises(ValueError, match="unknown decode"):
        BiaffineParser(8, ["x"], decode="cky")
    with pytest.raises(ValueError, match="empty relation vocabulary"):
        DepTask().build_decoder(8)


@pytest.mark.integration
def test_ewt_dev_decodes_trees(ewt):
    path = ewt / "en_ewt.dev.conllu"
    if not path.exists():
        pytest.skip(f"{path} not found")
    from mtl_heads.data.conllu import read_conllu
    data = read_conllu(path)[:64]
    task = DepTask({"n_arc_mlp": 8, "n_rel_mlp": 4})
    task.fit_labels(data)
    golds = [task.gold(s) for s in data]
    n = max(len(s.words) for s in data)
    heads, rels = task.targets(data, n)
    decoder = task.build_decoder(8)
    mask = torch.cat((torch.ones(len(data), 1, dtype=torch.bool), heads.ne(-100)), 1)
    with torch.no_grad():
        preds = decoder.decode(decoder(torch.randn(len(data), n + 1, 8), mask), mask)
    assert all(is_tree(p.heads) and len(p.heads) == len(g.heads) for p, g in zip(preds, golds))
    metric = AttachmentScore()
    metric.update(golds, golds)
    assert metric.compute()["las"] == 100.0
