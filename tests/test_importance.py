"""Head importance, single-head ablation and the pruning curve on a tiny trained run, checked
against brute force: finite differences through a hand-written hook, and gates closed by hand."""
import pytest
import torch

from mtl_heads.data.batching import collate
from mtl_heads.training.build import load_run
from mtl_heads.analysis.ablation import split_examples
from mtl_heads.model.scoring import task_batches
from probes.importance import (Ablation, Importance, gradient_importance, masked_scores,
                               normalise_per_layer, single_head_ablation)

CLOSED = -30.0  # log_alpha that clamps a Hard Concrete gate to exactly 0


@pytest.fixture(scope="module")
def run_dir(tiny_runs):
    """A 1-epoch POS + NER run on the tiny random encoder (2 layers x 4 heads), 12 dev sentences."""
    return tiny_runs("tasks=pos,ner", "data.demo_sizes={train: 24, dev: 12, test: 4}", "train.epochs=1",
                     "train.batch_size=8", "seed=1", "device=cpu")


@pytest.fixture
def loaded(run_dir):
    return load_run(run_dir)


@pytest.fixture
def examples(loaded):
    return split_examples(loaded, "dev")


def scaled_head_loss(model, task, batch, sentences, layer, head, factor):
    """The batch loss (a scalar tensor) with head ``(layer, head)``'s context multiplied by
    ``factor`` (a float or a tensor), through a hook of our own, independent of the probe's mask."""
    d = model.encoder.head_dim

    def scale(module, args):
        x = args[0]  # [batch, seq, heads * head_dim]
        inside = torch.zeros(x.shape[-1], dtype=torch.bool)
        inside[head * d:(head + 1) * d] = True
        return (torch.where(inside, x * factor, x),)

    handle = model.encoder.out_projs[layer].register_forward_pre_hook(scale)
    try:
        targets = model.tasks[task].targets(sentences, batch["word_mask"].shape[1])
        return model(batch, task, targets)[0]
    finally:
        handle.remove()


def reference_score(model, task, examples) -> float:
    """The task's main metric in one batch, with whatever gates the model has."""
    spec = model.tasks[task]
    batch = collate(examples, model.encoder.tokenizer.pad_token_id)
    metric = spec.metric()
    metric.update(model.decode(batch, task), [spec.gold(e.sentence) for e in examples])
    return metric.compute()[spec.main_metric]


def close(model, heads):
    with torch.no_grad():
        for layer, head in heads:
            model.encoder.gate.log_alpha[layer, head] = CLOSED


@pytest.mark.parametrize("task", ["pos", "ner"])
def test_importance_is_the_mean_abs_batch_gradient(loaded, examples, task):
    model = loaded.model.double()
    batches = task_batches(model, examples[task], batch_size=6)
    assert len(batches) == 2
    importance = gradient_importance(model, task, batches)
    autograd = torch.zeros(2, 4, dtype=torch.float64)     # one backward per head and batch
    finite = torch.zeros(2, 4, dtype=torch.float64)       # central differences
    eps = 0.1  # the decoders compute the loss in float32, so a smaller step drowns in rounding
    for layer in range(2):
        for head in range(4):
            for batch, sentences in batches:
                factor = torch.ones((), dtype=torch.float64, requires_grad=True)
                loss = scaled_head_loss(model, task, batch, sentences, layer, head, factor)
                autograd[layer, head] += torch.autograd.grad(loss, factor)[0].abs() / len(batches)
                with torch.no_grad():
                    up = scaled_head_loss(model, task, batch, sentences, layer, head, 1 + eps).item()
                    down = scaled_head_loss(model, task, batch, sentences, layer, head, 1 - eps).item()
                finite[layer, head] += abs(up - down) / (2 * eps) / len(batches)
    assert autograd.min() > 0
    torch.testing.assert_close(importance, autograd, rtol=1e-5, atol=1e-10)
    torch.testing.assert_close(importance, finite, rtol=2e-2, atol=1e-6)


def test_per_layer_normalisation_gives_unit_rows_and_frame_layout(loaded, examples):
    normed = Importance(normalize_layers=True).run(loaded, examples, batch_size=4)
    raw = Importance(normalize_layers=False).run(loaded, examples, batch_size=4)
    assert list(normed.columns) == ["layer", "head", "label", "score", "count"]
    assert normed.groupby("label").size().to_dict() == {"pos": 8, "ner": 8, "mean": 8}
    assert set(normed["count"][normed.label == "pos"]) == {len(examples["pos"])}
    # float32 scores (the model's) normalised in float32: the norm's squares and sums (gamma_4, halved by
    # the square root), the root and the division leave each within 4 float32 roundings (2**-22) of the
    # exact ratio, more than float64's default tolerance of 2e-7 at 1
    float32_rows = {"rtol": 2 ** -21, "atol": 0}
    for task in ("pos", "ner"):
        grid = torch.tensor(normed[normed.label == task].score.to_numpy()).view(2, 4)
        torch.testing.assert_close(grid.norm(dim=-1), torch.ones(2, dtype=torch.float64), **float32_rows)
        raw_grid = torch.tensor(raw[raw.label == task].score.to_numpy()).view(2, 4)
        torch.testing.assert_close(grid, raw_grid / raw_grid.norm(dim=-1, keepdim=True), **float32_rows)
    mean = (normed[normed.label == "pos"].score.to_numpy() + normed[normed.label == "ner"].score.to_numpy()) / 2
    assert normed[normed.label == "mean"].score.to_numpy() == pytest.approx(mean)
    zero_row = normalise_per_layer(torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64))
    assert zero_row.tolist() == [[0.0, 0.0], [0.6, 0.8]]


def test_ablation_delta_equals_closing_the_gate_by_hand(loaded, examples, run_dir):
    model = loaded.model
    close(model, [(0, 1)])  # already pruned: masking it must change nothing
    batches = {t: task_batches(model, ex, batch_size=5) for t, ex in examples.items()}
    base, deltas = single_head_ablation(model, batches, skip_closed=False)
    _, skipped = single_head_ablation(model, batches, skip_closed=True)
    for task in ("pos", "ner"):
        assert deltas[task][0, 1].item() == 0.0
        assert base[task] == pytest.approx(reference_score(model, task, examples[task]))
        torch.testing.assert_close(skipped[task], deltas[task])
    assert any(deltas[t].abs().sum() > 0 for t in deltas)  # some head matters after training
    for layer, head in [(0, 2), (1, 3)]:
        other = load_run(run_dir).model
        close(other, [(0, 1), (layer, head)])
        for task in ("pos", "ner"):
            expected = reference_score(other, task, examples[task]) - base[task]
            assert deltas[task][layer, head].item() == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("rank_by", ["ablation", "importance"])
def test_pruning_curve_is_nested_and_matches_closed_gates(loaded, examples, run_dir, rank_by):
    probe = Ablation(ks=(1, 3, 6), rank_by=rank_by)
    deltas = probe.run(loaded, examples, batch_size=6)
    curve = probe.curve
    assert list(curve.columns) == ["k", "heads", "label", "metric"]
    assert sorted(set(curve.k)) == [0, 1, 3, 6] and set(curve.label) == {"pos", "ner", "mean"}
    pos = curve[curve.label == "pos"].set_index("k")
    sets = [pos.heads[k] for k in (0, 1, 3, 6)]
    assert [len(s) for s in sets] == [0, 1, 3, 6]
    for small, big in zip(sets, sets[1:]):
        assert big[: len(small)] == small  # the heads masked at k stay masked at larger k
    assert pos.metric[0] == pytest.approx(probe.base["pos"])
    if rank_by == "ablation":  # least harmful single-head ablation first
        mean = deltas[deltas.label == "mean"].sort_values("score", ascending=False, kind="stable")
        assert sets[-1] == [(int(layer), int(head)) for layer, head in zip(mean["layer"][:6], mean["head"][:6])]
    else:  # the first head is the least important one with nothing masked yet
        imp = Importance().run(loaded, examples, batch_size=6)
        first = imp[imp.label == "mean"].sort_values("score", kind="stable").iloc[0]
        assert sets[1] == [(int(first["layer"]), int(first["head"]))]
    other = load_run(run_dir).model
    close(other, sets[2])
    for task in ("pos", "ner"):
        expected = reference_score(other, task, examples[task])
        assert curve[(curve.label == task) & (curve.k == 3)].metric.item() == pytest.approx(expected, abs=1e-9)


def test_gates_hooks_and_mode_are_restored(loaded, examples, run_dir):
    model = loaded.model.train()
    gate, values = model.encoder.gate, model.encoder.gate_values().clone()
    hooks = [len(p._forward_pre_hooks) for p in model.encoder.out_projs]
    Importance(max_sentences=4).run(loaded, examples)
    Ablation(ks=(2,), max_sentences=4).run(loaded, examples)
    assert model.encoder.gate is gate and model.training
    assert torch.equal(model.encoder.gate_values(), values)
    assert [len(p._forward_pre_hooks) for p in model.encoder.out_projs] == hooks
    assert not any(p.grad is not None for p in model.parameters())

    bare = load_run(run_dir, gate="none")  # an encoder without gates gets hooks only while probing
    frame = Importance(max_sentences=4).run(bare, {"pos": examples["pos"]})
    assert (frame.score > 0).all()
    assert bare.model.encoder.gate is None
    assert all(len(p._forward_pre_hooks) == 0 for p in bare.model.encoder.out_projs)


def test_bad_input_is_named(loaded, examples):
    with pytest.raises(ValueError, match="srl"):
        Importance().run(loaded, {"srl": examples["pos"]})
    with pytest.raises(ValueError, match="ks: .*8 open heads"):
        Ablation(ks=(3, 10)).run(loaded, examples)
    with pytest.raises(ValueError, match="rank_by"):
        Ablation(rank_by="random")
    with pytest.raises(ValueError, match="shape"):
        with loaded.model.encoder.mask_heads(torch.ones(3, 4)):
            pass
    with pytest.raises(ValueError, match="no examples"):
        Importance().run(loaded, {"pos": []})
    assert masked_scores(loaded.model, {}, torch.ones(2, 4)) == {}
