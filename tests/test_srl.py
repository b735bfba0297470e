"""SRL task: metric against hand counts and supar's SpanMetric, greedy decoding against brute force
and a reference loop, loss against a hand-written NLL, overfitting, targets, bad input."""
import itertools
import math
from pathlib import Path

import pytest
import torch
from supar.utils.metric import SpanMetric

from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence
from tasks.srl import SpanSrlDecoder, SrlF1, SrlTask, greedy_arguments

from conftest import overfit

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


def reference_greedy(margin, role, labels):
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


def random_decoder(hidden=8, max_width=3, seed=0):
    torch.manual_seed(seed)
    decoder = SpanSrlDecoder(hidden, LABELS, max_width=max_width, n_mlp=6, mlp_dropout=0.0)
    with torch.no_grad():
        decoder.role.weight.normal_()
    return decoder.eval()


def test_decode_equals_reference_loop():
    decoder = random_decoder()
    words = torch.randn(2, 6, 8)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    scores = decoder(words, mask)
    scores["predicates"] = torch.tensor([[1.0, -1, 2, -1, -1, 0.5], [-1, 1, -1, -1, 3, 3]])  # padded ones ignored
    out = decoder.decode(scores, mask)
    assert [[p for p, _ in frames] for frames in out] == [[0, 2, 5], [1]]
    n_args = 0
    for b, frames in enumerate(out):
        n = int(mask[b].sum())
        for p, args in frames:
            roles = decoder.role_scores(scores, torch.tensor([[p], [p]]))[b, 0, :n]  # [n, w, 1+R]
            best, role = roles[..., 1:].max(-1)
            for i in range(n):                          # spans past the sentence end
                best[i, n - i:] = -1
            assert args == reference_greedy(best, role, LABELS)
            n_args += len(args)
    assert n_args > 0


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
    roles = decoder.role_scores(scores, torch.tensor([[1]]))[0, 0].detach()  # [n, w, 1+R]
    cells = [((0, 0), 2), ((0, 1), 0)]                     # [0, 1), [0, 2); [1, 3) is past the end
    nll = -sum(torch.log_softmax(roles[i, k], -1)[y] for (i, k), y in cells) / 1  # summed, 1 predicate
    assert loss.item() == pytest.approx((bce + nll).item(), rel=1e-5)
    assert roles[0, 0, 0].item() == 0.0                    # null fixed at 0


def test_overfit_tiny_batch_and_decode_recovers_gold():
    torch.manual_seed(0)
    task = SrlTask({"max_width": 4, "n_mlp": 32, "mlp_dropout": 0.0})
    s1 = Sentence(words=list("abcdef"), predicates=[2, 4], arguments=[
        [(0, 2, "ARG0"), (2, 3, "V"), (3, 4, "ARG1"), (5, 6, "ARGM-TMP")],
        [(3, 4, "ARG0"), (4, 5, "V"), (5, 6, "ARG1")]])
    s2 = Sentence(words=list("wxyz"), predicates=[1], arguments=[[(0, 1, "ARG0"), (1, 2, "V"), (2, 4, "ARG1")]])
    task.fit_labels([s1, s2])
    decoder = task.build_decoder(16)
    words = torch.randn(2, 6, 16)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    targets = task.targets([s1, s2], 6)
    losses = overfit(decoder, words, mask, targets, steps=100)
    assert losses[-1] < 0.1 * losses[0]
    decoder.eval()
    with torch.no_grad():
        assert decoder.decode(decoder(words, mask), mask) == [task.gold(s1), task.gold(s2)]


def test_bf16_autocast_loss_is_float32():
    decoder = random_decoder()
    words, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool)
    targets = {"predicates": torch.tensor([[0, 1, 0, 0]]), "predicate_index": torch.tensor([[1]]),
               "predicate_mask": torch.tensor([[True]]), "roles": torch.zeros(1, 1, 4, 3, dtype=torch.long)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = decoder.loss(decoder(words, mask), targets, mask)
    assert loss.dtype == torch.float32 and math.isfinite(loss.item())


def test_decoder_bad_input():
    with pytest.raises(ValueError, match="role label"):
        SpanSrlDecoder(8, [])
    with pytest.raises(ValueError, match="max_width"):
        SpanSrlDecoder(8, LABELS, max_width=0)
    decoder = random_decoder(max_width=3)
    words, mask = torch.randn(1, 4, 8), torch.ones(1, 4, dtype=torch.bool)
    task = SrlTask({"max_width": 2})
    task.load_labels(LABELS)
    targets = task.targets([Sentence(words=list("abcd"), predicates=[1], arguments=[[(1, 2, "V")]])], 4)
    with pytest.raises(ValueError, match="max_width"):
        decoder.loss(decoder(words, mask), targets, mask)


def test_no_predicates_in_batch():
    decoder = random_decoder()
    task = SrlTask({"max_width": 3})
    task.load_labels(LABELS)
    words, mask = torch.randn(1, 3, 8), torch.ones(1, 3, dtype=torch.bool)
    targets = task.targets([Sentence(words=list("abc"), predicates=[], arguments=[])], 3)
    scores = decoder(words, mask)
    assert math.isfinite(decoder.loss(scores, targets, mask).item())
    scores["predicates"] = torch.full((1, 3), -1.0)
    assert decoder.decode(scores, mask) == [[]]


# ---------------------------------------------------------------- real data


@pytest.mark.integration
def test_ewt_dev_targets_and_gold():
    path = Path(__file__).resolve().parents[2] / "shared/data/ewt/en_ewt.dev.gold_conll"
    if not path.exists():
        pytest.skip("../shared/data/ewt is absent")
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
