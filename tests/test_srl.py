"""SRL task: metric (strict and srl-eval.pl's convention) against hand counts and supar's
SpanMetric, greedy decoding against brute force and plain loops (all spans, and the pruned
candidates), loss against hand-written NLLs, overfitting, targets, annotate + CoNLL-2012 round trip,
bad input."""
import copy
import itertools
import math
from pathlib import Path

import pytest
import torch
from supar.utils.metric import SpanMetric

from mtl_heads.config import ConfigError
from mtl_heads.data.conll2012 import read_conll2012, write_conll2012
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from tasks.srl import (SpanSrlDecoder, SrlF1, SrlTask, conll05_arguments, conll05_counts, greedy_arguments,
                       parse_span_ratio)

from helpers import overfit

LABELS = ["ARG0", "ARG1", "ARGM-TMP", "C-ARG1", "R-ARG0"]


def flat(frames):
    return [(p, s, e, r) for p, args in frames for s, e, r in args]


# ---------------------------------------------------------------- metric


def test_metric_hand_computed():
    gold = [[(1, [(0, 1, "ARG0"), (2, 4, "ARG1")]), (5, [(3, 5, "ARG0"), (6, 7, "R-ARG1")])],
            [(2, [(0, 1, "ARG1"), (3, 4, "C-ARG1")])]]
    pred = [[(1, [(0, 1, "ARG0"), (2, 5, "ARG1")]),   # 1 right, 1 wrong right boundary
             (3, [(4, 5, "ARG1")])],                  # spurious predicate; predicate 5 missed (2 FN)
            [(2, [(0, 1, "ARG1"), (3, 4, "ARG1")])]]  # ARG1 is not C-ARG1: 1 FP + 1 FN
    m = SrlF1()
    m.update(pred, gold)
    s = m.compute()
    # correct 2, predicted 5, gold 6
    assert s["precision"] == pytest.approx(40.0)
    assert s["recall"] == pytest.approx(100 * 2 / 6)
    assert s["f1"] == pytest.approx(100 * 2 * 2 / 11)
    # predicates: predicted {1, 3} + {2}, gold {1, 5} + {2}: 2 of 3 each way
    assert s["pred_precision"] == s["pred_recall"] == s["pred_f1"] == pytest.approx(200 / 3)

    ref = SpanMetric()([flat(p) for p in pred], [flat(g) for g in gold])
    assert s["f1"] == pytest.approx(100 * ref.lf)
    assert s["precision"] == pytest.approx(100 * ref.lp) and s["recall"] == pytest.approx(100 * ref.lr)
    # srl-eval.pl: predicate 1: 1 correct, (2, 5) excess, (2, 4) missed; predicate 5 missed: 2 missed;
    # spurious predicate 3 skipped; sentence 2: gold ARG1 is one argument (0, 1) + (3, 4), the two
    # predicted ARG1 pieces are two arguments with other extents: 2 excess, 1 missed
    # -> correct 1, excess 3, missed 4
    assert s["conll05_precision"] == pytest.approx(25.0)
    assert s["conll05_recall"] == pytest.approx(20.0)
    assert s["conll05_f1"] == pytest.approx(2 * 25 * 20 / 45)


def conll05(pred, gold):
    m = SrlF1()
    m.update([pred], [gold])
    s = m.compute()
    return s["conll05_precision"], s["conll05_recall"], s["conll05_f1"]


def strict(pred, gold):
    m = SrlF1()
    m.update([pred], [gold])
    s = m.compute()
    return s["precision"], s["recall"], s["f1"]


def test_conll05_discontinuous_argument_is_one_argument():
    gold = [(4, [(0, 1, "ARG1"), (2, 3, "ARG0"), (5, 7, "C-ARG1")])]        # ARG1 = [0, 1) + [5, 7)
    assert conll05_arguments(gold[0][1]) == [("ARG1", ((0, 1), (5, 7))), ("ARG0", ((2, 3),))]
    assert conll05(gold, gold) == (100.0, 100.0, 100.0)
    # one piece wrong: the whole argument is wrong (1 excess + 1 missed); strict: 1 of 2 pieces right
    wrong_piece = [(4, [(0, 1, "ARG1"), (2, 3, "ARG0"), (5, 8, "C-ARG1")])]
    assert conll05(wrong_piece, gold) == (50.0, 50.0, 50.0)
    assert strict(wrong_piece, gold) == pytest.approx((200 / 3, 200 / 3, 200 / 3))
    # only the head piece: other extent, so excess + missed; strict: 2 of 2 predicted right, 2 of 3 found
    head_only = [(4, [(0, 1, "ARG1"), (2, 3, "ARG0")])]
    assert conll05(head_only, gold) == (50.0, 50.0, 50.0)
    assert strict(head_only, gold) == pytest.approx((100.0, 200 / 3, 80.0))
    # same extent, but one continuous span against two pieces (either way round): no match
    assert conll05([(4, [(0, 7, "ARG1")])], [(4, [(0, 1, "ARG1"), (5, 7, "C-ARG1")])]) == (0.0, 0.0, 0.0)
    assert conll05([(4, [(0, 1, "ARG1"), (5, 7, "C-ARG1")])], [(4, [(0, 7, "ARG1")])]) == (0.0, 0.0, 0.0)
    # same extent and role, a different set of pieces: no match
    three = [(0, [(1, 2, "ARG1"), (3, 4, "C-ARG1"), (5, 6, "C-ARG1")])]
    assert conll05([(0, [(1, 2, "ARG1"), (5, 6, "C-ARG1")])], three) == (0.0, 0.0, 0.0)
    assert conll05(three, three) == (100.0, 100.0, 100.0)
    # pieces of the right extents with the wrong role
    assert conll05([(4, [(0, 1, "ARG2"), (5, 7, "C-ARG2")])], [(4, [(0, 1, "ARG1"), (5, 7, "C-ARG1")])]) \
        == (0.0, 0.0, 0.0)


def test_conll05_continuation_rules():
    # C-X continues the latest X before it; a C-X with no X before it is an X of its own
    args = [(0, 1, "ARG1"), (2, 3, "ARG1"), (4, 5, "C-ARG1"), (6, 7, "C-ARGM-TMP")]
    assert conll05_arguments(args) == [("ARG1", ((0, 1),)), ("ARG1", ((2, 3), (4, 5))), ("ARGM-TMP", ((6, 7),))]
    assert conll05([(9, [(6, 7, "ARGM-TMP")])], [(9, [(6, 7, "C-ARGM-TMP")])]) == (100.0, 100.0, 100.0)
    assert strict([(9, [(6, 7, "ARGM-TMP")])], [(9, [(6, 7, "C-ARGM-TMP")])]) == (0.0, 0.0, 0.0)
    # pieces are read in order of start whatever order they come in
    assert conll05_arguments(list(reversed(args))) == conll05_arguments(args)
    # V with its C-V is one excluded argument: it counts nowhere, even when it differs
    assert conll05_counts([(2, 3, "V"), (0, 1, "ARG0")], [(2, 3, "V"), (4, 5, "C-V"), (0, 1, "ARG0")]) == (1, 0, 0)


def test_conll05_reference_roles():
    # R-X is an argument of its own role: right only as R-X, and never merged with X
    gold = [(3, [(0, 1, "ARG0"), (1, 2, "R-ARG0"), (4, 6, "ARG1")])]
    assert conll05_arguments(gold[0][1]) == [("ARG0", ((0, 1),)), ("R-ARG0", ((1, 2),)), ("ARG1", ((4, 6),))]
    assert conll05(gold, gold) == (100.0, 100.0, 100.0)
    as_arg0 = [(3, [(0, 1, "ARG0"), (1, 2, "ARG0"), (4, 6, "ARG1")])]   # 2 right, 1 excess, 1 missed
    assert conll05(as_arg0, gold) == pytest.approx((200 / 3, 200 / 3, 200 / 3))
    assert strict(as_arg0, gold) == pytest.approx((200 / 3, 200 / 3, 200 / 3))
    missing_r = [(3, [(0, 1, "ARG0"), (4, 6, "ARG1")])]
    assert conll05(missing_r, gold) == pytest.approx((100.0, 200 / 3, 80.0))


def test_conll05_spurious_and_missed_predicates():
    gold = [(1, [(0, 1, "ARG0"), (2, 4, "ARG1")]), (6, [(5, 6, "ARG0"), (7, 8, "ARG1"), (8, 9, "ARGM-TMP")])]
    # a spurious predicate: srl-eval.pl skips its arguments; strict counts them as excess
    spurious = gold + [(4, [(5, 6, "ARG0"), (3, 4, "ARG1")])]
    assert conll05(spurious, gold) == (100.0, 100.0, 100.0)
    assert strict(spurious, gold) == pytest.approx((500 / 7, 100.0, 2 * 500 / 7 * 100 / (500 / 7 + 100)))
    # a missed predicate: all its arguments are missed, both ways
    missed = gold[:1]
    assert conll05(missed, gold) == strict(missed, gold) == pytest.approx((100.0, 40.0, 400 / 7))
    # both at once, and a predicate found with none of its arguments
    both = [(1, []), (4, [(5, 6, "ARG0")])]
    assert conll05(both, gold) == (0.0, 0.0, 0.0)
    m = SrlF1()
    m.update([both], [gold])
    s = m.compute()
    assert (s["pred_precision"], s["pred_recall"]) == (50.0, 50.0)
    # predicates are aligned by position: the frame order does not matter
    assert conll05(list(reversed(gold)), gold) == (100.0, 100.0, 100.0)


def test_metric_keys():
    m = SrlF1()
    m.update([[]], [[]])
    assert set(m.compute()) == {"f1", "precision", "recall", "conll05_f1", "conll05_precision", "conll05_recall",
                                "pred_f1", "pred_precision", "pred_recall"}
    assert SrlTask.main_metric == "f1"


def test_metric_perfect_empty_and_bad_input():
    m = SrlF1()
    assert m.compute()["f1"] == 0.0
    frames = [[(0, [(1, 3, "ARG1")])], []]
    m.update(frames, frames)
    assert m.compute()["f1"] == m.compute()["pred_f1"] == 100.0
    with pytest.raises(ValueError, match="predictions for"):
        m.update([[]], [[], []])


# ---------------------------------------------------------------- task: gold and targets


def sentence():
    # "Yesterday John picked the ball up , which he threw"
    words = "Yesterday John picked the ball up , which he threw".split()
    return Sentence(words=words, predicates=[2, 9], arguments=[
        [(0, 1, "ARGM-TMP"), (1, 2, "ARG0"), (2, 3, "V"), (3, 5, "ARG1"), (5, 6, "C-V")],
        [(3, 5, "ARG1"), (7, 8, "R-ARG1"), (8, 9, "ARG0"), (9, 10, "V")],
    ])


def test_gold_excludes_verb_keeps_c_and_r_roles():
    task = SrlTask()
    assert task.gold(sentence()) == [(2, [(0, 1, "ARGM-TMP"), (1, 2, "ARG0"), (3, 5, "ARG1")]),
                                     (9, [(3, 5, "ARG1"), (7, 8, "R-ARG1"), (8, 9, "ARG0")])]
    task.fit_labels([sentence()])
    assert task.labels == ["ARG0", "ARG1", "ARGM-TMP", "R-ARG1"]


def test_targets_and_too_wide_spans_counted():
    task = SrlTask({"max_width": 2})
    task.load_labels(["ARG0", "ARG1", "ARGM-TMP"])          # R-ARG1 unseen -> ignored (-100)
    s = sentence()
    s.arguments[0].append((6, 10, "ARGM-ADV"))              # width 4 > 2: cannot be predicted
    wide = Sentence(words=["a", "b", "c"], predicates=[0], arguments=[[(0, 1, "V"), (1, 3, "ARG1")]])
    t = task.targets([s, wide], 10)
    assert t["roles"].shape == (2, 2, 10, 2)
    assert t["predicates"][0].nonzero().flatten().tolist() == [2, 9]
    assert t["predicate_index"].tolist() == [[2, 9], [0, 0]]
    assert t["predicate_mask"].tolist() == [[True, True], [True, False]]
    roles = t["roles"]
    assert roles[0, 0, 0, 0] == 3 and roles[0, 0, 1, 0] == 1 and roles[0, 0, 3, 1] == 2
    assert roles[0, 1, 7, 0] == -100                       # unseen role
    assert roles[1, 0, 1, 1] == 2
    assert (roles > 0).sum() == 6                           # nothing else, no V, no wide span
    counted = SrlTask({"max_width": 2})
    counted.fit_labels([s, wide])
    assert counted.too_wide == 1 and counted.n_arguments == 8
    # the metric still counts the wide span as gold: a perfect decoder gets recall 7/8
    m = SrlF1()
    golds = [task.gold(s), task.gold(wide)]
    reachable = [[(p, [a for a in args if a[1] - a[0] <= 2]) for p, args in g] for g in golds]
    m.update(reachable, golds)
    assert m.compute()["recall"] == pytest.approx(100 * 7 / 8)


def test_task_bad_input():
    task = SrlTask()
    with pytest.raises(DataError, match="^<sentence>: sentence has no SRL layer"):
        task.gold(Sentence(words=["a"]))
    with pytest.raises(DataError, match="^f.conll:7: SRL frame of predicate 0 lies outside"):
        task.gold(Sentence(words=["a", "b"], predicates=[0], arguments=[[(0, 1, "V"), (1, 3, "ARG1")]],
                           source="f.conll:7"))
    task.load_labels(["ARG1"])
    with pytest.raises(ValueError, match="longer"):
        task.targets([sentence()], 5)
    with pytest.raises(ValueError, match="role label"):
        SrlTask().build_decoder(8)


# ---------------------------------------------------------------- decoding


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]


def plain_greedy(margin, role, labels):
    """Repeatedly take the best positive span that overlaps nothing taken (margin [n, w])."""
    n, w = margin.shape
    chosen = []
    while True:
        best = None
        for i in range(n):
            for k in range(w):
                span = (i, i + k + 1)
                if margin[i, k] > 0 and not any(overlaps(span, c) for c in chosen):
                    if best is None or margin[i, k] > margin[best[0], best[1] - best[0] - 1]:
                        best = span
        if best is None:
            return sorted((s, e, labels[role[s, e - s - 1]]) for s, e in chosen)
        chosen.append(best)


def test_greedy_against_brute_force_properties():
    torch.manual_seed(0)
    for _ in range(20):
        n = 5
        candidates = [(float(torch.randn(())), i, j, "ARG1") for i in range(n) for j in range(i + 1, n + 1)]
        positive = [c for c in candidates if c[0] > 0]
        chosen = greedy_arguments(positive)
        score = {(s, e): v for v, s, e, _ in positive}
        feasible = []
        for r in range(len(positive) + 1):
            for subset in itertools.combinations([(s, e) for _, s, e, _ in positive], r):
                if all(not overlaps(a, b) for a, b in itertools.combinations(subset, 2)):
                    feasible.append(set(subset))
        spans = {(s, e) for s, e, _ in chosen}
        assert spans in feasible                                        # non-overlapping
        assert all(score[sp] > 0 for sp in spans)                       # beats null
        assert not any(all(not overlaps(c, sp) for sp in spans) for c in score if c not in spans)  # maximal
        assert sum(score[sp] for sp in spans) <= max(sum(score[sp] for sp in f) for f in feasible) + 1e-6


def test_greedy_is_not_globally_optimal_and_unique_core():
    # the wide span wins greedily (3) although its two halves sum to 4
    assert greedy_arguments([(3.0, 0, 3, "ARG1"), (2.0, 0, 1, "ARG0"), (2.0, 1, 3, "ARG1")]) == [(0, 3, "ARG1")]
    two = [(3.0, 0, 1, "ARG0"), (2.0, 2, 3, "ARG0"), (1.0, 4, 5, "ARGM-TMP"), (1.5, 5, 6, "ARGM-TMP")]
    assert greedy_arguments(two) == [(0, 1, "ARG0"), (2, 3, "ARG0"), (4, 5, "ARGM-TMP"), (5, 6, "ARGM-TMP")]
    assert greedy_arguments(two, unique_core=True) == [(0, 1, "ARG0"), (4, 5, "ARGM-TMP"), (5, 6, "ARGM-TMP")]


def random_decoder(hidden=8, max_width=3, seed=0, span_ratio=None):
    """A small decoder in eval mode with random (supar zero-initialises them) biaffine weights."""
    torch.manual_seed(seed)
    decoder = SpanSrlDecoder(hidden, LABELS, max_width=max_width, n_mlp=6, mlp_dropout=0.0, span_ratio=span_ratio,
                             n_unary=5)
    with torch.no_grad():
        decoder.role.weight.normal_()
        if span_ratio is not None:
            decoder.unary.weight.normal_()
            decoder.unary_width.normal_()
    return decoder.eval()


def by_hand(decoder, words):
    """Every span's representation ``[n, w, d]`` and unary score ``[n, w]`` (or None) of sentence
    ``words`` ``[n, hidden]``, computed from the weights with plain loops (eval mode: no dropout)."""
    n = words.shape[0]
    width = min(decoder.max_width, n)
    act = torch.nn.functional.leaky_relu
    reprs = torch.zeros(n, width, decoder.width_embed.weight.shape[1])
    unary = torch.full((n, width), float("nan")) if decoder.span_ratio is not None else None
    for i in range(n):
        for w in range(width):
            j = min(i + w, n - 1)
            reprs[i, w] = act(decoder.span_start(words[i]) + decoder.span_end(words[j]) + decoder.width_embed.weight[w],
                              0.1)
            if unary is not None:
                first = act(decoder.unary_start.linear(words[i]), 0.1)
                last = act(decoder.unary_end.linear(words[j]), 0.1)
                x, y = torch.cat((first, torch.ones(1))), torch.cat((last, torch.ones(1)))
                unary[i, w] = x @ decoder.unary.weight[0] @ y + decoder.unary_width[w]
    return reprs, unary


def roles_by_hand(decoder, words, p, span):
    """``[R]`` role scores (without null) of predicate word ``p`` and span representation ``span``."""
    pred = torch.nn.functional.leaky_relu(decoder.pred_repr.linear(words[p]), 0.1)
    x, y = torch.cat((pred, torch.ones(1))), torch.cat((span, torch.ones(1)))
    return torch.einsum("i,rij,j->r", x, decoder.role.weight, y)


def kept_by_hand(decoder, unary, n):
    """The ``ceil(span_ratio * n)`` spans ``(i, w)`` inside an ``n``-word sentence with the best
    unary scores."""
    spans = [(i, w) for i in range(unary.shape[0]) for w in range(unary.shape[1]) if i + w < n]
    ranked = sorted(spans, key=lambda s: -unary[s].item())
    return ranked[:math.ceil(decoder.span_ratio * n)]


def plain_decode(decoder, words, p, n, candidates):
    """Greedy decoding of predicate ``p`` over the spans ``(i, w)`` of ``candidates``, by hand:
    spans containing the predicate left out."""
    reprs, unary = by_hand(decoder, words)
    margin = torch.full(reprs.shape[:2], -1.0)
    role = torch.zeros(reprs.shape[:2], dtype=torch.long)
    for i, w in candidates:
        if i <= p <= i + w:
            continue
        s = roles_by_hand(decoder, words, p, reprs[i, w]) + (unary[i, w] if unary is not None else 0)
        margin[i, w], role[i, w] = s.max(-1)
    return plain_greedy(margin, role, LABELS)


@pytest.mark.parametrize("span_ratio", [None, 0.7, 100.0])
def test_decode_equals_plain_loop(span_ratio):
    decoder = random_decoder(span_ratio=span_ratio)
    words = torch.randn(2, 6, 8)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    scores = decoder(words, mask)
    scores["predicates"] = torch.tensor([[1.0, -1, 2, -1, -1, 0.5], [-1, 1, -1, -1, 3, 3]])  # padded ones ignored
    out = decoder.decode(scores, mask)
    assert [[p for p, _ in frames] for frames in out] == [[0, 2, 5], [1]]
    n_args = 0
    for b, frames in enumerate(out):
        n = int(mask[b].sum())
        reprs, unary = by_hand(decoder, words[b, :n])
        every = [(i, w) for i in range(n) for w in range(min(3, n)) if i + w < n]
        candidates = every if span_ratio is None else kept_by_hand(decoder, unary, n)
        if span_ratio == 100.0:
            assert sorted(candidates) == every                     # more than there are: every span
        elif span_ratio is not None:
            assert len(candidates) == math.ceil(0.7 * n) < len(every)
            kept = scores["span_index"][b][scores["span_keep"][b]].tolist()
            assert sorted(kept) == sorted(i * 3 + w for i, w in candidates)
        for p, args in frames:
            assert args == plain_decode(decoder, words[b, :n], p, n, candidates)
            assert not any(s <= p < e for s, e, _ in args)          # never over the predicate word
            n_args += len(args)
    assert n_args > 0


def test_prune_spans_counts_and_padding():
    decoder = random_decoder(span_ratio=0.5, max_width=2)
    mask = torch.tensor([[True] * 4, [True] * 1 + [False] * 3])
    valid = decoder.span_mask(mask, 2)                                  # [2, 4, 2]
    assert valid.flatten(1).sum(-1).tolist() == [7, 1]
    scores = torch.arange(8.0).reshape(1, 4, 2).repeat(2, 1, 1)         # grid index i * 2 + w as score
    scores[1, 0, 0] = -5.0
    index, keep = decoder.prune_spans(scores, valid, mask)
    assert index.shape == keep.shape == (2, 2)                          # ceil(0.5 * 4) = 2, ceil(0.5 * 1) = 1
    assert index[0].tolist() == [6, 5] and keep[0].tolist() == [True, True]  # (3, 0) and (2, 1); (3, 1) is outside
    assert index[1, 0].item() == 0 and keep[1].tolist() == [True, False]
    decoder.span_ratio = 3.0                                            # capped at the spans there are
    index, keep = decoder.prune_spans(scores, valid, mask)
    assert keep.sum(-1).tolist() == [7, 1] and sorted(index[0].tolist()) == [0, 1, 2, 3, 4, 5, 6]


# ---------------------------------------------------------------- loss


def test_loss_equals_hand_written_nll():
    decoder = random_decoder(max_width=2, seed=1)
    words = torch.randn(1, 3, 8)
    mask = torch.tensor([[True, True, False]])
    scores = decoder(words, mask)
    targets = {"predicates": torch.tensor([[0, 1, 0]]), "predicate_index": torch.tensor([[1]]),
               "predicate_mask": torch.tensor([[True]]),
               "roles": torch.tensor([[[[2, 0], [-100, 0], [0, 0]]]])}  # ARG0 on [0, 1); [1, 2) ignored
    loss = decoder.loss(scores, targets, mask)
    logits = scores["predicates"][0]
    bce = -(torch.log(1 - torch.sigmoid(logits[0])) + torch.log(torch.sigmoid(logits[1]))) / 2
    roles = decoder.role_scores(scores, torch.tensor([[1]]))[0, 0].detach().reshape(3, 2, -1)  # [n, w, 1+R]
    cells = [((0, 0), 2), ((0, 1), 0)]                     # [0, 1), [0, 2); [1, 3) is past the end
    nll = -sum(torch.log_softmax(roles[i, k], -1)[y] for (i, k), y in cells) / 1  # summed, 1 predicate
    assert loss.item() == pytest.approx((bce + nll).item(), rel=1e-5)
    assert roles[0, 0, 0].item() == 0.0                    # null fixed at 0


def test_pruned_loss_equals_hand_written_nll():
    decoder = random_decoder(max_width=2, seed=2, span_ratio=1.0)
    words = torch.randn(2, 4, 8)
    mask = torch.tensor([[True, True, True, False], [True] * 4])
    task = SrlTask({"max_width": 2})
    task.load_labels(LABELS)
    sentences = [Sentence(words=list("abc"), predicates=[1], arguments=[[(0, 1, "ARG0"), (1, 2, "V"), (2, 3, "ARG1")]]),
                 Sentence(words=list("abcd"), predicates=[0, 3], arguments=[
                     [(0, 1, "V"), (1, 3, "ARG1")], [(0, 1, "ARG0"), (1, 3, "ARG1"), (3, 4, "V")]])]
    targets = task.targets(sentences, 4)
    scores = decoder(words, mask)
    loss = decoder.loss(scores, targets, mask)

    role_nll = span_bce = 0.0
    for b, s in enumerate(sentences):
        n = len(s.words)
        reprs, unary = by_hand(decoder, words[b, :n])
        kept = kept_by_hand(decoder, unary, n)
        assert len(kept) == n                                   # ceil(1.0 * n)
        gold_spans = {(a, e - a - 1): r for _, args in task.gold(s) for a, e, r in args}
        for p, args in task.gold(s):
            gold = {(a, e - a - 1): LABELS.index(r) + 1 for a, e, r in args}
            for i, w in kept:                                   # role cross-entropy over the kept spans only
                logits = torch.cat((torch.zeros(1), roles_by_hand(decoder, words[b, :n], p, reprs[i, w]) + unary[i, w]))
                role_nll -= torch.log_softmax(logits, -1)[gold.get((i, w), 0)]
        for i in range(n):                                      # unary BCE over every span
            for w in range(2):
                if i + w < n:
                    y = float((i, w) in gold_spans)
                    span_bce -= y * torch.nn.functional.logsigmoid(unary[i, w]) \
                        + (1 - y) * torch.nn.functional.logsigmoid(-unary[i, w])
    logits = scores["predicates"][mask]
    pred_bce = torch.nn.functional.binary_cross_entropy_with_logits(logits, targets["predicates"][mask].float())
    expected = pred_bce + role_nll / 3 + span_bce / 2           # 3 gold predicates, 2 sentences
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


def test_pruned_away_gold_span_is_a_miss():
    """A gold argument outside the candidates is left out of the loss (its role does not change
    the loss, except through the unary BCE, which only asks whether it is an argument) and cannot
    be predicted (He et al. 2018)."""
    decoder = random_decoder(max_width=3, seed=3, span_ratio=0.5)
    with torch.no_grad():
        decoder.unary_width.copy_(torch.tensor([0.0, 0.0, -100.0]))   # spans of 3 words: never kept
    words, mask = torch.randn(1, 6, 8), torch.ones(1, 6, dtype=torch.bool)
    task = SrlTask({"max_width": 3})
    task.load_labels(LABELS)

    def loss_with(role):
        s = Sentence(words=list("abcdef"), predicates=[0], arguments=[[(0, 1, "V"), (1, 4, role), (4, 5, "ARG0")]])
        return decoder.loss(decoder(words, mask), task.targets([s], 6), mask).item()

    assert loss_with("ARG1") == loss_with("ARGM-TMP")              # [1, 4) is pruned: its role is not scored
    kept = decoder(words, mask)["span_index"][0].tolist()
    assert 1 * 3 + 2 not in kept and len(kept) == 3
    scores = decoder(words, mask)
    scores["predicates"] = torch.tensor([[5.0, -1, -1, -1, -1, -1]])
    for _, args in decoder.decode(scores, mask)[0]:
        assert all(e - s < 3 for s, e, _ in args)
    other = random_decoder(max_width=3, seed=3, span_ratio=0.5)    # kept: the role counts
    with torch.no_grad():
        other.unary_width.copy_(torch.tensor([-100.0, -100.0, 100.0]))
    decoder = other
    assert loss_with("ARG1") != loss_with("ARGM-TMP")


def test_span_ratio_option():
    assert SrlTask().span_ratio == 0.8
    with pytest.raises(ConfigError, match="got 'many'"):
        SrlTask({"span_ratio": "many"})
    for off in ("off", "none", "null", False, None, 0, "0", 0.0):
        assert parse_span_ratio(off) is None
    assert parse_span_ratio(1) == 1.0 and parse_span_ratio("0.4") == 0.4
    for bad in (-1, "many", float("inf"), float("nan"), True, [1]):
        with pytest.raises(ConfigError, match="task.srl.span_ratio"):
            parse_span_ratio(bad)
    task = SrlTask({"span_ratio": "off"})
    task.load_labels(LABELS)
    plain = task.build_decoder(8)
    assert plain.span_ratio is None and not hasattr(plain, "unary")
    task = SrlTask({"span_ratio": 0.5})
    task.load_labels(LABELS)
    pruned = task.build_decoder(8)
    assert pruned.span_ratio == 0.5
    # the unpruned decoder is the decoder as it was: same parameters, drawn in the same order
    torch.manual_seed(0)
    a = SpanSrlDecoder(8, LABELS, span_ratio=None).state_dict()
    torch.manual_seed(0)
    b = SpanSrlDecoder(8, LABELS, span_ratio=0.8).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a) and set(b) - set(a) == {
        "unary_start.linear.weight", "unary_start.linear.bias", "unary_end.linear.weight", "unary_end.linear.bias",
        "unary.weight", "unary_width"}


def test_overfit_tiny_batch_and_decode_recovers_gold():
    s1 = Sentence(words=list("abcdef"), predicates=[2, 4], arguments=[
        [(0, 2, "ARG0"), (2, 3, "V"), (3, 4, "ARG1"), (5, 6, "ARGM-TMP")],
        [(3, 4, "ARG0"), (4, 5, "V"), (5, 6, "ARG1")]])
    s2 = Sentence(words=list("wxyz"), predicates=[1], arguments=[[(0, 1, "ARG0"), (1, 2, "V"), (2, 4, "ARG1")]])
    for ratio in ("off", 0.8):
        torch.manual_seed(0)
        task = SrlTask({"max_width": 4, "n_mlp": 32, "mlp_dropout": 0.0, "span_ratio": ratio})
        task.fit_labels([s1, s2])
        decoder = task.build_decoder(16)
        words = torch.randn(2, 6, 16)
        mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
        targets = task.targets([s1, s2], 6)
        losses = overfit(decoder, words, mask, targets, steps=100)
        assert losses[-1] < 0.1 * losses[0], ratio
        decoder.eval()
        with torch.no_grad():
            assert decoder.decode(decoder(words, mask), mask) == [task.gold(s1), task.gold(s2)], ratio


@pytest.mark.parametrize("span_ratio", [None, 0.8])
def test_bf16_autocast_loss_is_float32(span_ratio):
    decoder = random_decoder(span_ratio=span_ratio)
    words, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool)
    targets = {"predicates": torch.tensor([[0, 1, 0, 0]]), "predicate_index": torch.tensor([[1]]),
               "predicate_mask": torch.tensor([[True]]), "roles": torch.zeros(1, 1, 4, 3, dtype=torch.long)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        scores = decoder(words, mask)
        loss = decoder.loss(scores, targets, mask)
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())
    if span_ratio is not None:                                     # the candidates are ranked in fp32
        assert scores["span_scores"].dtype == torch.float32


def test_decoder_bad_input():
    with pytest.raises(ValueError, match="role label"):
        SpanSrlDecoder(8, [])
    with pytest.raises(ValueError, match="max_width"):
        SpanSrlDecoder(8, LABELS, max_width=0)
    with pytest.raises(ValueError, match="span_ratio"):
        SpanSrlDecoder(8, LABELS, span_ratio=0)
    for ratio in (None, 0.8):
        decoder = random_decoder(max_width=3, span_ratio=ratio)
        words, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool)
        task = SrlTask({"max_width": 2})
        task.load_labels(LABELS)
        targets = task.targets([Sentence(words=list("abcd"), predicates=[1], arguments=[[(1, 2, "V")]])], 4)
        with pytest.raises(ValueError, match="max_width"):
            decoder.loss(decoder(words, mask), targets, mask)


@pytest.mark.parametrize("span_ratio", [None, 0.8])
def test_no_predicates_in_batch(span_ratio):
    decoder = random_decoder(span_ratio=span_ratio)
    task = SrlTask({"max_width": 3})
    task.load_labels(LABELS)
    words, mask = torch.randn(1, 3, 8), torch.ones(1, 3, dtype=torch.bool)
    targets = task.targets([Sentence(words=list("abc"), predicates=[], arguments=[])], 3)
    scores = decoder(words, mask)
    assert math.isfinite(decoder.loss(scores, targets, mask).item())
    scores["predicates"] = torch.full((1, 3), -1.0)
    assert decoder.decode(scores, mask) == [[]]


# ---------------------------------------------------------------- annotate


def test_annotate_sets_layers_and_gold_gives_the_prediction_back():
    task = SrlTask()
    s = Sentence(words="Yesterday John picked the ball up".split(), pos=["NN", "NNP", "VBD", "DT", "NN", "RP"])
    prediction = [(2, [(0, 1, "ARGM-TMP"), (1, 2, "ARG0"), (3, 5, "ARG1")]), (4, [])]
    task.annotate(s, prediction)
    assert s.predicates == [2, 4]
    assert s.arguments == [[(0, 1, "ARGM-TMP"), (1, 2, "ARG0"), (2, 3, "V"), (3, 5, "ARG1")], [(4, 5, "V")]]
    assert task.gold(s) == prediction
    task.annotate(s, [])                                            # no predicate: an empty SRL layer
    assert (s.predicates, s.arguments, task.gold(s)) == ([], [], [])
    for bad in ([(2, [(1, 3, "ARG0")])],                              # over the predicate word
                [(2, [(0, 1, "V")])], [(6, [])], [(2, [(4, 7, "ARG1")])],  # a V role; outside the sentence
                [(2, [(0, 2, "ARG0"), (1, 2, "ARG1")])], [(1, []), (1, [])]):  # overlap; a predicate twice
        with pytest.raises(ValueError, match="SRL prediction"):
            task.annotate(copy.deepcopy(s), bad)


def excerpt_sentences():
    path = Path(__file__).parent / "fixtures" / "ewt_excerpt.gold_conll"
    return [s for s in read_conll2012(path) if s.has("srl")]


@pytest.mark.parametrize("span_ratio", ["off", 0.8])
def test_predict_write_read_score_is_the_training_time_score(tmp_path, span_ratio):
    """Predictions annotated onto sentences, written as CoNLL-2012, read back and scored with
    ``metric.update([task.gold(pred)], [task.gold(gold)])`` give exactly the scores of the decoded
    predictions against the gold sentences."""
    golds = excerpt_sentences()
    task = SrlTask({"span_ratio": span_ratio, "n_mlp": 16, "mlp_dropout": 0.0})
    task.fit_labels(golds)
    torch.manual_seed(0)
    decoder = task.build_decoder(8).eval()
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_()
    n = max(len(s.words) for s in golds)
    words = torch.randn(len(golds), n, 8)
    mask = torch.tensor([[i < len(s.words) for i in range(n)] for s in golds])
    with torch.no_grad():
        scores = decoder(words, mask)
    gold_pred = torch.zeros(len(golds), n)                          # half the gold predicates, some others
    for b, s in enumerate(golds):
        for k, p in enumerate(s.predicates):
            gold_pred[b, p] = 1.0 if k % 2 == 0 else -1.0
    scores["predicates"] = torch.where(gold_pred != 0, gold_pred, scores["predicates"])
    predictions = decoder.decode(scores, mask)
    assert sum(len(args) for frames in predictions for _, args in frames) > 10

    direct = task.metric()
    direct.update(predictions, [task.gold(s) for s in golds])
    annotated = []
    for s, prediction in zip(golds, predictions):
        copy_ = copy.deepcopy(s)
        task.annotate(copy_, prediction)
        assert task.gold(copy_) == prediction
        annotated.append(copy_)
    back = read_conll2012(write_conll2012(annotated, tmp_path / "pred.gold_conll"))
    assert back == annotated
    from_files = task.metric()
    for pred, gold in zip(back, golds):
        from_files.update([task.gold(pred)], [task.gold(gold)])
    assert from_files.compute() == direct.compute()
    assert 0 < direct.compute()["pred_f1"] < 100


# ---------------------------------------------------------------- real data


@pytest.mark.integration
def test_ewt_dev_targets_and_gold(ewt):
    path = ewt / "en_ewt.dev.gold_conll"
    from mtl_heads.data.conll2012 import read_conll2012

    sentences = [s for s in read_conll2012(path) if s.has("srl")]
    task = SrlTask()
    task.fit_labels(sentences)
    counts = (task.too_wide, task.n_arguments)
    assert "V" not in task.labels and "C-ARG1" in task.labels and "R-ARG0" in task.labels
    wide = sum(e - s > 30 for x in sentences for p, args in task.gold(x) for s, e, _ in args)
    n = 0
    for i in range(0, len(sentences), 64):
        batch = sentences[i:i + 64]
        t = task.targets(batch, max(len(s.words) for s in batch))
        n += int((t["roles"] > 0).sum())
    total = sum(len(args) for x in sentences for _, args in task.gold(x))
    assert counts == (wide, total) and n == total - wide
    assert (task.too_wide, task.n_arguments) == counts  # counted once, not again per batch or epoch
    m = task.metric()
    golds = [task.gold(s) for s in sentences]
    m.update(golds, golds)
    assert m.compute()["f1"] == 100.0
    # every predicate word is inside its V (or, once in dev, C-V) span
    for s in sentences:
        for p, args in zip(s.predicates, s.arguments):
            assert any(a <= p < b for a, b, r in args if r in ("V", "C-V"))
