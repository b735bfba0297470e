"""bf16 autocast on CPU: the CUDA code path (``precision=bf16``), proven as far as a CPU can.

- ``mtl_heads.model.precision``: which runs autocast, and ``full_precision`` / ``fp32`` really give fp32
  inside an autocast region (``x.float()`` alone does not, for matmul-like ops);
- every task (NER with both decoders, DEP with both tree algorithms): the loss under CPU bf16
  autocast agrees with the fp32 loss on the same batch and weights, the structured computations
  (CRF / TreeCRF partition functions, MST/Eisner/CKY/Viterbi decoding, cross-entropies over
  spans) ran in fp32 with autocast off, and decoding returns the same kinds of structures;
- the L0 penalty is fp32 and bit-identical under autocast;
- end to end: MTL-5 dynamic pruning trained with ``precision=bf16``, probed, its closed heads removed,
  and the smaller model decoded under bf16.

Tolerance of the loss comparison: ``RTOL = 1e-2``. bf16 keeps 8 significant bits (unit roundoff
2^-9 ~ 2e-3); under autocast every matmul of the encoder and of the decoders' scorers rounds its
output to bf16, and LayerNorm and the sub-word pooling run in bf16 on CPU too, so word vectors and
scores carry a few roundoffs of relative error (~1e-2 at worst per value). A loss averages those
errors over words and spans and is itself computed in fp32, so its relative error stays well
below that: measured 5e-5 .. 5e-4 here (printed by the test), a margin of 20x or more. A
structured computation run in bf16 would show errors of the order of 1e-2 .. 1e-1 (log-sum-exp
over chains and trees of bf16 values), which the dtype checks catch regardless of the tolerance.
"""
from __future__ import annotations

import json
import math
import time

import nltk
import pytest
import torch
from torch import nn

from mtl_heads.config import ConfigError, load_config
from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.corpus import load_corpus
from mtl_heads.model.gating import HardConcreteGate
from mtl_heads.model.model import MultiTaskModel
from mtl_heads.model.precision import autocast, fp32, full_precision, to_fp32, uses_bf16
from mtl_heads.model.sparsity import Sparsity
from mtl_heads.training.build import build_encoder
from mtl_heads.training.taskset import build_tasks
from mtl_heads.data.batching import prepare_examples

RTOL = 1e-2
CPU = torch.device("cpu")


# ---------------------------------------------------------------- the helper
@pytest.mark.parametrize("device, precision, expected", [
    ("cpu", "auto", False), ("cpu", "fp32", False), ("cpu", "bf16", True),
    ("cuda", "auto", True), ("cuda", "fp32", False), ("cuda", "bf16", True),
    (torch.device("cuda", 1), "auto", True),
])
def test_uses_bf16(device, precision, expected):
    assert uses_bf16(device, precision) is expected


def test_unknown_precision_is_a_config_error():
    with pytest.raises(ConfigError, match="'precision'.*fp16"):
        uses_bf16("cpu", "fp16")


def test_autocast_regions():
    x, w = torch.randn(3, 4), torch.randn(4, 2)
    with autocast("cpu", "bf16"):
        assert torch.is_autocast_enabled("cpu") and (x @ w).dtype == torch.bfloat16
        with autocast("cpu", "fp32"):  # fp32 never autocasts, even inside a bf16 region
            assert (x @ w).dtype == torch.float32
    for precision in ("auto", "fp32"):
        with autocast(CPU, precision):
            assert not torch.is_autocast_enabled("cpu") and (x @ w).dtype == torch.float32


def test_float_is_not_enough_full_precision_is():
    x, w = torch.randn(3, 4), torch.randn(4, 4)
    with autocast("cpu", "bf16"):
        y = x @ w  # bf16
        assert (y.float() @ w).dtype == torch.bfloat16  # .float() alone: matmul still drops to bf16
        with full_precision("cpu"):
            assert not torch.is_autocast_enabled("cpu")
            assert (y.float() @ w).dtype == torch.float32
            assert torch.einsum("ij,jk->ik", y.float(), w).dtype == torch.float32
        with full_precision():  # no device named: whichever autocast is on here
            assert (y.float() @ w).dtype == torch.float32
        assert torch.is_autocast_enabled("cpu")  # restored on exit


def test_fp32_decorator_casts_nested_arguments():
    @fp32
    def f(pair, table, n):
        assert not torch.is_autocast_enabled("cpu")
        return pair[0] @ pair[1], table["x"].dtype, table["ids"].dtype, n

    a, b = torch.randn(2, 3).bfloat16(), torch.randn(3, 2)
    with autocast("cpu", "bf16"):
        out, x_dtype, ids_dtype, n = f((a, b), {"x": a, "ids": torch.arange(3)}, 5)
    assert (out.dtype, x_dtype, ids_dtype, n) == (torch.float32, torch.float32, torch.long, 5)
    assert to_fp32(torch.ones(1, dtype=torch.float64)).dtype == torch.float64  # fp64 left alone


# ---------------------------------------------------------------- the tasks
SIZES = "data.demo_sizes={train: 16, dev: 8, test: 8}"
# (label, task, task options): NER with both decoders, DEP with both tree algorithms
CASES = [("pos", "pos", "{}"), ("ner-crf", "ner", "{decoder: crf}"), ("ner-biaffine", "ner", "{decoder: biaffine}"),
         ("dep-mst", "dep", "{decode: mst}"), ("dep-eisner", "dep", "{decode: eisner}"), ("con", "con", "{}"),
         ("srl", "srl", "{}")]


def _model(tiny_encoder_dir, task: str, options: str):
    """A one-task model on the tiny encoder, eval mode, decoder weights re-drawn at random (supar's
    Biaffine starts at zero, which would make every score 0 and the comparison trivial), and a
    batch of 8 training sentences with its targets."""
    cfg = load_config([f"encoder.name={tiny_encoder_dir}", f"tasks=[{task}]", SIZES, f"task.{task}={options}"])
    tasks = build_tasks(cfg)
    corpus = load_corpus(cfg.data, set(tasks[task].needs))
    torch.manual_seed(0)
    encoder = build_encoder(cfg)
    examples = prepare_examples(corpus, tasks, encoder, "skip", lambda *_: None)
    tasks[task].fit_labels([e.sentence for e in examples["train"][task]])
    model = MultiTaskModel(encoder, tasks).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.decoders.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p[0].numel()))
    chunk = examples["train"][task][:8]
    batch = collate(chunk, encoder.tokenizer.pad_token_id)
    targets = tasks[task].targets([e.sentence for e in chunk], batch["word_mask"].shape[1])
    return model, tasks[task], batch, targets, chunk


@pytest.fixture
def records(monkeypatch):
    """Patches the task modules' supar structures and the losses to record, per call, the dtype
    they computed in and whether CPU autocast was on; yields the list of records."""
    import tasks.con
    import tasks.dep
    import tasks.ner

    log: list[dict] = []

    def recording(cls):
        class Recorded(cls):
            def __init__(self, scores, *args, **kwargs):
                super().__init__(scores, *args, **kwargs)
                log.append({"what": cls.__name__, "call": "init", "dtype": scores.dtype,
                            "autocast": torch.is_autocast_enabled("cpu")})

            def forward(self, semiring):
                out = super().forward(semiring)  # log-partition (LogSemiring) or max (MaxSemiring)
                log.append({"what": cls.__name__, "call": semiring.__name__, "dtype": out.dtype,
                            "autocast": torch.is_autocast_enabled("cpu")})
                return out

        Recorded.__name__ = cls.__name__
        return Recorded

    for module, names in ((tasks.ner, ["LinearChainCRF"]), (tasks.con, ["ConstituencyCRF"]),
                          (tasks.dep, ["MatrixTree", "DependencyCRF"])):
        for name in names:
            monkeypatch.setattr(module, name, recording(getattr(module, name)))

    def recording_loss(fn):
        def wrapper(input, *args, **kwargs):
            log.append({"what": fn.__name__, "call": "loss", "dtype": input.dtype,
                        "autocast": torch.is_autocast_enabled("cpu")})
            return fn(input, *args, **kwargs)
        return wrapper

    for name in ("cross_entropy", "binary_cross_entropy_with_logits"):
        monkeypatch.setattr(nn.functional, name, recording_loss(getattr(nn.functional, name)))
    return log


def _same_kind(pred, gold) -> bool:
    """Same structure type and size as the gold one: tag lists of the same length (POS, NER),
    Parses with as many heads and labels (DEP), trees with as many leaves (CON), lists of frames
    ``(predicate, [(start, end, role), ...])`` (SRL)."""
    if type(pred) is not type(gold):
        return False
    if isinstance(pred, nltk.Tree):
        return len(pred.leaves()) == len(gold.leaves())
    if hasattr(pred, "heads"):  # dep Parse
        return len(pred.heads) == len(gold.heads) == len(pred.rels) and all(isinstance(r, str) for r in pred.rels)
    if all(isinstance(x, str) for x in gold):  # tags
        return len(pred) == len(gold) and all(isinstance(x, str) for x in pred)
    return all(isinstance(p, int) and isinstance(args, list)  # srl frames
               and all(isinstance(s, int) and isinstance(e, int) and isinstance(r, str) for s, e, r in args)
               for p, args in pred)


@pytest.mark.parametrize("label, task, options", CASES, ids=[c[0] for c in CASES])
def test_loss_and_decode_under_cpu_bf16_autocast(label, task, options, tiny_encoder_dir, tmp_path, monkeypatch,
                                                 records, record_property):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    model, spec, batch, targets, chunk = _model(tiny_encoder_dir, task, options)

    loss32, _ = model(batch, task, targets)
    records.clear()
    with autocast(CPU, "bf16"):
        loss16, _ = model(batch, task, targets)
    in_loss = list(records)
    loss16.backward()  # the bf16 graph backpropagates (the training step)

    diff = abs(loss16.item() - loss32.item())
    rel = diff / abs(loss32.item())
    print(f"\nbf16 vs fp32 loss [{label}]: fp32 {loss32.item():.6f} bf16 {loss16.item():.6f} "
          f"abs {diff:.3e} rel {rel:.3e}")
    record_property(f"bf16_loss_abs_diff[{label}]", diff)
    record_property(f"bf16_loss_rel_diff[{label}]", rel)
    assert loss16.dtype == torch.float32 and math.isfinite(loss16.item())
    assert loss16.item() != loss32.item()  # bf16 was in effect: an exact match would mean no autocast
    assert loss16.item() == pytest.approx(loss32.item(), rel=RTOL)
    assert all(p.grad is None or torch.isfinite(p.grad).all() for p in model.parameters())

    # every loss and structure inside the autocast region ran in fp32 with autocast off
    assert in_loss  # each task has a cross-entropy or a CRF (NER-CRF: none of the former)
    for r in in_loss:
        assert r["dtype"] == torch.float32 and not r["autocast"], r
    if task in ("ner", "con") and label != "ner-biaffine":  # CRF / TreeCRF log-partition in the loss
        assert [r for r in in_loss if r["call"] == "LogSemiring"], in_loss

    # decoding under autocast: fp32 structures, same kinds of predictions as in fp32
    with torch.no_grad():
        preds32 = model.decode(batch, task)
        records.clear()
        with autocast(CPU, "bf16"):
            preds16 = model.decode(batch, task)
    in_decode = list(records)
    for r in in_decode:
        assert r["dtype"] == torch.float32 and not r["autocast"], r
    if label in ("ner-crf", "con", "dep-mst", "dep-eisner"):
        wanted = {"ner-crf": "LinearChainCRF", "con": "ConstituencyCRF", "dep-mst": "MatrixTree",
                  "dep-eisner": "DependencyCRF"}[label]
        assert any(r["what"] == wanted for r in in_decode), f"{wanted} did not run: {in_decode}"
    golds = [spec.gold(e.sentence) for e in chunk]
    assert len(preds16) == len(preds32) == len(golds)
    for p16, p32, gold in zip(preds16, preds32, golds):
        assert _same_kind(p16, gold) and _same_kind(p32, gold), (p16, p32, gold)
    metric = spec.metric()
    metric.update(preds16, golds)  # the metric accepts them
    assert all(math.isfinite(v) for v in metric.compute().values())


# ---------------------------------------------------------------- the L0 penalty
def test_l0_penalty_is_fp32_under_autocast():
    torch.manual_seed(0)
    gate = HardConcreteGate(3, 4)
    reference = {"penalty": gate.penalty(), "expected_l0": gate.expected_l0(), "values": gate.values()}
    lam = Sparsity(gate, "dynamic", weight=0.01)
    budget = Sparsity(gate, "dynamic", weight=0.0, budget=5)
    with torch.no_grad():
        budget.controller.lambda_1.fill_(0.3)
        budget.controller.lambda_2.fill_(0.7)
    terms = {"lambda": lam.term(), "budget": budget.term()}
    with autocast(CPU, "bf16"):
        got = {"penalty": gate.penalty(), "expected_l0": gate.expected_l0(), "values": gate.values()}
        got_terms = {"lambda": lam.term(), "budget": budget.term()}
        gate.train()
        sample = gate()
    for name, value in {**got, **got_terms, "sample": sample}.items():
        assert value.dtype == torch.float32, name
    for name in reference:
        assert torch.equal(got[name], reference[name]), name  # bit-identical: nothing ran in bf16
    for name in terms:
        assert torch.equal(got_terms[name], terms[name]), name
    got_terms["lambda"].backward()
    assert gate.log_alpha.grad.dtype == torch.float32 and torch.isfinite(gate.log_alpha.grad).all()


def test_gate_multiply_keeps_the_context_dtype(tiny_encoder_dir):
    """Under autocast the o_proj input stays bf16 (the gate is cast to it, not the context to
    fp32), and the gates' gradient reaches log_alpha in fp32."""
    from mtl_heads.model.encoder import GatedEncoder

    encoder = GatedEncoder.from_pretrained(str(tiny_encoder_dir), gate="hard_concrete").train()
    ids = torch.tensor([[101, 2023, 2003, 102]])
    with autocast(CPU, "bf16"):
        out = encoder(ids, torch.ones_like(ids), capture=True)
        out.hidden.float().sum().backward()
    assert out.head_contexts[0].dtype == torch.bfloat16
    assert encoder.gate.log_alpha.grad.dtype == torch.float32 and encoder.gate.log_alpha.grad.abs().sum() > 0


# ---------------------------------------------------------------- end to end
def test_mtl5_dynamic_pruning_bf16_train_probe_remove_decode(tiny_encoder_dir, tmp_path, monkeypatch, capsys):
    """The CI proof of the CUDA path: train MTL-5 with dynamic pruning under precision=bf16 (CPU
    autocast), probe the run under bf16, remove its closed heads and decode with the smaller model
    under bf16."""
    from mtl_heads.commands.probe import run as probe
    from mtl_heads.commands.remove import main as remove_main
    from mtl_heads.training.build import load_removal
    from mtl_heads.training.experiment import run as train

    started = time.perf_counter()
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    calls = []
    forward = MultiTaskModel.forward

    def watched(self, batch, task, targets=None):
        calls.append((self.training, targets is not None, torch.is_autocast_enabled("cpu"),
                      torch.get_autocast_dtype("cpu")))
        return forward(self, batch, task, targets)

    monkeypatch.setattr(MultiTaskModel, "forward", watched)
    run_dir = tmp_path / "mtl5"
    sizes = "data.demo_sizes={train: 24, dev: 8, test: 8}"
    metrics = train([f"encoder.name={tiny_encoder_dir}", sizes, "tasks=pos,ner,dep,con,srl", "prune=dynamic",
                     "precision=bf16", "train.epochs=1", "train.batch_size=8", "train.eval_batch_size=8",
                     "wandb.mode=disabled", "train.progress=false", f"run_dir={run_dir}"])
    steps = [c for c in calls if c[0] and c[1]]
    evals = [c for c in calls if not c[0]]
    assert len(steps) == 15 and evals  # 3 batches x 5 tasks; dev and test decoding
    assert all(c[2] and c[3] == torch.bfloat16 for c in steps + evals), calls  # training and evaluation in bf16
    assert set(metrics["test"]) == {"pos", "ner", "dep", "con", "srl"}
    assert all(math.isfinite(v) for scores in metrics["test"].values() for v in scores.values())
    assert "heads_kept" in metrics["history"][-1]
    monkeypatch.setattr(MultiTaskModel, "forward", forward)

    # probes of the trained run, with the probe command's own precision=bf16
    from mtl_heads.model.encoder import GatedEncoder

    encode, passes = GatedEncoder.forward, []

    def watched_encoder(self, *args, **kwargs):
        passes.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return encode(self, *args, **kwargs)

    monkeypatch.setattr(GatedEncoder, "forward", watched_encoder)
    report = probe([f"model={run_dir}", sizes, "wandb.mode=disabled", "progress=false", "batch_size=8",
                    "report.panels=2", "probes=dep,srl,pos,ner,con,clark,voita,importance", "precision=bf16",
                    "importance.max_sentences=4", f"out={tmp_path / 'report'}"], log=lambda *_: None)
    monkeypatch.setattr(GatedEncoder, "forward", encode)
    assert passes and set(passes) == {(True, torch.bfloat16)}  # every encoder pass of the probes ran in bf16
    meta = json.loads((report / "report.json").read_text())
    assert meta["model_kind"] == "run" and meta["sentences"] == 8 and meta["precision"] == "bf16"
    for name in ("dep", "srl", "pos", "ner", "con", "clark", "voita", "importance"):
        assert (report / f"{name}.csv").exists(), name

    # head removal, then the smaller model decodes every task under bf16
    # threshold 0.5: the gates of a one-epoch run sit around 0.5, so some heads really go
    assert remove_main([str(run_dir), "wandb.mode=disabled", "threshold=0.5"]) == 0
    printed = capsys.readouterr().out
    kept = int(printed.split("heads kept: ")[1].split("/")[0])
    removed = load_removal(run_dir / "removal")
    assert sum(removed.encoder.heads_per_layer) == kept < 8
    from mtl_heads.training.build import load_run

    loaded = load_run(run_dir)
    sentences = load_corpus(load_config([sizes]).data)["dev"]
    examples, _ = tokenize(sentences, removed.encoder.tokenizer, removed.encoder.max_length)
    for name, task in loaded.tasks.items():
        chunk = [e for e in examples if task.usable(e.sentence)]
        batch = collate(chunk, removed.encoder.tokenizer.pad_token_id)
        with autocast(CPU, "bf16"):
            preds = removed.decode(batch, name)
        golds = [task.gold(e.sentence) for e in chunk]
        assert len(preds) == len(golds) and all(_same_kind(p, g) for p, g in zip(preds, golds)), name
        metric = task.metric()
        metric.update(preds, golds)
        assert all(math.isfinite(v) for v in metric.compute().values()), name
    seconds = time.perf_counter() - started
    print(f"\nend-to-end bf16 (train MTL-5 DP, probe, remove, decode): {seconds:.1f} s")
