"""The CUDA path against the CPU path: the same weights and batches on both devices give the same gates,
encoder outputs, task losses, gradients and predictions, the same model with heads removed and the same probe
tables; and a multi-task run trains on CUDA under bf16 autocast. Every test is marked ``cuda``: skipped where
torch sees no CUDA device (tests/conftest.py), run first by ``python bench/gpu_check.py``.

The models are two tiny MTL-5 runs with dynamic pruning trained for one epoch on the CPU (every decoder:
NER's CRF and biaffine, DEP's MST and Eisner), loaded on each device with ``load_run``; the batches are
their own dev sentences (``split_examples``, ``task_batches``).

Tolerances. Both sides compute in float32 (torch leaves TF32 matmuls off by default, which the tests
check), so outputs differ only in the order of float additions: a few units of 1e-7 relative per sum,
1e-5 .. 1e-4 at the end of a tiny encoder and a decoder (``FP32``). Gradients go through more sums and
the CRF/tree log-partitions, so they are compared relative to each tensor's largest entry (``GRAD``).
Predictions must be equal, but where two candidates tie within that rounding (one sentence in ten at
most). Under bf16 autocast (8 significant bits) a loss stays within ``BF16`` (1e-2) of its float32
value, as on the CPU (tests/test_bf16.py)."""
from __future__ import annotations

import copy
import math

import pytest
import torch

from mtl_heads.analysis.ablation import split_examples
from mtl_heads.data.batching import move_to
from mtl_heads.data.corpus import load_corpus
from mtl_heads.model.gating import build_gate
from mtl_heads.model.precision import autocast
from mtl_heads.model.removal import compare_outputs, remove_model_heads
from mtl_heads.model.scoring import task_batches
from mtl_heads.training.build import load_run
from mtl_heads.training.experiment import run as train
from probes import PROBES
from probes.base import ProbeContext, RunProbeAdapter
from probes.importance import Importance
from probes.runner import run_probes

from helpers import same_tables

pytestmark = pytest.mark.cuda

CUDA, CPU = torch.device("cuda"), torch.device("cpu")
FP32 = 1e-4  # largest |difference| of float32 outputs CPU vs CUDA
GRAD = 1e-3  # largest |difference| of a gradient tensor, relative to its largest |entry|
BF16 = 1e-2  # relative difference of a bf16-autocast loss from the float32 one
SIZES = "data.demo_sizes={train: 24, dev: 8, test: 8}"
VARIANTS = {"crf-mst": [], "biaffine-eisner": ["task.ner={decoder: biaffine}", "task.dep={decode: eisner}"]}
PARAMETER_FREE = [n for n, cls in PROBES.items() if not getattr(cls, "needs_run", False)]


@pytest.fixture(scope="module")
def runs(tiny_encoder_dir, tmp_path_factory) -> dict:
    """``{variant: run folder}``: MTL-5 with dynamic pruning, one epoch on the CPU, per ``VARIANTS``."""
    folder = tmp_path_factory.mktemp("cuda-runs")
    out = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MTL_HEADS_CACHE", str(folder / "cache"))
        for name, extra in VARIANTS.items():
            train([f"encoder.name={tiny_encoder_dir}", SIZES, "tasks=pos,ner,dep,con,srl", "prune=dynamic",
                   "train.epochs=1", "train.batch_size=8", "wandb.mode=disabled", "train.progress=false",
                   "device=cpu", f"run_dir={folder / name}", *extra])
            out[name] = folder / name
    return out


def both(run_dir) -> tuple:
    """The run loaded on the CPU and on CUDA (eval mode, the same weights)."""
    return load_run(run_dir, device=CPU), load_run(run_dir, device=CUDA)


def on_both(cpu_run, gpu_run, role: str = "dev") -> dict:
    """``{task: (cpu batches, cuda batches)}``: each task's sentences of ``role``, collated once per device."""
    examples = split_examples(cpu_run, role)
    return {t: (task_batches(cpu_run.model, ex, 8), task_batches(gpu_run.model, ex, 8)) for t, ex in examples.items()}


def loss_and_grads(model, task: str, batch: dict, sentences: list, precision: str = "fp32") -> tuple:
    """``(loss, {parameter: gradient copied to the CPU})`` of one forward and backward of ``task`` on ``batch``
    under ``precision`` (default fp32), the targets built from ``sentences``."""
    device = next(model.parameters()).device
    targets = move_to(model.tasks[task].targets(sentences, batch["word_mask"].shape[1]), device)
    model.zero_grad(set_to_none=True)
    with autocast(device, precision):
        loss, _ = model(batch, task, targets)
    loss.backward()
    grads = {n: p.grad.detach().float().cpu() for n, p in model.named_parameters() if p.grad is not None}
    return loss.item(), grads


def assert_close(a: torch.Tensor, b: torch.Tensor, tolerance: float, what: str) -> None:
    """Assert that ``a`` and ``b`` (any devices and float dtypes) differ by at most ``tolerance`` anywhere."""
    diff = (a.detach().float().cpu() - b.detach().float().cpu()).abs().max().item() if a.numel() else 0.0
    assert diff <= tolerance, f"{what}: max |difference| {diff:.3g} > {tolerance:g}"


def assert_same_predictions(got: list, expected: list, what: str) -> None:
    """Assert that two devices' predictions of one batch agree: all of them but for one sentence in ten at most
    (at least one), where two candidates' scores may tie within float rounding and the argmax fall either way."""
    assert len(got) == len(expected), what
    differ = [i for i, (a, b) in enumerate(zip(got, expected)) if a != b]
    assert len(differ) <= max(1, len(got) // 10), f"{what}: sentences {differ} predicted otherwise"


def test_no_tf32_by_default():
    """Float32 on CUDA means float32: TF32 matmuls (10-bit mantissa) would need bf16-like tolerances."""
    assert not torch.backends.cuda.matmul.allow_tf32
    assert torch.get_float32_matmul_precision() == "highest"


@pytest.mark.parametrize("kind, group_size", [("hard_concrete", 1), ("hard_concrete", 2), ("fixed", 1)])
def test_gates_match_cpu(kind, group_size):
    torch.manual_seed(0)
    kwargs = {"mask": torch.rand(3, 4).round()} if kind == "fixed" else {}
    cpu = build_gate(kind, 3, 4, group_size, **kwargs).eval()
    gpu = copy.deepcopy(cpu).to(CUDA)
    assert_close(cpu.values(), gpu.values(), 1e-6, "deterministic values")
    assert_close(cpu(), gpu(), 1e-6, "eval forward")
    if kind == "hard_concrete":
        assert_close(cpu.penalty(), gpu.penalty(), 1e-5, "expected L0 penalty")
        cpu.penalty().backward()
        gpu.penalty().backward()
        for (name, a), b in zip(cpu.named_parameters(), gpu.parameters()):
            assert_close(a.grad, b.grad, 1e-6, f"gradient of {name}")
        gpu.train()
        with autocast(CUDA, "bf16"):  # sampled in fp32 with autocast off, inside [0, 1]
            sample = gpu()
        assert sample.dtype == torch.float32 and sample.device.type == "cuda"
        assert tuple(sample.shape) == (3, 4) and 0.0 <= sample.min().item() <= sample.max().item() <= 1.0


def test_encoder_matches_cpu(runs):
    """SDPA (a plain pass) and eager attention (``capture=True``: attention maps and gated head contexts)."""
    cpu_run, gpu_run = both(runs["crf-mst"])
    for (batch_cpu, _), (batch_gpu, _) in zip(*on_both(cpu_run, gpu_run)["pos"]):
        real_cpu = batch_cpu["attention_mask"].bool()
        real_gpu = real_cpu.to(CUDA)
        for capture in (False, True):
            with torch.no_grad():
                a = cpu_run.model.encoder(batch_cpu["input_ids"], batch_cpu["attention_mask"], capture=capture)
                b = gpu_run.model.encoder(batch_gpu["input_ids"], batch_gpu["attention_mask"], capture=capture)
            assert_close(a.hidden[real_cpu], b.hidden[real_gpu], FP32, f"last hidden layer (capture={capture})")
            for layer, (x, y) in enumerate(zip(a.head_contexts or (), b.head_contexts or ())):
                assert_close(x[real_cpu], y[real_gpu], FP32, f"gated head contexts of layer {layer}")
            for layer, (x, y) in enumerate(zip(a.attentions or (), b.attentions or ())):
                assert_close(x, y, FP32, f"attention maps of layer {layer}")
        with torch.no_grad(), autocast(CUDA, "bf16"):
            low = gpu_run.model.encoder(batch_gpu["input_ids"], batch_gpu["attention_mask"]).hidden[real_gpu]
        exact = b.hidden[real_gpu]
        assert_close(low.float(), exact, 0.1 * exact.abs().max().item(), "last hidden layer under bf16 autocast")


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_task_losses_gradients_and_predictions_match_cpu(runs, variant):
    cpu_run, gpu_run = both(runs[variant])
    for task, (cpu_batches, gpu_batches) in on_both(cpu_run, gpu_run).items():
        (batch_cpu, sentences), (batch_gpu, _) = cpu_batches[0], gpu_batches[0]
        loss_cpu, grads_cpu = loss_and_grads(cpu_run.model, task, batch_cpu, sentences)
        loss_gpu, grads_gpu = loss_and_grads(gpu_run.model, task, batch_gpu, sentences)
        assert math.isfinite(loss_gpu)
        assert abs(loss_gpu - loss_cpu) <= FP32 * max(1.0, abs(loss_cpu)), (task, loss_cpu, loss_gpu)
        assert grads_cpu.keys() == grads_gpu.keys(), task
        for name, grad in grads_cpu.items():
            assert_close(grads_gpu[name], grad, GRAD * max(grad.abs().max().item(), 1e-6), f"{task}: {name}")
        loss_bf16, _ = loss_and_grads(gpu_run.model, task, batch_gpu, sentences, precision="bf16")
        assert loss_bf16 == pytest.approx(loss_cpu, rel=BF16), task
        for (batch_cpu, _), (batch_gpu, _) in zip(cpu_batches, gpu_batches):
            expected = cpu_run.model.decode(batch_cpu, task)
            assert_same_predictions(gpu_run.model.decode(batch_gpu, task), expected, task)
            with autocast(CUDA, "bf16"):
                assert len(gpu_run.model.decode(batch_gpu, task)) == len(expected), task


def close_heads(model) -> torch.Tensor:
    """Close every other head of ``model``'s Hard Concrete gates (log_alpha -10: gate 0) and open the
    rest (+10: gate 1); returns the ``[layers, heads]`` 0/1 values."""
    with torch.no_grad():
        log_alpha = model.encoder.gate.log_alpha
        log_alpha.fill_(10.0)
        log_alpha.view(-1)[::2] = -10.0
    return model.encoder.gate_values().cpu()


def test_head_removal_on_cuda_matches_the_gated_model_and_the_cpu(runs):
    cpu_run, gpu_run = both(runs["crf-mst"])
    values = close_heads(gpu_run.model)
    assert torch.equal(close_heads(cpu_run.model), values) and 0 < values.sum() < values.numel()
    # on the device of their model
    removed_gpu, removed_cpu = remove_model_heads(gpu_run.model), remove_model_heads(cpu_run.model)
    assert next(removed_gpu.parameters()).device.type == "cuda"
    assert sum(removed_gpu.encoder.heads_per_layer) == int(values.sum())
    batches = on_both(cpu_run, gpu_run)
    for task, (cpu_batches, gpu_batches) in batches.items():
        diffs = compare_outputs(gpu_run.model, removed_gpu, [b for b, _ in gpu_batches])
        assert max(diffs.values()) <= FP32, (task, diffs)  # closed heads add nothing: removing them changes nothing
        for (batch_cpu, _), (batch_gpu, _) in zip(cpu_batches, gpu_batches):
            assert_same_predictions(removed_gpu.decode(batch_gpu, task), removed_cpu.decode(batch_cpu, task), task)


def probe_tables(loaded, corpus: dict, device: torch.device) -> dict:
    """Every parameter-free probe and the gradient importance of ``loaded``'s encoder on ``corpus``'s dev."""
    encoder = loaded.model.encoder
    probes = {n: PROBES[n](encoder.num_layers, encoder.num_heads, device=device) for n in PARAMETER_FREE}
    probes["importance"] = RunProbeAdapter(Importance(), encoder.num_layers, encoder.num_heads, device, batch_size=4)
    run_probes(probes, ProbeContext(encoder, corpus, "dev", device, loaded), batch_size=4, log=lambda *_: None)
    return {name: probe.result() for name, probe in probes.items()}


def test_probes_match_cpu(runs, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(runs["crf-mst"].parent / "cache"))
    cpu_run, gpu_run = both(runs["crf-mst"])
    needs = {layer for name in PARAMETER_FREE for layer in PROBES[name].needs}
    needs |= {layer for task in cpu_run.tasks.values() for layer in task.needs}
    corpus = load_corpus(cpu_run.cfg.data, needs, roles=("train", "dev"))
    cpu, gpu = probe_tables(cpu_run, corpus, CPU), probe_tables(gpu_run, corpus, CUDA)
    for name, table in cpu.items():
        keys = ("layer", "head", "label", "direction") if "direction" in table else ("layer", "head", "label")
        fill = {"direction": ""} if "direction" in table else {}
        same_tables(gpu[name].fillna(fill), table.fillna(fill), keys, atol=1e-3)


def test_mtl5_dynamic_pruning_trains_on_cuda_under_bf16(tiny_encoder_dir, tmp_path, monkeypatch):
    from mtl_heads.analysis.evaluation import Passes, evaluate_trained

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    run_dir = tmp_path / "mtl5"
    metrics = train([f"encoder.name={tiny_encoder_dir}", SIZES, "tasks=pos,ner,dep,con,srl", "prune=dynamic",
                     "train.epochs=2", "train.batch_size=8", "train.checkpoint_every=4", "wandb.mode=disabled",
                     "train.progress=false", "device=cuda", f"run_dir={run_dir}"])
    assert metrics["machine"]["device"].startswith("cuda")
    assert set(metrics["test"]) == {"pos", "ner", "dep", "con", "srl"}
    assert all(math.isfinite(v) for scores in metrics["test"].values() for v in scores.values())
    assert all("heads_kept" in epoch for epoch in metrics["history"])
    for device in ("cuda", "cpu"):  # the run's files load on either device
        again = evaluate_trained(run_dir, split="test", passes=Passes(device=device, batch_size=8),
                                 log=lambda *_: None)["scores"]
        assert again.keys() == metrics["test"].keys(), device
        if device == "cuda":  # the same device and precision: the scores it reported, but for a rare flipped tie
            for task, scores in metrics["test"].items():
                assert again[task] == pytest.approx(scores, abs=1.0), task
