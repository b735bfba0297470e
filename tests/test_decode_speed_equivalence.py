"""The fast decoders give what the previous ones gave: each rewritten structure against supar's own
(ties included: integer scores make many), each decoder's fast path against its plain path
(its previous implementation, :mod:`tasks.plain`), and a five-task model on 50 EWT test sentences
predicting the same layers both ways.

Where the fast path runs a product's sums in another order, float32 values are compared within the
rounding bound of those sums (:func:`conftest.float32_sum_bound`), which holds on any CPU and BLAS,
and float64 ones at 1e-10 (one float32 ulp where the code casts its result to float32)."""
import contextlib
import copy
import random
import warnings

import nltk
import pytest
import torch
from supar.structs import ConstituencyCRF, LinearChainCRF, MatrixTree
from supar.utils.transform import CoNLL

from tasks import TASKS
from tasks.base import biaffine, biaffine_pairs, mlps
from tasks.con import chart_to_tree, cky, span_marginals, tree_to_chart, with_leaves
from tasks.dep import MIN, is_tree, mst
from tasks.ner import viterbi
from tasks.plain import PLAIN_CLASSES, plain_path

from helpers import assert_within, float32_sum_bound

pytestmark = pytest.mark.usefixtures("one_thread")


def scores_with_ties(shape, seed, integer):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(-3, 4, shape, generator=g).float() if integer else torch.randn(shape, generator=g) * 3


@pytest.mark.parametrize("integer", [True, False])
def test_mst_is_supars_matrix_tree(integer):
    lengths = [1, 2, 5, 7, 9, 9]
    seq = 1 + max(lengths)
    mask = torch.tensor([[True] * (1 + n) + [False] * (seq - 1 - n) for n in lengths])
    for trial in range(40):
        s_arc = scores_with_ties((len(lengths), seq, seq), trial, integer)
        if trial % 3 == 0:  # many words want the root: the single-root search runs
            s_arc[:, :, 0] += 4
        s_arc = s_arc.masked_fill(~mask.unsqueeze(1), MIN)
        lens = mask[:, 1:].sum(-1)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = MatrixTree(s_arc.clone(), lens).argmax
        assert torch.equal(mst(MatrixTree(s_arc, lens)), expected), trial


def test_is_tree_is_supars_istree():
    rng = random.Random(0)
    rows, lens = [], []
    for _ in range(3000):
        n = rng.randint(1, 7)
        heads = [rng.randint(0, n) for _ in range(n)]
        if rng.random() < 0.5:  # a tree more often than chance would make one
            order = list(range(1, n + 1))
            rng.shuffle(order)
            heads = [0] * n
            for k, d in enumerate(order[1:], 1):
                heads[d - 1] = order[rng.randrange(k)]
        rows.append([0] + heads + [0] * (7 - n))
        lens.append(n)
    arcs, lens = torch.tensor(rows), torch.tensor(lens)
    for proj in (False, True):
        expected = [CoNLL.istree(row[1:n + 1], proj) for row, n in zip(rows, lens.tolist())]
        assert is_tree(arcs, lens, proj).tolist() == expected


@pytest.mark.parametrize("integer", [True, False])
def test_cky_is_supars_argmax_ties_included(integer):
    lens = torch.tensor([1, 2, 4, 6, 6])
    for trial in range(20):
        s = scores_with_ties((len(lens), 7, 7), trial, integer)
        expected = [[tuple(span) for span in chart] for chart in ConstituencyCRF(s.clone(), lens).argmax]
        assert cky(ConstituencyCRF(s, lens)) == expected


def test_marginals_are_supars_and_mbr_picks_the_same_trees():
    lens = torch.tensor([1, 2, 4, 6, 9, 9])
    for trial in range(20):
        s = scores_with_ties((len(lens), 10, 10), trial, integer=False) * (4 if trial % 2 else 1)  # some saturate
        theirs = ConstituencyCRF(s.clone(), lens).marginals.detach()
        ours = span_marginals(ConstituencyCRF(s, lens))
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
        expected = [[tuple(x) for x in c] for c in ConstituencyCRF(theirs, lens).argmax]
        assert cky(ConstituencyCRF(ours, lens)) == expected  # MBR


@pytest.mark.parametrize("integer", [True, False])
def test_viterbi_is_supars_linear_chain_argmax(integer):
    for trial in range(30):
        scores = scores_with_ties((5, 8, 4), trial, integer)
        trans = scores_with_ties((5, 5), 1000 + trial, integer)
        lens = torch.tensor([1, 3, 8, 5, 8])
        expected = LinearChainCRF(scores.clone(), trans.clone(), lens).argmax
        assert torch.equal(viterbi(LinearChainCRF(scores, trans, lens)), expected)


def test_with_leaves_is_the_copy_and_relabel_it_replaces():
    tree = nltk.Tree.fromstring("(TOP (S (NP (_ 0) (_ 1)) (VP (_ 2) (NP (_ 3))) (_ 4)))")
    words, tags = ["She", "saw", "it", "go", "."], ["PRP", "VBD", "PRP", "VB", "."]
    for given in (tags, None):
        expected = tree.copy(deep=True)
        for i, position in enumerate(expected.treepositions("leaves")):
            expected[position] = words[i]
            if given is not None:
                expected[position[:-1]].set_label(given[i])
        copy, n = with_leaves(tree, words, given)
        assert (copy, n) == (expected, 5) and str(copy) == str(expected)
    assert str(tree) == "(TOP (S (NP (_ 0) (_ 1)) (VP (_ 2) (NP (_ 3))) (_ 4)))"  # left as it was
    assert chart_to_tree(words, tree_to_chart(expected)).leaves() == words


def linear_bound(linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """:func:`float32_sum_bound` of each element of ``linear(x)``: ``in_features`` products and the
    bias summed in any order, so ``in_features + 1`` roundings per term at most."""
    magnitude = x.double().abs() @ linear.weight.double().abs().T + linear.bias.double().abs()
    return float32_sum_bound(magnitude, linear.in_features + 1)


def biaffine_bound(layer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """:func:`float32_sum_bound` of each score of ``layer(x, y)`` for a supar ``Biaffine`` ``layer``
    without ``scale`` (shaped as its output), computed as two matrix products, ``x`` by ``W`` then by
    ``y`` or ``W`` by ``y`` then ``x`` by that (torch.einsum contracts two operands at a time, as the
    fast paths do), each summing in any order: a term ``x_i W_ij y_j`` goes through at most
    ``d_x + bias_x`` roundings in one product and ``d_y + bias_y`` in the other (Higham 2002, lemma 3.3);
    the magnitude is ``|x|^T |W| |y|``, in float64."""
    absolute = copy.deepcopy(layer).double()
    with torch.no_grad():
        absolute.weight.abs_()
    n_x, n_y = layer.weight.shape[1:]                                     # d_x + bias_x, d_y + bias_y
    return float32_sum_bound(biaffine(absolute, x.double().abs(), y.double().abs()), n_x + n_y)


def test_fused_layers_give_the_modules_values():
    """The MLPs fused into one product and the label biaffine with the labels last give the modules'
    values, up to the order of their sums: in float32 within the rounding bound, in float64 to 1e-10."""
    from supar.modules import MLP, Biaffine

    torch.manual_seed(0)
    layers = [MLP(16, 10).eval(), MLP(16, 10).eval(), MLP(16, 4).eval(), MLP(16, 4).eval()]
    x = torch.randn(3, 5, 16)
    for got, layer in zip(mlps(x, layers), layers):  # LeakyReLU is 1-Lipschitz: the linear map's bound holds
        assert_within(got, layer(x), linear_bound(layer.linear, x), "float32 MLP")
    x = x.double()
    for got, layer in zip(mlps(x, [layer.double() for layer in layers]), layers):
        torch.testing.assert_close(got, layer(x), rtol=1e-10, atol=1e-10)
    for n_out, bias_y in ((1, False), (7, True)):
        layer = Biaffine(10, n_out, bias_x=True, bias_y=bias_y)
        torch.nn.init.normal_(layer.weight)
        a, b = torch.randn(3, 5, 10), torch.randn(3, 5, 10)
        assert torch.equal(biaffine(layer, a, b), layer(a, b))  # the same einsum: the same bits
        bound = biaffine_bound(layer, a, b).view(3, n_out, 5, 5).permute(0, 2, 3, 1)
        expected = layer(a, b).view(3, n_out, 5, 5).permute(0, 2, 3, 1)  # labels last
        assert_within(biaffine_pairs(layer, a, b), expected, bound, "float32 label biaffine")
        a, b = a.double(), b.double()
        expected = layer.double()(a, b).view(3, n_out, 5, 5).permute(0, 2, 3, 1)
        torch.testing.assert_close(biaffine_pairs(layer, a, b), expected, rtol=1e-10, atol=1e-10)


def random_decoder(name, options=None, hidden=12, labels=None, seed=0):
    """A task decoder in eval mode with every weight drawn at random (supar's biaffines start at 0)."""
    task = TASKS[name](options or {})
    task.load_labels(labels or [f"L{k}" for k in range(5)])
    decoder = task.build_decoder(hidden).eval()
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0, 0.7)
    return decoder


def both_ways(decoder, words, mask):
    """The decoded outputs of ``decoder``'s fast path, then of its plain path."""
    out = []
    for path in (contextlib.nullcontext(), plain_path(decoder)):
        with path, torch.no_grad():
            out.append(decoder.decode(decoder(words, mask), mask))
    return out


CASES = [("dep", {"decode": "mst"}), ("dep", {"decode": "eisner"}), ("con", {"mbr": True}), ("con", {"mbr": False}),
         ("srl", {"span_ratio": 0.8}), ("srl", {"span_ratio": "off", "max_width": 4}), ("ner", {"decoder": "crf"})]


@pytest.mark.parametrize("name, options", CASES, ids=[f"{n}-{list(o.values())[0]}" for n, o in CASES])
def test_fast_decoding_is_the_plain_decoding(name, options):
    labels = ["B-ORG", "B-PER", "I-ORG", "I-PER", "O"] if name == "ner" else None
    lengths = [1, 2, 3, 6, 9, 12, 12]
    for seed in range(4):
        decoder = random_decoder(name, options, labels=labels, seed=seed)
        seq = max(lengths) + (name == "dep")
        mask = torch.tensor([[True] * (n + (name == "dep")) + [False] * (seq - n - (name == "dep")) for n in lengths])
        words = torch.randn(len(lengths), seq, 12, generator=torch.Generator().manual_seed(seed))
        fast, plain = both_ways(decoder, words, mask)
        assert fast == plain, seed


def test_fast_and_plain_losses_agree():
    """In float64: in float32 the fast label scores (their sums in another order) lie up to 3e-4 from
    supar's, at about 700, so the losses could part by about their default tolerance (9e-4 at 682). The
    loss casts the scores to float32, here doubles 1e-12 apart: the same floats (but for one that
    straddles a rounding boundary: one ulp), and computes in float32."""
    torch.manual_seed(0)
    sentence_words = torch.randn(2, 6, 12).double()
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    con = random_decoder("con").double()
    spans = torch.zeros(2, 7, 7, dtype=torch.bool)
    for b, chart in enumerate([[(0, 6), (0, 2), (0, 1), (1, 2), (2, 6), (2, 3), (3, 6), (3, 4), (4, 6), (4, 5),
                                (5, 6)], [(0, 4), (0, 1), (1, 4), (1, 2), (2, 4), (2, 3), (3, 4)]]):
        for i, j in chart:
            spans[b, i, j] = True
    targets = {"spans": spans, "labels": torch.where(spans, 2, -100)}
    losses = []
    for path in (contextlib.nullcontext(), plain_path(con)):
        with path:
            losses.append(con.loss(con(sentence_words, mask), targets, mask))
    torch.testing.assert_close(losses[0], losses[1])


def test_five_tasks_on_ewt_test_slice_predict_the_same_both_ways(ewt, tiny_encoder_dir):
    """50 EWT test sentences through a five-task model (a small random encoder, random decoders):
    every layer the Predictor writes is the same with the fast decoders and the plain ones."""
    from mtl_heads.data.conll2012 import read_conll2012
    from mtl_heads.model.encoder import GatedEncoder
    from mtl_heads.analysis.inference import Predictor
    from mtl_heads.model.model import MultiTaskModel

    sentences = read_conll2012(ewt / "en_ewt.test.gold_conll")[:50]
    tasks = {name: TASKS[name]() for name in ("pos", "ner", "dep", "con", "srl")}
    for name, task in tasks.items():
        if name == "dep":  # the gold_conll file has no dependencies; any relation names will do
            task.load_labels(["nsubj", "obj", "root", "punct", "det"])
        else:
            task.fit_labels([s for s in sentences if task.usable(s)])
    encoder = GatedEncoder.from_pretrained(str(tiny_encoder_dir))
    torch.manual_seed(0)
    model = MultiTaskModel(encoder, tasks)
    with torch.no_grad():
        for p in model.decoders.parameters():
            p.normal_(0, 0.5)
    predictor = Predictor(model, device="cpu")
    words = [s.words for s in sentences]
    fast = predictor.predict_sentences(words, batch_size=16).sentences
    with plain_path(*model.decoders.values()):
        plain = predictor.predict_sentences(words, batch_size=16).sentences
    for layer in ("pos", "entities", "heads", "rels", "predicates", "arguments"):
        assert [getattr(s, layer) for s in fast] == [getattr(s, layer) for s in plain], layer
    assert [str(s.tree) for s in fast] == [str(s.tree) for s in plain]
    assert sum(len(s.predicates) for s in fast) > 0 and sum(len(a) for s in fast for a in s.arguments) > 0


@pytest.mark.parametrize("n_roles", [1, 4])
@pytest.mark.parametrize("span_ratio", [0.8, None])
def test_srl_role_product_gathered_or_batched_is_the_biaffine(n_roles, span_ratio):
    """The role biaffine of the real predicates, per predicate with its sentence's spans gathered
    (many padding rows) or over the batch (few, or span_ratio=off): the module's values either way,
    up to the order of the sums: in float32 within their rounding bound; from float64 predicates, spans
    and weights (the product's cast to float32 the only rounding left) within one float32 ulp."""
    # 32-wide representations (300 by default): a bound sharp enough that bf16 or fp16 arithmetic
    # fails it (at 300, 602 roundings per term in the worst case add up to about bf16's own error)
    options = {"n_mlp": 32} if span_ratio is not None else {"n_mlp": 32, "span_ratio": "off"}
    decoder = random_decoder("srl", options, labels=[f"A{k}" for k in range(n_roles)])
    assert decoder.span_ratio == span_ratio
    d = decoder.role.n_in
    torch.manual_seed(3)
    preds, spans = torch.randn(3, 4, d), torch.randn(3, 6, d)
    bound = biaffine_bound(decoder.role, preds, spans).view(3, n_roles, 4, 6)
    sparse = torch.tensor([[True, False, False, False], [True, True, False, False], [False] * 4])
    for dtype in (torch.float32, torch.float64):
        decoder.to(dtype)
        preds, spans = preds.to(dtype), spans.to(dtype)
        expected = biaffine(decoder.role, preds, spans).view(3, n_roles, 4, 6)  # [batch, R, P, C]
        for real in (sparse, torch.ones(3, 4, dtype=torch.bool)):               # gathered (with pruning), batched
            with torch.no_grad():
                predicted = decoder._role_product(preds, spans, real)           # prediction: gathers
            trained = decoder._role_product(preds, spans, real).detach()        # training: batched
            b, k = real.nonzero(as_tuple=True)
            pad_b, pad_k = (~real).nonzero(as_tuple=True)
            for got in (predicted, trained):
                assert got.shape == (3, n_roles, 4, 6) and got.dtype == torch.float32
                if dtype == torch.float32:
                    assert_within(got[b, :, k], expected[b, :, k], bound[b, :, k], "float32 role scores")
                else:  # two float32 roundings of doubles ~1e-14 apart: 1 ulp at most (relative 2**-23)
                    torch.testing.assert_close(got[b, :, k], expected[b, :, k].float(), rtol=2 ** -23, atol=1e-10)
                assert not got[pad_b, :, pad_k].any()                            # padding rows are 0


@pytest.mark.parametrize("span_ratio", [0.8, "off"])
def test_fast_and_plain_srl_losses_agree(span_ratio):
    """The SRL loss from the fast forward (predicate representations of the gold predicates only, padding
    rows skipped) and from the plain one (every word's, padding rows computed and ignored), in
    float64 as above."""
    decoder = random_decoder("srl", {"span_ratio": span_ratio, "max_width": 4}).double()
    if span_ratio != "off":
        decoder.unary.float()  # phi_a runs in float32 whatever the decoder's type (see SpanSrlDecoder.forward)
    words = torch.randn(2, 6, 12, generator=torch.Generator().manual_seed(1)).double()
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    roles = torch.zeros(2, 2, 6, 4, dtype=torch.long)  # [batch, predicates, start, width - 1]
    roles[0, 0, 0, 1], roles[0, 0, 3, 2], roles[0, 1, 4, 0], roles[1, 0, 0, 0] = 1, 3, 2, -100
    targets = {"predicates": torch.tensor([[0, 0, 1, 1, 0, 0], [0, 1, 0, 0, 0, 0]]),
               "predicate_index": torch.tensor([[2, 3], [1, 0]]),
               "predicate_mask": torch.tensor([[True, True], [True, False]]), "roles": roles}
    losses = []
    for path in (contextlib.nullcontext(), plain_path(decoder)):
        with path:
            losses.append(decoder.loss(decoder(words, mask), targets, mask))
    assert losses[0] > 0
    torch.testing.assert_close(losses[0], losses[1])


def test_plain_path_swaps_the_decoders_for_the_block_only():
    """Inside ``plain_path`` each decoder with a previous implementation runs it (SRL's forward gives
    every word's ``pred_repr``), the others are left alone; afterwards, and after an error inside, every
    decoder is its production self again, with the same weights."""
    decoders = {name: random_decoder(name, labels=["B-ORG", "I-ORG", "O"] if name == "ner" else None)
                for name in ("pos", "ner", "dep", "con", "srl")}
    production = {name: type(decoder) for name, decoder in decoders.items()}
    weights = {name: {k: v.clone() for k, v in d.state_dict().items()} for name, d in decoders.items()}
    words, mask = torch.randn(2, 5, 12), torch.tensor([[True] * 5, [True] * 3 + [False] * 2])
    assert set(decoders["srl"](words, mask)) >= {"words"} and "pred_repr" not in decoders["srl"](words, mask)
    with plain_path(*decoders.values()):
        for name, decoder in decoders.items():
            assert type(decoder) is PLAIN_CLASSES.get(production[name], production[name]), name
        assert "pred_repr" in decoders["srl"](words, mask) and "words" not in decoders["srl"](words, mask)
    assert {name: type(d) for name, d in decoders.items()} == production
    assert sum(production[name] in PLAIN_CLASSES for name in decoders) == 4  # all but POS (NER is a CRF here)
    with pytest.raises(RuntimeError, match="inside"), plain_path(decoders["dep"]):
        raise RuntimeError("inside")
    assert type(decoders["dep"]) is production["dep"]
    for name, decoder in decoders.items():
        assert not hasattr(decoder, "plain"), name  # no flag left on the production classes
        for key, value in decoder.state_dict().items():
            assert torch.equal(value, weights[name][key]), (name, key)
