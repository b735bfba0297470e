"""Probes on causal (decoder-only) models: the reachable shares and the attention sink by hand on
made-up attention, the reachable shares against brute force over every causal argmax pattern on
small random trees, the fast probes against the plain loops on tiny decoders, and every probe
kind through ``python -m mtl_heads probe`` on tiny random Llama (BOS) and GPT-2 (no BOS) models."""
from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.commands.probe import main, run
from probes import PROBES
from probes import plain
from probes.base import CAUSAL_NOTE, NO_START_TOKEN, ProbeBatch, ProbeContext, pool_units
from probes.runner import examples_for, probe_batches, run_probes
from helpers import same_tables
from tiny_lms import _save  # tiny random decoders with an offline-trained tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
CPU = torch.device("cpu")
PARAMETER_FREE = [n for n, cls in PROBES.items() if not getattr(cls, "needs_run", False)]
SIZES = "data.demo_sizes={train: 24, dev: 12, test: 16}"


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny matrices: see conftest.one_thread


# ---------------------------------------------------------------------- helpers
def causal_context(bos: bool, pool: str = "last", corpus=None) -> ProbeContext:
    """A context whose encoder says what the probes read: causal, with or without a BOS token."""
    tokenizer = SimpleNamespace(bos_token="<s>", eos_token="</s>", cls_token=None, sep_token=None)
    encoder = SimpleNamespace(causal=True, root_source="bos" if bos else "learnt", tokenizer=tokenizer, pool=pool)
    return ProbeContext(encoder, corpus or {}, "test", CPU)


def decoder_batch(sentences: list[Sentence], maps: np.ndarray, bos: bool) -> ProbeBatch:
    """One piece per word, as a decoder sees it: ``[BOS] w1 .. wn`` (``bos``) or ``w1 .. wn``, no end
    token, padded on the right. ``maps``: one layer ``[batch, heads, T, T]``."""
    T = maps.shape[-1]
    word_index = torch.full((len(sentences), T), -1)
    mask = torch.zeros(len(sentences), T, dtype=torch.long)
    for i, s in enumerate(sentences):
        n = len(s.words)
        word_index[i, int(bos):n + int(bos)] = torch.arange(n)
        mask[i, :n + int(bos)] = 1
    return ProbeBatch(sentences, word_index, mask, [torch.tensor(maps, dtype=torch.float32)])


def run_probe(name: str, batch: ProbeBatch, context: ProbeContext, heads: int, **options):
    probe = PROBES[name](1, heads, **options)
    probe.setup(context)
    probe.update(batch)
    return probe


def score(table: pd.DataFrame, label: str, head: int, column: str = "score", **where) -> float:
    rows = table[(table.label == label) & (table["head"] == head)]
    for key, value in where.items():
        rows = rows[rows[key] == value]
    assert len(rows) == 1, (label, head, where)
    return float(rows[column].iloc[0])


# ---------------------------------------------------------------------- by hand
def test_pool_units_takes_each_words_last_or_first_piece():
    contexts = torch.arange(2 * 5, dtype=torch.float32).view(2, 5, 1)  # [B, T, 1]: position t holds 5b + t
    word_index = torch.tensor([[-1, 0, 0, 1, -1], [0, 1, 1, 1, 2]])  # sentence 2: no BOS, word 1 has 3 pieces
    b, start, end = torch.tensor([0, 1, 1]), torch.tensor([0, 0, 2]), torch.tensor([2, 2, 3])
    assert pool_units(contexts, word_index, b, start, end, 3, "last").view(-1).tolist() == [2.5, 6.5, 9.0]
    assert pool_units(contexts, word_index, b, start, end, 3, "first").view(-1).tolist() == [2.0, 5.5, 9.0]
    assert pool_units(contexts, word_index, b, start, end, 3).view(-1).tolist() == [2.0, 6.5, 9.0]  # every piece
    with pytest.raises(ValueError, match="pool"):
        pool_units(contexts, word_index, b, start, end, 3, "max")


def hand_sentences() -> list[Sentence]:
    """``a b c``: a <-nsubj- b (root) -obj-> c, predicate b with ARG0 a and ARG1 c; ``x y``: x (root) -dep-> y."""
    return [Sentence(words=list("abc"), heads=[2, 0, 2], rels=["nsubj", "root", "obj"], predicates=[1],
                     arguments=[[(0, 1, "ARG0"), (1, 2, "V"), (2, 3, "ARG1")]]),
            Sentence(words=list("xy"), heads=[0, 1], rels=["root", "dep"], predicates=[], arguments=[])]


def hand_maps(bos: bool) -> np.ndarray:
    """``[2 sentences, 2 heads, 4, 4]`` causal maps. Head 0: made-up weights; head 1: each token on
    the previous one (the first on itself). The padded row of sentence 2 is garbage that must be
    ignored. Without BOS the tokens are the words only (``T = 3``)."""
    if bos:
        s1 = [[1, 0, 0, 0], [.5, .5, 0, 0], [.2, .3, .5, 0], [.1, .2, .3, .4]]
        s2 = [[1, 0, 0, 0], [.6, .4, 0, 0], [.3, .3, .4, 0], [.25, .25, .25, .25]]
        prev = np.eye(4)[[0, 0, 1, 2]]
    else:
        s1 = [[1, 0, 0], [.5, .5, 0], [.2, .3, .5]]
        s2 = [[1, 0, 0], [.6, .4, 0], [1 / 3, 1 / 3, 1 / 3]]
        prev = np.eye(3)[[0, 0, 1]]
    return np.stack([np.stack([s1, prev]), np.stack([s2, prev])])


@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_sink_share_by_hand(bos):
    sink = run_probe("sink", decoder_batch(hand_sentences(), hand_maps(bos), bos), causal_context(bos), heads=2)
    table = sink.result()
    if bos:  # head 0: (.5 + .2 + .1) / 3 and (.6 + .3) / 2; head 1: 1 of 3 queries, 1 of 2 queries on token 0
        expected = [100 * (.8 / 3 + .45) / 2, 100 * (1 / 3 + 1 / 2) / 2]
    else:    # head 0: (.5 + .2) / 2 and .6 / 1; head 1: 1 of 2 queries, 1 of 1
        expected = [100 * (.35 + .6) / 2, 100 * (1 / 2 + 1) / 2]
    assert table.score.tolist() == pytest.approx(expected)
    assert table.label.tolist() == ["first token"] * 2 and table["count"].tolist() == [2, 2]
    meta = sink.meta()
    assert meta["grid"] == [[pytest.approx(v, abs=1e-3) for v in expected]]
    assert meta["first_token"] == ("<s>" if bos else NO_START_TOKEN) and meta["max"]["head"] == int(np.argmax(expected))
    assert "can only attend to itself" in sink.caveat()
    records = plain.split_batch(decoder_batch(hand_sentences(), hand_maps(bos), bos))
    assert plain.plain_sink(records).score.tolist() == pytest.approx(expected)


def test_dep_reachable_by_hand():
    sentences = hand_sentences()
    # with BOS: every arc reachable; head first: b->root, c, x->root, y (4 of 5); dependent first: a (1 of 5)
    dep = run_probe("dep", decoder_batch(sentences, hand_maps(True), True), causal_context(True), heads=2)
    assert dep.reachable() == {"units": 5, "reachable_units": 5, "reachable": 100.0, "only_first": 80.0,
                               "only_second": 20.0}
    table = dep.result()
    assert (table.reachable == 100.0).all()
    # head 1 (previous token): b looks at a (a's arc found from the head), c at b, x at <s> (root), y at x
    assert score(table, "nsubj", 1) == score(table, "obj", 1) == score(table, "dep", 1) == 100.0
    assert score(table, "root", 1) == 50.0  # b looks at a, not at <s>
    assert "<s>" in dep.caveat() and "80.0% have the head first" in dep.caveat()
    # without BOS: no root slot, the 2 root arcs can never be found
    dep = run_probe("dep", decoder_batch(sentences, hand_maps(False), False), causal_context(False), heads=2)
    assert dep.reachable() == {"units": 5, "reachable_units": 3, "reachable": 60.0, "only_first": 40.0,
                               "only_second": 20.0}
    table = dep.result()
    assert score(table, "root", 0, "reachable") == 0.0 and score(table, "root", 0) == score(table, "root", 1) == 0.0
    assert "2 root arcs are counted but can never be found" in dep.caveat()
    assert "without a start token" in dep.meta()["choices_text"]
    # dep.root=none: root arcs not scored, everything left is reachable
    dep = run_probe("dep", decoder_batch(sentences, hand_maps(False), False), causal_context(False), heads=2, root="none")
    assert dep.reachable()["reachable"] == 100.0 and "root" not in set(dep.result().label)
    assert "Root arcs are not scored (dep.root=none)" in dep.caveat()
    # an encoder context: no reachable column, no caveat
    dep = run_probe("dep", decoder_batch(sentences, hand_maps(True), True), ProbeContext(None, {}, "test", CPU), heads=2)
    assert "reachable" not in dep.result() and dep.caveat() is None and "reachable" not in dep.meta()


def test_srl_reachable_by_hand():
    srl = run_probe("srl", decoder_batch(hand_sentences(), hand_maps(True), True), causal_context(True), heads=2)
    assert srl.reachable() == {"units": 2, "reachable_units": 2, "reachable": 100.0, "only_first": 50.0,
                               "only_second": 50.0}  # ARG1 after the predicate, ARG0 before it
    table = srl.result()
    assert (table.reachable == 100.0).all()
    assert score(table, "ARG0", 1) == 100.0  # the predicate b attends back to a
    assert score(table, "ARG1", 1) == 100.0  # c attends back to b
    assert "50.0% lie after their predicate" in srl.caveat()


def test_clark_reachable_baselines_and_empty_rows_by_hand():
    batch = decoder_batch(hand_sentences(), hand_maps(False), False)
    clark = run_probe("clark", batch, causal_context(False), heads=2)
    table = clark.result()
    # nsubj: a -> b, the dependent first: only head->dep can find it
    assert score(table, "nsubj", 0, "reachable", direction="dep->head") == 0.0
    assert score(table, "nsubj", 0, "reachable", direction="head->dep") == 100.0
    # a's row gives no other word any weight: it predicts nothing (the first other word, b, would be a false hit)
    assert score(table, "nsubj", 0, direction="dep->head") == score(table, "nsubj", 1, direction="dep->head") == 0.0
    assert score(table, "nsubj", 1, direction="head->dep") == 100.0  # b attends back to a
    assert score(table, "obj", 1, direction="dep->head") == 100.0  # c attends back to b
    # baselines per direction: nsubj is +1 (only head->dep can use it), obj and dep are -1
    for label, direction, baseline, offset in [("nsubj", "dep->head", 0.0, -3), ("nsubj", "head->dep", 100.0, 1),
                                               ("obj", "dep->head", 100.0, -1), ("obj", "head->dep", 0.0, 1),
                                               ("dep", "dep->head", 100.0, -1)]:
        assert score(table, label, 0, "baseline", direction=direction) == baseline, (label, direction)
        assert score(table, label, 0, "baseline_offset", direction=direction) == offset, (label, direction)
    assert not {"to [CLS]", "to [SEP]"} & set(table.label) and "to punct" in set(table.label)  # no BOS, no end token
    assert clark.meta()["reachable"] == {"arcs": 3, "dep->head": pytest.approx(66.7), "head->dep": pytest.approx(33.3)}
    assert "no start token and no end token" in clark.caveat()
    # the same arcs seen by an encoder: one unrestricted baseline per relation, no reachable column
    encoder = run_probe("clark", batch, ProbeContext(None, {}, "test", CPU), heads=2).result()
    assert "reachable" not in encoder and score(encoder, "nsubj", 0, "baseline", direction="dep->head") == 100.0
    # with BOS the start token is named after it
    with_bos = run_probe("clark", decoder_batch(hand_sentences(), hand_maps(True), True), causal_context(True), heads=2)
    assert "to <s>" in set(with_bos.result().label) and "'to <s>' is the attention to the start token <s>" in with_bos.caveat()


def test_voita_searches_no_later_position():
    # head 1 looks at the previous token; a "next word" head cannot exist, and +offsets are not searched
    sentences = [Sentence(words=list("abcd"), heads=[2, 0, 2, 3], rels=["x", "root", "y", "z"])]
    maps = np.eye(5)[[0, 0, 1, 2, 3]][None, None]  # [1, 1, 5, 5] with BOS
    voita = run_probe("voita", decoder_batch(sentences, maps, True), causal_context(True, corpus={"train": sentences}),
                      heads=1, min_arcs=1)
    row = voita.result().set_index("label").loc["positional"]
    assert row.offset == -1 and row.score == 75.0 and row.found is np.False_  # a looks at <s>: 3 of 4
    assert voita.meta()["positional_offsets"] == [-5, -4, -3, -2, -1, 0]
    assert "next-word heads are n/a" in voita.caveat()


# ---------------------------------------------------------------------- brute force
def causal_one_hot_maps(T: int) -> np.ndarray:
    """``[T!, T, T]``: every attention map whose row t puts all its weight on one token u <= t --
    every argmax pattern a causal head can have."""
    picks = np.array(list(itertools.product(*[range(t + 1) for t in range(T)])))  # [T!, T]
    maps = np.zeros((len(picks), T, T))
    maps[np.arange(len(picks))[:, None], np.arange(T)[None, :], picks] = 1.0
    return maps


def random_tree(n: int, rng: np.random.Generator) -> list[int]:
    """1-based heads of a random (possibly non-projective) tree over ``n`` words, 0 = root."""
    order = rng.permutation(n)
    heads = [0] * n
    for i, word in enumerate(order[1:], 1):
        heads[word] = int(order[rng.integers(i)]) + 1
    return heads


@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
@pytest.mark.parametrize("seed", range(-1, 5))
def test_reachable_shares_match_brute_force_on_random_trees(bos, seed):
    rng = np.random.default_rng(seed + 1)
    n = 3 + seed % 3 if seed >= 0 else 4  # 3..5 words
    # seed -1: the first word's head is the second, the last word's head the first: the first word's row
    # and the last word's column hold no weight on another word, so an argmax would point at a later word
    heads = random_tree(n, rng) if seed >= 0 else [2, 0, 2, 1]
    rels = [f"arc{d}" for d in range(n)]  # one label per arc: a label scores 100 on a head or 0
    spans = sorted({tuple(sorted(rng.choice(n + 1, 2, replace=False).tolist())) for _ in range(4)})
    predicate = int(rng.integers(n))
    arguments = [[(s, e, f"R{s}-{e}") for s, e in spans]]
    sentence = Sentence(words=[f"w{i}" for i in range(n)], heads=heads, rels=rels, predicates=[predicate],
                        arguments=arguments)
    maps = causal_one_hot_maps(n + int(bos))[None]  # [1, patterns, T, T]: one "head" per argmax pattern
    batch = decoder_batch([sentence], maps, bos)
    H, context = maps.shape[1], causal_context(bos)

    for root in ("cls", "none"):
        dep = run_probe("dep", batch, context, H, root=root)
        table = dep.result()
        found = table.groupby("label").score.max() == 100.0  # some causal argmax pattern finds the arc
        reachable = table.groupby("label").reachable.first() == 100.0
        assert found.equals(reachable), (heads, root)
        assert dep.reachable()["reachable"] == pytest.approx(100 * found.mean(), abs=0.05)
        if root == "cls":
            assert found[rels[heads.index(0)]] == bos  # the root arc needs a start token

    clark = run_probe("clark", batch, context, H).result()
    relations = clark[clark.label.isin(rels)]
    found = relations.groupby(["label", "direction"]).score.max() == 100.0
    reachable = relations.groupby(["label", "direction"]).reachable.first() == 100.0
    assert found.equals(reachable), heads
    by_order = {(f"arc{d}", "dep->head"): h < d + 1 for d, h in enumerate(heads) if h}  # root arcs: not Clark's
    assert all(found[key] == value for key, value in by_order.items())

    srl = run_probe("srl", batch, context, H)
    table = srl.result()
    found = table.groupby("label").score.max() == 100.0
    assert found.all() and (table.reachable == 100.0).all()  # each argument, through one direction or both
    only_after = np.mean([predicate < s for s, _ in spans])
    assert srl.reachable()["only_first"] == pytest.approx(100 * only_after, abs=0.05)


@pytest.mark.parametrize("bos", [True, False], ids=["bos", "no-bos"])
def test_no_head_scores_above_the_reachable_share(bos):
    rng = np.random.default_rng(7)
    sentences = [Sentence(words=[f"w{i}" for i in range(n)], heads=random_tree(n, rng), rels=["a", "b"] * 4)
                 for n in (4, 6, 8)]
    for s in sentences:
        s.rels = s.rels[:len(s.words)]
    T = 8 + int(bos)
    logits = rng.normal(size=(3, 6, T, T)) * 3
    logits[..., np.triu_indices(T, 1)[0], np.triu_indices(T, 1)[1]] = -np.inf  # causal mask
    maps = np.exp(logits - logits.max(-1, keepdims=True))
    maps /= maps.sum(-1, keepdims=True)
    batch = decoder_batch(sentences, maps, bos)
    for name in ("dep", "clark"):
        table = run_probe(name, batch, causal_context(bos), 6).result().dropna(subset=["reachable"])
        assert (table.score <= table.reachable + 1e-9).all(), name


# ---------------------------------------------------------------------- real tiny decoders
@pytest.fixture(scope="module")
def decoders(tmp_path_factory) -> dict[str, Path]:
    """Tiny random Llama (BOS first, 2 KV heads) and GPT-2 (no BOS) folders."""
    return {"llama": _save(tmp_path_factory.mktemp("llama"), "llama", 2),
            "gpt2": _save(tmp_path_factory.mktemp("gpt2"), "gpt2", 4)}


@pytest.fixture(scope="module")
def excerpt() -> list[Sentence]:
    sentences = read_conll2012(FIXTURES / "ewt_excerpt.gold_conll")
    attach_conllu(sentences, read_conllu(FIXTURES / "ewt_excerpt.conllu"), FIXTURES / "ewt_excerpt.conllu")
    return sentences


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_fast_probes_match_the_plain_loops_on_decoders(decoders, excerpt, family):
    encoder = GatedEncoder.from_pretrained(str(decoders[family])).eval()
    assert encoder.causal and encoder.pool == "last"
    context = ProbeContext(encoder, {"test": excerpt, "train": excerpt[:5]}, "test", CPU)
    probes = {n: PROBES[n](encoder.num_layers, encoder.num_heads, **({"min_arcs": 3} if n == "voita" else {}))
              for n in PARAMETER_FREE}
    run_probes(probes, context, batch_size=3, log=lambda *_: None)
    slow = []
    for batch in probe_batches(encoder, examples_for(context, "test"), 3, CPU):
        slow += plain.split_batch(batch)
    assert len(slow) >= 4 and any(len(set(r.word_index)) < len(r.word_index) - 1 for r in slow)  # multi-piece words
    frequencies = Counter(w for s in excerpt[:5] for w in s.words)
    start = f"to {'<s>' if family == 'llama' else '[CLS]'}"
    expected = {"dep": plain.plain_dep(slow, causal=True), "srl": plain.plain_srl(slow, causal=True),
                "clark": plain.plain_clark(slow, start_name=start, end_name="to <|endoftext|>", causal=True),
                "voita": plain.plain_voita(slow, frequencies, min_arcs=3, causal=True), "sink": plain.plain_sink(slow),
                **{k: plain.plain_clustering(slow, slow, k, pool="last") for k in ("pos", "ner", "con")}}
    for name, probe in probes.items():
        keys = ("layer", "head", "label", "direction") if name == "clark" else ("layer", "head", "label")
        fast, slow_table = probe.result(), expected[name]
        if "direction" in slow_table:
            fast, slow_table = fast.fillna({"direction": ""}), slow_table.fillna({"direction": ""})
        same_tables(fast, slow_table, keys)
    dep = probes["dep"].result()
    assert (dep[dep.label == "root"].reachable == (100.0 if family == "llama" else 0.0)).all()


def report_of(folder: Path) -> tuple[dict, str]:
    return json.loads((folder / "report.json").read_text()), (folder / "report.md").read_text()


@pytest.fixture
def base(tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [SIZES, "wandb.mode=disabled", "progress=false", "batch_size=8", "report.panels=4", "device=cpu"]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_every_probe_runs_on_a_decoder_through_the_command(decoders, family, base, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(base + [f"model={decoders[family]}", f"out={out}"]) == 0  # every parameter-free probe (the default)
    printed = capsys.readouterr().out
    meta, text = report_of(out)
    assert meta["causal"] is True and meta["first_token"] == ("<s>" if family == "llama" else NO_START_TOKEN)
    assert meta["model_kind"] == "pretrained decoder-only LM"
    assert set(meta["probes"]) == set(PARAMETER_FREE)  # sink added: it reuses the attention maps
    caveats = meta["caveats"]
    assert caveats[0] == CAUSAL_NOTE and any(c.startswith("pos, ner, con: ") for c in caveats)
    assert [c.split(":")[0] for c in caveats[1:]] == ["dep", "srl", "pos, ner, con", "clark", "voita", "sink"]
    assert "## Causal attention: what the numbers mean" in text and "| attention | causal (decoder-only" in text
    for line in caveats:
        assert f"- {line}" in text and f"causal: {line}" in printed
    assert "attention sink:" in printed

    dep = pd.read_csv(out / "dep.csv")
    root = dep[dep.label == "root"]
    if family == "gpt2":  # no BOS: no root slot in the attention grid
        assert (root.reachable == 0).all() and (root.score == 0).all()
        assert meta["probes"]["dep"]["reachable"]["reachable"] < 100 and "can never be found" in caveats[1]
        assert "root arcs counted but never found" in text
    else:
        assert (root.reachable == 100).all() and meta["probes"]["dep"]["reachable"]["reachable"] == 100.0
    assert "reachable" in pd.read_csv(out / "dep_summary.csv") and "reachable" in pd.read_csv(out / "srl_summary.csv")
    assert (pd.read_csv(out / "srl.csv").reachable == 100).all()

    clark = pd.read_csv(out / "clark.csv", keep_default_na=False, na_values=[""])
    relations = clark[clark.direction.notna()]
    assert (relations[relations.direction == "dep->head"].baseline_offset < 0).all()
    assert (relations[relations.direction == "head->dep"].baseline_offset > 0).all()
    totals = relations.groupby(["label", "layer", "head"]).reachable.sum()
    assert np.allclose(totals, 100.0) and (relations.score <= relations.reachable + 1e-9).all()
    specials = set(clark.label) & {"to <s>", "to [CLS]", "to [SEP]", "to <|endoftext|>"}
    assert specials == ({"to <s>"} if family == "llama" else set())

    voita = pd.read_csv(out / "voita.csv", keep_default_na=False, na_values=[""])
    assert (voita[voita.label == "positional"].offset <= 0).all()
    sink = pd.read_csv(out / "sink.csv")
    grid = np.array(meta["attention_sink"]["grid"])
    assert grid.shape == (2, 4) and ((grid >= 0) & (grid <= 100)).all()
    assert np.allclose(grid.reshape(-1), sink.sort_values(["layer", "head"]).score, atol=1e-3)
    assert (out / "sink-sink.png").exists() and "![sink/sink](sink-sink.png)" in text
    assert meta["probes"]["pos"]["pool"] == "last"


def test_encoder_report_has_the_cls_sink_and_no_caveat(tiny_encoder_dir, base, tmp_path):
    out = run(base + [f"model={tiny_encoder_dir}", "probes=dep,clark", f"out={tmp_path / 'bert'}"], log=lambda *_: None)
    meta, text = report_of(out)
    assert meta["causal"] is False and meta["caveats"] == [] and meta["first_token"] == "[CLS]"
    assert meta["attention_sink"]["first_token"] == "[CLS]" and np.array(meta["attention_sink"]["grid"]).shape == (2, 4)
    assert "Causal attention" not in text and "| attention | bidirectional (encoder); first token: [CLS] |" in text
    assert "reachable" not in pd.read_csv(out / "dep.csv") and "reachable" not in pd.read_csv(out / "clark.csv")
    out = run(base + [f"model={tiny_encoder_dir}", "probes=pos", f"out={tmp_path / 'pos'}"], log=lambda *_: None)
    assert "sink" not in report_of(out)[0]["probes"]  # no attention maps captured: no sink, no extra pass


def test_importance_and_ablation_on_a_trained_decoder_run(decoders, base, tmp_path, monkeypatch, capsys):
    from mtl_heads.training.experiment import run as train

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "runs" / "llama-pos"
    train([f"encoder.name={decoders['llama']}", SIZES, "tasks=pos", "train.epochs=1", "train.batch_size=8",
           "wandb.mode=disabled", "train.progress=false", "device=cpu", f"run_dir={folder}"])
    out = tmp_path / "report"
    assert main(base + [f"model={folder}", "probes=importance,ablation,dep", "ablation.ks=[3]",
                        f"out={out}"]) == 0
    printed = capsys.readouterr().out
    meta, text = report_of(out)
    assert meta["model_kind"] == "run" and meta["causal"] is True
    importance = pd.read_csv(out / "importance.csv")
    assert len(importance) == 8 and np.isfinite(importance.score).all() and (importance.score >= 0).all()
    ablation = pd.read_csv(out / "ablation.csv")
    assert len(ablation) == 8 and (out / "ablation_curve.csv").exists()
    line = next(c for c in meta["caveats"] if c.startswith("importance, ablation: "))
    assert "nothing to restrict" in line and f"- {line}" in text and f"causal: {line}" in printed
    assert "reachable" in pd.read_csv(out / "dep.csv")  # the run's gates stay on; the attention probes still run
