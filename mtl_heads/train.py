"""``python -m mtl_heads.train [key=value ...]``: train a gated single- or multi-task model.

Examples::

    python -m mtl_heads.train tasks=pos,ner                      # MTL on the embedded demo corpus
    python -m mtl_heads.train tasks=pos data=ewt train.epochs=2  # STL on ../shared/data/ewt
    python -m mtl_heads.train run_dir=runs/x resume=true         # continue an interrupted run
    torchrun --nproc_per_node=2 -m mtl_heads.train tasks=pos     # DDP on 2 GPUs (gloo on CPU)

See ``configs/train.yaml`` for every key.
"""
from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, load_config
from mtl_heads.data.batching import tokenize
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.errors import DataError
from mtl_heads.encoder import EncoderNotFound, GatedEncoder
from mtl_heads.model import MultiTaskModel
from mtl_heads.tracking import Tracker
from mtl_heads.trainer import (TrainingError, Trainer, atomic_write_text, format_scores, load_weights,
                               mean_score, seed_everything, write_json)

RUNS = Path("runs")
# keys that may differ when resuming (everything else must match the saved config)
RESUME_FREE = ("resume", "run_dir", "wandb", "train.progress", "device", "precision")


# --- distributed ------------------------------------------------------------------------------
def setup_distributed(cfg: DictConfig) -> tuple[int, int, torch.device]:
    """(rank, world size, device). Under torchrun, joins the process group (NCCL on CUDA, gloo on
    CPU) and picks this process's GPU."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = pick_device(cfg.device)
    if world > 1:
        import torch.distributed as dist

        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        if not dist.is_initialized():
            dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return rank, world, device


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"config key 'device': expected auto, cpu, cuda or cuda:N, got {name!r}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"config key 'device': {name} asked for, but no CUDA device is available")
    return device


# --- run folder -------------------------------------------------------------------------------
def prepare_run_dir(cfg: DictConfig, overrides: list[str]) -> tuple[DictConfig, Path, bool]:
    """The run folder and the config to run with. A new run gets a fresh folder (an existing
    finished or started run is never overwritten); ``resume=true`` reloads the saved config."""
    if cfg.resume:
        run_dir = Path(cfg.run_dir) if cfg.run_dir else newest_unfinished_run()
        saved = run_dir / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"config key 'resume': {run_dir} holds no run (no config.yaml)")
        saved_cfg = OmegaConf.load(saved)
        _check_resume_overrides(cfg, saved_cfg, overrides)
        for key in ("wandb", "device", "precision"):
            saved_cfg[key] = cfg[key]
        saved_cfg.train.progress = cfg.train.progress
        return saved_cfg, run_dir, True
    run_dir = Path(cfg.run_dir) if cfg.run_dir else RUNS / f"{'-'.join(cfg.tasks)}-{datetime.now():%Y%m%d-%H%M%S}"
    if (run_dir / "config.yaml").exists():
        raise ConfigError(f"config key 'run_dir': {run_dir} already holds a run; pass resume=true to continue it "
                          "or choose another run_dir")
    return cfg, run_dir, False


def _check_resume_overrides(cfg: DictConfig, saved: DictConfig, overrides: list[str]) -> None:
    for item in overrides:
        key = item.split("=", 1)[0]
        if key.startswith(RESUME_FREE):
            continue
        if OmegaConf.select(cfg, key) != OmegaConf.select(saved, key):
            raise ConfigError(f"config key '{key}': a resumed run keeps its saved config "
                              f"({key}={OmegaConf.select(saved, key)}); drop this override or start a new run")


def newest_unfinished_run() -> Path:
    candidates = sorted((p for p in RUNS.glob("*") if (p / "config.yaml").exists() and not (p / "metrics.json").exists()),
                        key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise ConfigError("config key 'resume': no unfinished run in runs/; pass run_dir=<folder>")
    return candidates[-1]


# --- building ---------------------------------------------------------------------------------
def build_tasks(cfg: DictConfig) -> dict:
    from tasks import TASKS

    names = list(cfg.tasks)
    if not names:
        raise ConfigError("config key 'tasks': give at least one task, e.g. tasks=pos,ner")
    unknown = [n for n in names if n not in TASKS]
    if unknown:
        raise ConfigError(f"config key 'tasks': unknown task {', '.join(map(repr, unknown))}; known tasks: {', '.join(TASKS)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"config key 'tasks': a task is listed twice: {names}")
    options = cfg.get("task") or {}
    return {n: TASKS[n](OmegaConf.to_container(options[n]) if n in options else {}) for n in names}


def build_encoder(cfg: DictConfig) -> GatedEncoder:
    enc = cfg.encoder
    kwargs = {}
    if enc.gate == "hard_concrete":
        kwargs = {"init_range": enc.gate_init, "init_mean": enc.gate_init_mean}
    elif enc.gate == "fixed":
        kwargs = {"mask": load_gate_mask(enc.gate_mask)}
    try:
        return GatedEncoder.from_pretrained(enc.name, gate=enc.gate, attn_implementation=enc.attn_implementation,
                                            gate_kwargs=kwargs)
    except EncoderNotFound as err:
        raise ConfigError(f"config key 'encoder.name': {err}") from None
    except ValueError as err:  # unknown architecture, slow tokenizer, bad gate kind or mask
        raise ConfigError(f"config key 'encoder' (name={enc.name}, gate={enc.gate}): {err}") from None


def load_gate_mask(value) -> torch.Tensor:
    """A fixed gate mask from the config: a nested list, or a .json / .npy file of [layers, heads]."""
    import json

    import numpy as np

    if value is None:
        raise ConfigError("config key 'encoder.gate_mask': needed for encoder.gate=fixed")
    if isinstance(value, str):
        path = Path(value)
        if not path.exists():
            raise ConfigError(f"config key 'encoder.gate_mask': {value} does not exist")
        data = np.load(path) if path.suffix == ".npy" else json.loads(path.read_text())
        if isinstance(data, dict):  # a run's gates.json
            data = data["values"]
        return torch.tensor(np.asarray(data), dtype=torch.float32)
    return torch.tensor(OmegaConf.to_container(value) if not isinstance(value, list) else value, dtype=torch.float32)


def prepare_examples(corpus: dict, tasks: dict, encoder: GatedEncoder, policy: str, log: Callable) -> dict:
    """``{role: {task: [Example]}}``: each role's sentences tokenised once; each task keeps those
    that carry the layers it needs."""
    examples = {}
    for role, sentences in corpus.items():
        tokenised, report = tokenize(sentences, encoder.tokenizer, encoder.max_length, policy)
        log(f"data {role}: " + "; ".join(report.lines()))
        examples[role] = {}
        for name, task in tasks.items():
            usable = [e for e in tokenised if task.usable(e.sentence)]
            left_out = len(tokenised) - len(usable)
            examples[role][name] = usable
            log(f"  {name}: {len(usable)} sentences" + (f" ({left_out} without the '{'/'.join(task.needs)}' layer left out)" if left_out else ""))
    return examples


def gates_record(encoder: GatedEncoder) -> dict:
    values = encoder.gate_values().cpu()
    record = {"kind": type(encoder.gate).__name__ if encoder.gate is not None else "none",
              "layers": encoder.num_layers, "heads": encoder.num_heads, "values": values.tolist(),
              "kept": int((values >= 1e-3).sum())}
    if hasattr(encoder.gate, "expected_l0"):
        record["expected_l0"] = encoder.gate.expected_l0().detach().cpu().tolist()
    return record


# --- the run ----------------------------------------------------------------------------------
def run(overrides: list[str], on_step: Callable | None = None) -> dict:
    """Train and test as configured; returns the metrics written to ``metrics.json``."""
    cfg = load_config(overrides)
    rank, world, device = setup_distributed(cfg)
    prepared = None
    if rank == 0:
        cfg, run_dir, resuming = prepare_run_dir(cfg, overrides)
        prepared = (OmegaConf.to_yaml(cfg), str(run_dir), resuming)
    if world > 1:  # every rank uses rank 0's run folder and config
        import torch.distributed as dist

        box = [prepared]
        dist.broadcast_object_list(box, src=0)
        text, folder, resuming = box[0]
        cfg, run_dir = OmegaConf.create(text), Path(folder)
    log = print if rank == 0 else (lambda *_: None)
    started = time.time()
    # everything that can fail on bad input runs before the run folder is written
    tasks = build_tasks(cfg)
    corpus = load_corpus(cfg.data, {layer for task in tasks.values() for layer in task.needs})
    seed_everything(cfg.seed)
    encoder = build_encoder(cfg)
    examples = prepare_examples(corpus, tasks, encoder, cfg.data.long_policy, log)
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resuming:
            atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    for name, task in tasks.items():
        task.fit_labels([e.sentence for e in examples["train"][name]])
    model = MultiTaskModel(encoder, tasks, l0_lambda=cfg.encoder.l0_lambda).to(device)
    wrapped = model
    if world > 1:
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if device.type == "cuda" else None, find_unused_parameters=True)
    tracker = Tracker(cfg, run_dir, enabled=rank == 0)
    trainer = Trainer(model, tasks, examples, cfg, run_dir, device, tracker, rank, world, wrapped, on_step)
    if resuming and trainer.load_checkpoint():
        log(f"resuming {run_dir} at epoch {trainer.state.epoch + 1}, step {trainer.state.step_in_epoch}")
    log(f"training {', '.join(tasks)} on {device} ({world} process{'es' if world > 1 else ''}); run folder {run_dir}")
    try:
        trainer.fit()
        metrics = finish(trainer, tasks, cfg, run_dir, rank, started)
    finally:
        tracker.finish()
    return metrics


def finish(trainer: Trainer, tasks: dict, cfg: DictConfig, run_dir: Path, rank: int, started: float) -> dict:
    """Reload the best checkpoint, evaluate dev and test, write metrics, labels and gates."""
    import json

    best = run_dir / "model.safetensors"
    if best.exists():
        load_weights(trainer.model, best)
    results = trainer._broadcast({role: trainer.evaluate(role) for role in ("dev", "test")} if rank == 0 else None)
    metrics = {"tasks": list(tasks), "best_epoch": trainer.state.best_epoch, "dev": results["dev"],
               "test": results["test"], "dev_mean": mean_score(results["dev"], tasks),
               "test_mean": mean_score(results["test"], tasks), "history": trainer.state.history,
               "sentences": {role: {t: len(ex) for t, ex in per.items()} for role, per in trainer.examples.items()},
               "seconds": round(time.time() - started, 1)}
    if rank == 0:
        write_json(run_dir / "gates.json", gates_record(trainer.model.encoder))
        atomic_write_text(run_dir / "labels.json", json.dumps({n: t.labels for n, t in tasks.items()}, indent=1))
        write_json(run_dir / "metrics.json", metrics)
        trainer.tracker.summary({f"{role}/{t}/{k}": v for role in ("dev", "test") for t, m in results[role].items()
                                 for k, v in m.items()})
        print(f"best epoch {trainer.state.best_epoch}")
        print(f"dev  {format_scores(results['dev'], tasks)}")
        print(f"test {format_scores(results['test'], tasks)}")
        print(f"run folder: {run_dir}")
    return metrics


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    try:
        run(argv)
    except (ConfigError, DataError, TrainingError) as err:  # bad input: a message, no traceback
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; continue with resume=true run_dir=<the run folder>", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
