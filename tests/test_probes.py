"""Probes: hand-built attention maps and head contexts with known answers, and the fast probes
against the slow plain loops (probes/plain.py) on the EWT excerpt with a tiny encoder."""
from __future__ import annotations

import math
from collections import Counter
from pathlib import Path

import nltk
import numpy as np
import pandas as pd
import pytest
import torch

from mtl_heads.config import ConfigError
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.corpus import convert_trees
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from probes import PROBES

PARAMETER_FREE = [n for n, cls in PROBES.items() if not getattr(cls, "needs_run", False)]
from probes import plain
from probes.base import LabelStats, ProbeBatch, ProbeContext, pool_units, slot_index, word_attention
from probes.clustering import lowest_phrases
from probes.runner import examples_for, probe_batches, run_probes

from helpers import same_tables

FIXTURES = Path(__file__).parent / "fixtures"
CPU = torch.device("cpu")


# ---------------------------------------------------------------------- helpers
def one_piece_batch(sentences: list[Sentence], maps: list[np.ndarray], contexts=None) -> ProbeBatch:
    """A batch where every word is one sub-word: positions [CLS] w1..wn [SEP] (+ padding).
    ``maps``: per layer ``[batch, heads, T, T]`` arrays; ``contexts``: per layer ``[B, T, H, d]``."""
    T = max(len(s.words) for s in sentences) + 2
    word_index = torch.full((len(sentences), T), -1)
    mask = torch.zeros(len(sentences), T, dtype=torch.long)
    for i, s in enumerate(sentences):
        word_index[i, 1:len(s.words) + 1] = torch.arange(len(s.words))
        mask[i, :len(s.words) + 2] = 1
    attn = [torch.tensor(m, dtype=torch.float32) for m in maps] if maps is not None else None
    ctx = [torch.tensor(c, dtype=torch.float32) for c in contexts] if contexts is not None else None
    return ProbeBatch(sentences, word_index, mask, attn, ctx)


def one_hot_map(targets: list[int], T: int) -> np.ndarray:
    """``[T, T]`` attention: row t puts all its weight on ``targets[t]``."""
    m = np.zeros((T, T))
    m[np.arange(T), targets] = 1.0
    return m


def score(table: pd.DataFrame, label: str, layer: int, head: int, **where) -> float:
    rows = table[(table.label == label) & (table.layer == layer) & (table["head"] == head)]
    for k, v in where.items():
        rows = rows[rows[k] == v]
    assert len(rows) == 1, (label, layer, head, where, rows)
    return float(rows.score.iloc[0])


# ---------------------------------------------------------------------- building blocks
def test_slot_index_maps_specials_words_and_padding():
    word_index = torch.tensor([[-1, 0, 0, 1, -1, -1], [-1, 0, -1, -1, -1, -1]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    slots = slot_index(word_index, mask, 4)  # [CLS], up to 2 words, [SEP] always last
    assert slots.tolist() == [[0, 1, 1, 2, 3, -1], [0, 1, 3, -1, -1, -1]]


def test_word_attention_averages_rows_and_sums_columns():
    # [CLS] a1 a2 b [SEP]: word a has two pieces
    attn = torch.tensor([[.1, .2, .3, .4, .0],
                         [.5, .1, .1, .2, .1],
                         [.0, .3, .3, .2, .2],
                         [.2, .2, .2, .2, .2],
                         [.0, .0, .0, .5, .5]])
    slots = torch.tensor([[0, 1, 1, 2, 3]])
    words = word_attention(attn[None, None, None], slots, 4)[0, 0, 0]
    expected = torch.tensor([[.1, .5, .4, .0],
                             [(.5 + .0) / 2, (.2 + .6) / 2, (.2 + .2) / 2, (.1 + .2) / 2],
                             [.2, .4, .2, .2],
                             [.0, .0, .5, .5]])
    assert torch.allclose(words, expected)
    assert torch.allclose(words.sum(-1), torch.ones(4))
    assert np.allclose(plain.word_map(attn.double().numpy(), [0, 1, 1, 2, 3], 4), expected.double().numpy())


def test_pool_units_means_the_pieces_of_each_span():
    contexts = torch.arange(2 * 5, dtype=torch.float32).view(2, 5, 1)  # [B, T, 1]
    word_index = torch.tensor([[-1, 0, 0, 1, -1], [-1, 0, 1, 2, -1]])
    b, start, end = torch.tensor([0, 0, 1]), torch.tensor([0, 1, 1]), torch.tensor([1, 2, 3])
    pooled = pool_units(contexts, word_index, b, start, end, n_words=3)
    assert pooled.view(-1).tolist() == [1.5, 3.0, 7.5]  # (1+2)/2; 3; (7+8)/2


def test_lowest_phrases_are_the_constituents_directly_above_tags():
    tree = nltk.Tree.fromstring("(S (NP (DT the) (NN dog)) (VP (VBD barked) (ADVP (RB loudly))) (. .))")
    assert lowest_phrases(tree) == [(0, 2, "NP"), (3, 4, "ADVP")]


def test_label_stats_grow_with_new_labels():
    stats = LabelStats((2,), CPU)
    stats.add(stats.ids(["a", "b", "a"]), torch.tensor([[1., 0.], [0., 1.], [1., 1.]]))
    stats.add(stats.ids(["c"]), torch.tensor([[2., 2.]]))
    assert stats.labels == ["a", "b", "c"] and stats.counts.tolist() == [2, 1, 1]
    assert stats.means().tolist() == [[1.0, 0.5], [0.0, 1.0], [2.0, 2.0]]


# ---------------------------------------------------------------------- hand-built attention
def chain_sentence(n: int = 12) -> Sentence:
    """Every dependent one word to the right of its head (word 1 is the root)."""
    words = [f"w{i}" for i in range(n)]
    words[4] = "zyzzyva"
    return Sentence(words=words, heads=list(range(n)), rels=["root"] + ["next"] * (n - 1))


def chain_batch(n: int = 12) -> ProbeBatch:
    T = n + 2
    prev = one_hot_map([max(t - 1, 0) for t in range(T)], T)        # head 0: previous token
    nxt = one_hot_map([min(t + 1, T - 1) for t in range(T)], T)     # head 1: next token
    rare = one_hot_map([5] * T, T)                                  # head 2: the rare word (slot 5 = word 4)
    return one_piece_batch([chain_sentence(n)], [np.stack([prev, nxt, rare])[None]])


def run_one(name: str, batch: ProbeBatch, layers=1, heads=3, corpus=None, **options):
    probe = PROBES[name](layers, heads, **options)
    probe.setup(ProbeContext(None, corpus or {"train": batch.sentences}, "test", CPU))
    probe.update(batch)
    return probe


def test_dep_probe_previous_and_next_word_heads_find_every_right_dependent():
    table = run_one("dep", chain_batch()).result()
    assert score(table, "next", 0, 0) == 100.0  # the dependent attends to its head
    assert score(table, "next", 0, 1) == 100.0  # the head attends to its dependent
    assert score(table, "root", 0, 0) == 100.0  # word 1 attends to [CLS], the root
    assert score(table, "next", 0, 2) == pytest.approx(100 * 2 / 11)  # only the arcs touching word 4
    assert table.groupby("label")["count"].first().to_dict() == {"next": 11, "root": 1}


def tree_sentence() -> Sentence:
    """``a b c d e f``: b is the root; nsubj and nsubj:pass arcs to tell the label sets apart."""
    return Sentence(words=list("abcdef"), heads=[2, 0, 2, 5, 3, 2],
                    rels=["nsubj:pass", "root", "obj", "det", "nsubj", "nsubj"])


def gold_head_maps() -> np.ndarray:
    """``[1, heads=3, T, T]`` for :func:`tree_sentence`: head 0 sends every word's row to its gold
    head (the root's to [CLS]); head 1 the same with 0.6 of each row on [CLS] and 0.4 on the gold
    head; head 2 only the nsubj arcs (e -> c, f -> b), every other row on word d."""
    s = tree_sentence()
    T = len(s.words) + 2
    gold = one_hot_map([0] + s.heads + [T - 1], T)
    diluted = 0.4 * gold + 0.6 * one_hot_map([0] * T, T)
    nsubj = one_hot_map([4] * T, T)
    for d, (h, r) in enumerate(zip(s.heads, s.rels)):
        if r == "nsubj":
            nsubj[d + 1] = 0
            nsubj[d + 1, h] = 1.0
    return np.stack([gold, diluted, nsubj])[None]


def test_dep_probe_without_cls_scores_word_arcs_only_over_the_words():
    batch = one_piece_batch([tree_sentence()], [gold_head_maps()])
    table = run_one("dep", batch, root="none").result()
    assert "root" not in set(table.label)  # root arcs are not scored
    assert table.groupby("label")["count"].first().to_dict() == {"nsubj:pass": 1, "obj": 1, "det": 1, "nsubj": 2}
    assert (table[table["head"] == 0].score == 100.0).all()  # every non-root arc
    assert (table[table["head"] == 1].score == 100.0).all()  # [CLS] is not in the argmax
    with_cls = run_one("dep", one_piece_batch([tree_sentence()], [gold_head_maps()])).result()
    assert score(with_cls, "root", 0, 0) == 100.0 and with_cls[with_cls.label == "root"]["count"].iloc[0] == 1
    diluted = with_cls[(with_cls["head"] == 1) & (with_cls.label != "root")]
    assert (diluted.score == 0.0).all()  # every row's argmax is [CLS] (a hit for the root arc only)
    probe = run_one("dep", one_piece_batch([tree_sentence()], [gold_head_maps()]), root="none")
    assert probe.meta()["root"] == "none" and probe.meta()["relations"] == "full"


def test_dep_probe_without_cls_a_row_with_no_weight_on_words_predicts_nothing():
    s = Sentence(words=["a", "b"], heads=[2, 0], rels=["nsubj", "root"])
    to_cls = one_hot_map([0, 0, 0, 0], 4)  # every row on [CLS]: the words-only argmax would pick word a
    table = run_one("dep", one_piece_batch([s], [to_cls[None, None]]), heads=1, root="none").result()
    assert score(table, "nsubj", 0, 0) == 0.0


def test_universal_relations_merge_subtypes_with_summed_counts():
    batch = one_piece_batch([tree_sentence()], [gold_head_maps()])
    full = run_one("dep", batch).result()
    assert score(full, "nsubj", 0, 2) == 100.0 and score(full, "nsubj:pass", 0, 2) == 0.0
    universal = run_one("dep", one_piece_batch([tree_sentence()], [gold_head_maps()]), relations="universal").result()
    counts = universal.groupby("label")["count"].first().to_dict()
    assert counts == {"nsubj": 3, "root": 1, "obj": 1, "det": 1}  # nsubj 2 + nsubj:pass 1, one row per head
    assert len(universal[universal.label == "nsubj"]) == 3
    assert score(universal, "nsubj", 0, 2) == pytest.approx(100 * 2 / 3)  # the hits are summed too
    clark = run_one("clark", one_piece_batch([tree_sentence()], [gold_head_maps()]), relations="universal").result()
    assert "nsubj:pass" not in set(clark.label)
    assert clark[clark.label == "nsubj"]["count"].iloc[0] == 3
    assert score(clark, "nsubj", 0, 2, direction="dep->head") == pytest.approx(100 * 2 / 3)
    clark_full = run_one("clark", one_piece_batch([tree_sentence()], [gold_head_maps()])).result()
    assert {"nsubj", "nsubj:pass"} <= set(clark_full.label)


def test_clark_probe_directions_and_offset_baseline():
    probe = run_one("clark", chain_batch())
    table = probe.result()
    assert score(table, "next", 0, 0, direction="dep->head") == 100.0
    assert score(table, "next", 0, 0, direction="head->dep") == 0.0
    assert score(table, "next", 0, 1, direction="head->dep") == 100.0
    assert score(table, "next", 0, 1, direction="dep->head") == 0.0
    row = table[(table.label == "next")].iloc[0]
    assert row.baseline == 100.0 and row.baseline_offset == -1
    assert "root" not in set(table.label)
    best = probe.summary().set_index("label")
    assert best.loc["next", "score"] == 100.0 and best.loc["next", "layer"] == 0 and best.loc["next", "head"] == 0


def test_clark_attention_to_specials_and_entropy():
    s = Sentence(words=["Hi", ",", "you", "."])
    T = 6
    to_cls = one_hot_map([0] * T, T)
    uniform = np.full((T, T), 1 / T)
    table = run_one("clark", one_piece_batch([s], [np.stack([to_cls, uniform])[None]]), heads=2).result()
    assert score(table, "to [CLS]", 0, 0) == pytest.approx(1.0)
    assert score(table, "to [SEP]", 0, 0) == pytest.approx(0.0)
    assert score(table, "entropy", 0, 0) == pytest.approx(0.0, abs=1e-6)
    assert score(table, "to [CLS]", 0, 1) == pytest.approx(1 / T)
    assert score(table, "to punct", 0, 1) == pytest.approx(2 / T)  # "," and "."
    assert score(table, "entropy", 0, 1) == pytest.approx(math.log(T), rel=1e-5)


def test_voita_positional_rare_and_syntactic_heads():
    sentence = chain_sentence()
    frequencies = Counter({w: 10 for w in sentence.words if w != "zyzzyva"})
    corpus = {"train": [Sentence(words=[w] * c) for w, c in frequencies.items()]}
    probe = run_one("voita", chain_batch(), corpus=corpus, min_arcs=1)
    table = probe.result()
    positional = table[table.label == "positional"].set_index("head")
    assert positional.loc[0, "score"] == pytest.approx(100 * 11 / 12) and positional.loc[0, "offset"] == -1
    assert positional.loc[1, "offset"] == 1 and positional.loc[0, "found"] and positional.loc[1, "found"]
    assert not positional.loc[2, "found"]  # always the same word: one position per query, not one relative position
    rare = table[table.label == "rare"].set_index("head")
    assert rare.loc[2, "score"] == 100.0 and rare.loc[2, "found"] and not rare.loc[0, "found"]
    assert rare.loc[0, "score"] == pytest.approx(100 / 12)  # word 5 looks back at the rare word 4
    confidence = table[table.label == "confidence"]
    assert np.allclose(confidence.score, 1.0)
    # 100% on "next", but so does the offset -1 baseline: not syntactic
    nxt = table[(table.label == "next")].set_index("head")
    assert nxt.loc[0, "score"] == 100.0 and nxt.loc[0, "baseline"] == 100.0 and not nxt.loc[0, "found"]
    assert probe.found_heads() == {"positional": ["L0H0", "L0H1"], "rare": ["L0H2"], "syntactic": []}


def test_voita_syntactic_head_beats_the_positional_baseline():
    # the head of every word is the last word (8): the best offset, +2, finds it for word 6, and for
    # word 7 too since guesses are clamped to the sentence (Clark et al.'s baseline): 2 of 7
    n = 8
    s = Sentence(words=[f"w{i}" for i in range(n)], heads=[n] * (n - 1) + [0], rels=["dep"] * (n - 1) + ["root"])
    T = n + 2
    to_last = one_hot_map([n] * T, T)
    to_last[n] = 0
    to_last[n, n - 1] = 1.0  # the last word itself looks left
    table = run_one("voita", one_piece_batch([s], [to_last[None, None]]), heads=1, min_arcs=7).result()
    assert table[table.label == "dep"].iloc[0].found
    table = run_one("voita", one_piece_batch([s], [to_last[None, None]]), heads=1, min_arcs=8).result()
    assert not table[table.label == "dep"].iloc[0].found  # too few arcs to call a head syntactic
    table = run_one("voita", one_piece_batch([s], [to_last[None, None]]), heads=1, min_arcs=1).result()
    dep = table[table.label == "dep"].iloc[0]
    assert dep.score == 100.0 and dep.baseline == pytest.approx(200 / 7) and dep.found


def test_srl_probe_span_found_through_any_word_or_the_predicate():
    s = Sentence(words=list("abcdefgh"), predicates=[3],
                 arguments=[[(0, 2, "ARG0"), (3, 4, "V"), (4, 7, "ARG1")]])
    T = 10
    to_pred = one_hot_map([4] * T, T)             # every word attends to the predicate (slot 4)
    pred_to_f = one_hot_map(list(range(T)), T)     # self, except the predicate looks at word f (slot 6)
    pred_to_f[4] = 0
    pred_to_f[4, 6] = 1.0
    table = run_one("srl", one_piece_batch([s], [np.stack([to_pred, pred_to_f])[None]]), heads=2).result()
    assert set(table.label) == {"ARG0", "ARG1"}  # V is part of the predicate, not an argument
    assert score(table, "ARG0", 0, 0) == 100.0 and score(table, "ARG1", 0, 0) == 100.0
    assert score(table, "ARG1", 0, 1) == 100.0 and score(table, "ARG0", 0, 1) == 0.0


# ---------------------------------------------------------------------- hand-built head contexts
def tagged_batch(tags: list[str], features: dict[str, list[float]]) -> ProbeBatch:
    """One sentence; head 0 sees ``features[tag]``, head 1 sees zeros, head 2 sees the NN/VB-blind feature."""
    s = Sentence(words=[f"w{i}" for i in range(len(tags))], pos=tags)
    T = len(tags) + 2
    ctx = np.zeros((1, T, 3, 3))
    for i, tag in enumerate(tags):
        ctx[0, i + 1, 0] = features[tag]
        ctx[0, i + 1, 2] = [1.0, 0.0, 0.0] if tag in ("NN", "VB") else [0.0, 1.0, 0.0]
    return one_piece_batch([s], None, [ctx])


def run_clustering(fit: ProbeBatch, batch: ProbeBatch, variant="same_split"):
    probe = PROBES["pos"](1, 3, variant=variant, centroid_split="dev")
    probe.setup(ProbeContext(None, {}, "test", CPU))
    probe.fit(fit)
    probe.end_fit()
    probe.update(batch)
    return probe.result()


def test_pos_clustering_separable_zero_and_blind_heads():
    tags = ["NN", "VB", "DT", "NN", "DT", "VB"]
    features = {"NN": [1, 0, 0], "VB": [0, 1, 0], "DT": [0, 0, 2]}
    batch = tagged_batch(tags, features)
    table = run_clustering(batch, batch)
    assert all(score(table, t, 0, 0) == 100.0 for t in ("NN", "VB", "DT"))
    assert all(score(table, t, 0, 1) == 0.0 for t in ("NN", "VB", "DT"))  # a zero feature is a miss
    # head 2 cannot tell NN from VB: both go to the first centroid met (NN)
    assert score(table, "NN", 0, 2) == 100.0 and score(table, "VB", 0, 2) == 0.0 and score(table, "DT", 0, 2) == 100.0


def test_held_out_clustering_uses_the_other_split_centroids():
    tags = ["NN", "VB", "NN", "VB"]
    fit = tagged_batch(tags, {"NN": [0, 1, 0], "VB": [1, 0, 0]})   # swapped in the centroid split
    test = tagged_batch(tags, {"NN": [1, 0, 0], "VB": [0, 1, 0]})
    table = run_clustering(fit, test, variant="held_out")
    assert score(table, "NN", 0, 0) == 0.0 and score(table, "VB", 0, 0) == 0.0
    assert score(run_clustering(test, test), "NN", 0, 0) == 100.0


def test_clustering_without_units():
    batch = tagged_batch(["NN"], {"NN": [1, 0, 0]})  # no entities layer
    probe = PROBES["ner"](1, 3)
    probe.setup(ProbeContext(None, {}, "test", CPU))
    probe.fit(batch)
    probe.end_fit()
    probe.update(batch)
    assert probe.result().empty and probe.summary().empty  # same split: nothing to score, no error
    probe = PROBES["ner"](1, 3, variant="held_out", centroid_split="train")
    probe.setup(ProbeContext(None, {}, "test", CPU))
    probe.fit(batch)
    with pytest.raises(ConfigError, match="clustering.centroid_split"):
        probe.end_fit()


def test_bad_probe_options_name_the_key():
    with pytest.raises(ConfigError, match="clustering.variant"):
        PROBES["pos"](1, 1, variant="nope")
    with pytest.raises(ConfigError, match="unknown options"):
        PROBES["dep"](1, 1, colour="red")


# -------------------------------------------------------------------------- fast == plain on real sentences
@pytest.fixture(scope="module")
def excerpt() -> list[Sentence]:
    sentences = read_conll2012(FIXTURES / "ewt_excerpt.gold_conll")
    attach_conllu(sentences, read_conllu(FIXTURES / "ewt_excerpt.conllu"), FIXTURES / "ewt_excerpt.conllu")
    return sentences


@pytest.fixture(scope="module")
def tiny(tiny_encoder_dir) -> GatedEncoder:
    return GatedEncoder.from_pretrained(str(tiny_encoder_dir)).eval()


@pytest.fixture(scope="module")
def gated(tiny_encoder_dir) -> GatedEncoder:
    mask = torch.ones(2, 4)
    mask[0, 1] = mask[1, 3] = 0.0
    mask[1, 0] = 0.5
    return GatedEncoder.from_pretrained(str(tiny_encoder_dir), gate="fixed", gate_kwargs={"mask": mask}).eval()


def probe_all(encoder, corpus, names, batch_size=3, **options) -> tuple[dict, ProbeContext]:
    context = ProbeContext(encoder, corpus, "test", CPU)
    probes = {}
    for n in names:
        wanted = {"pos": ("variant", "centroid_split"), "ner": ("variant", "centroid_split"),
                  "con": ("variant", "centroid_split"), "voita": ("min_arcs",), "dep": ("root", "relations"),
                  "clark": ("relations",)}.get(n, ())
        opts = {k: v for k, v in options.items() if k in wanted}
        probes[n] = PROBES[n](encoder.num_layers, encoder.num_heads, **opts)
    run_probes(probes, context, batch_size=batch_size, log=lambda *_: None)
    return probes, context


def records(encoder, context, role):
    out = []
    for batch in probe_batches(encoder, examples_for(context, role), 3, CPU):
        out += plain.split_batch(batch)
    return out


@pytest.mark.parametrize("deps", ["ud", "converted"])
def test_fast_probes_match_the_plain_loops(tiny, excerpt, deps):
    sentences = [Sentence(**{k: getattr(s, k) for k in ("words", "pos", "tree", "entities", "predicates",
                                                       "arguments", "heads", "rels")}) for s in excerpt]
    if deps == "converted":
        convert_trees(sentences)
    corpus = {"test": sentences, "train": sentences[:5]}
    probes, context = probe_all(tiny, corpus, PARAMETER_FREE, min_arcs=3)
    slow = records(tiny, context, "test")
    frequencies = Counter(w for s in corpus["train"] for w in s.words)
    expected = {"dep": plain.plain_dep(slow), "srl": plain.plain_srl(slow), "clark": plain.plain_clark(slow),
                "voita": plain.plain_voita(slow, frequencies, min_arcs=3), "sink": plain.plain_sink(slow),
                **{k: plain.plain_clustering(slow, slow, k) for k in ("pos", "ner", "con")}}
    for name, probe in probes.items():
        keys = ("layer", "head", "label", "direction") if name == "clark" else ("layer", "head", "label")
        assert not probe.result().duplicated(list(keys)).any(), name  # e.g. no clash of "punct" the relation
        same_tables(probe.result().fillna({"direction": ""}), expected[name].fillna({"direction": ""})
                    if "direction" in expected[name] else expected[name], keys)


def random_maps(sentences: list[Sentence], heads: int = 4, seed: int = 0) -> list[np.ndarray]:
    """One layer of random attention ``[B, heads, T, T]`` (padding keys get 0), with [CLS] weighted
    x0, x1, x4, x16 in heads 0..3 and exact zeros sprinkled in (rows on the specials only)."""
    rng = np.random.default_rng(seed)
    T = max(len(s.words) for s in sentences) + 2
    maps = np.zeros((len(sentences), heads, T, T))
    for i, s in enumerate(sentences):
        t = len(s.words) + 2
        for h in range(heads):
            m = rng.random((t, t)) ** 3
            m[:, 0] *= 4.0 ** h if h else 0.0
            m[rng.random(t) < 0.15, 1:t - 1] = 0.0  # some rows give the words nothing
            m[:, t - 1] += 1e-3
            maps[i, h, :t, :t] = m / m.sum(1, keepdims=True)
    return [maps]


@pytest.mark.parametrize("root, relations", [("none", "full"), ("cls", "universal"), ("none", "universal")])
def test_dep_and_clark_choices_match_the_plain_loops(tiny, gated, excerpt, root, relations):
    assert any(":" in r for s in excerpt for r in s.rels)  # UD subtypes (nmod:poss, ...): universal merges rows
    # hand-built maps where [CLS] often wins the argmax, and rows with no weight on the words
    for maps, sentences in ((random_maps(excerpt[:5]), excerpt[:5]), ([gold_head_maps()], [tree_sentence()])):
        batch, heads = one_piece_batch(sentences, maps), maps[0].shape[1]
        slow = plain.split_batch(batch)
        same_tables(run_one("dep", batch, heads=heads, root=root, relations=relations).result(),
                    plain.plain_dep(slow, root=root, relations=relations))
        same_tables(run_one("clark", batch, heads=heads, relations=relations).result().fillna({"direction": ""}),
                    plain.plain_clark(slow, relations=relations).fillna({"direction": ""}), ("layer", "head", "label", "direction"))
    for encoder in (tiny, gated):
        probes, context = probe_all(encoder, {"test": excerpt}, ["dep", "clark"], root=root, relations=relations)
        slow = records(encoder, context, "test")
        dep = probes["dep"].result()
        same_tables(dep, plain.plain_dep(slow, root=root, relations=relations))
        assert ("root" in set(dep.label)) == (root == "cls")
        assert all(":" not in label for label in dep.label) or relations == "full"
        clark = probes["clark"].result().fillna({"direction": ""})
        same_tables(clark, plain.plain_clark(slow, relations=relations).fillna({"direction": ""}),
                    ("layer", "head", "label", "direction"))


def test_gated_heads_and_held_out_centroids_match_the_plain_loops(gated, excerpt):
    corpus = {"test": excerpt[4:], "dev": excerpt[:4]}
    probes, context = probe_all(gated, corpus, ["pos", "ner", "con", "dep"], variant="held_out", centroid_split="dev")
    fit, slow = records(gated, context, "dev"), records(gated, context, "test")
    for kind in ("pos", "ner", "con"):
        same_tables(probes[kind].result(), plain.plain_clustering(fit, slow, kind))
    same_tables(probes["dep"].result(), plain.plain_dep(slow))
    pos = probes["pos"].result()
    assert (pos[(pos.layer == 0) & (pos["head"] == 1)].score == 0).all()  # gated to 0: no feature, no hit
    assert probes["pos"].meta()["variant_text"] == "centroids from 'dev', scored on 'test'"


def test_results_do_not_depend_on_batching_and_memory_stays_flat(tiny, excerpt):
    names = ["dep", "srl", "pos", "clark", "voita"]
    once, _ = probe_all(tiny, {"test": excerpt, "train": excerpt}, names, batch_size=8)
    thrice, _ = probe_all(tiny, {"test": excerpt * 3, "train": excerpt}, names, batch_size=1)
    for name in names:
        a, b = once[name].result(), thrice[name].result()
        assert np.allclose(a.score, b.score, atol=1e-4), name  # the same sentences three times: same rates
        special = a.label.isin(["to [CLS]", "to [SEP]", "to punct", "entropy", "confidence", "positional", "rare"])
        assert (3 * a["count"][~special] == b["count"][~special]).all(), name
        assert state_size(once[name]) == state_size(thrice[name]), name


def state_size(obj, seen=None) -> int:
    """Elements in every tensor an object holds (recursively through its attributes)."""
    seen = seen if seen is not None else set()
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, torch.Tensor):
        return obj.numel()
    if isinstance(obj, dict):
        return sum(state_size(v, seen) for v in obj.values())
    if hasattr(obj, "__dict__") and type(obj).__module__.startswith("probes"):
        return sum(state_size(v, seen) for v in vars(obj).values())
    return 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu(tiny_encoder_dir, excerpt):
    names = ["dep", "pos", "clark", "voita"]
    cpu, _ = probe_all(GatedEncoder.from_pretrained(str(tiny_encoder_dir)).eval(), {"test": excerpt, "train": excerpt}, names)
    gpu_encoder = GatedEncoder.from_pretrained(str(tiny_encoder_dir)).cuda().eval()
    context = ProbeContext(gpu_encoder, {"test": excerpt, "train": excerpt}, "test", torch.device("cuda"))
    gpu = {n: PROBES[n](2, 4, device="cuda") for n in names}
    run_probes(gpu, context, batch_size=3, log=lambda *_: None)
    for n in names:
        assert np.allclose(cpu[n].result().score, gpu[n].result().score, atol=1e-3), n
