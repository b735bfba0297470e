"""A training run from a config: the run folder, ``init=``, data, model, trainer, metrics; and
one run per seed. ``python -m mtl_heads.train`` is the command over :func:`run_seeds`."""
from __future__ import annotations

import copy
import os
import platform
import time
from datetime import datetime
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.training.build import build_encoder, load_run_weights, pick_device
from mtl_heads.training.taskset import build_tasks, read_labels
from mtl_heads.config import ConfigError, load_config, load_saved_config
from mtl_heads.data.batching import prepare_examples
from mtl_heads.data.corpus import cut_note, load_corpus
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.files import atomic_write_text, file_sha256, read_json, write_json
from mtl_heads.model.gate_constants import kept_count
from mtl_heads.model.model import MultiTaskModel
from mtl_heads.training.parallel import check_strategy, make_parallel
from mtl_heads.model.precision import uses_bf16
from mtl_heads.reproducible import DEFAULT_THREADS
from mtl_heads.reproducible import enter as reproducible_mode
from mtl_heads.folders import RUNS, check_run_dir, newest_unfinished_run, seed_dir, setting_stem
from mtl_heads.model.sparsity import Pruning, budget_gap, budget_line, nothing_pruned_line, prune_mode
from mtl_heads.training.plan import RunPlan, strategy
from mtl_heads.training.tracking import Tracker
from mtl_heads.training.trainer import ProcessFacts, Trainer, format_scores, mean_score, seed_everything

# keys that may differ when resuming (everything else must match the saved config); checkpoints
# are the same files under ddp and fsdp, so a run may continue under the other strategy
RESUME_FREE = ("resume", "run_dir", "wandb", "train.progress", "train.strategy", "device", "precision")


def given_keys(overrides: list[str]) -> list[str]:
    """The keys set on the command line (``["tasks", "train.epochs"]`` for ``tasks=pos train.epochs=2``):
    what :func:`apply_init` and a resumed run must not take from elsewhere."""
    return [item.split("=", 1)[0].strip() for item in overrides]


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


# --- run folder -------------------------------------------------------------------------------
def prepare_run_dir(cfg: DictConfig, given: list[str]) -> tuple[DictConfig, Path, bool]:
    """The run folder and the config to run with. A new run gets a fresh folder (an existing
    finished or started run is never overwritten); ``resume=true`` reloads the saved config.
    ``given``: the keys set on the command line (or the ``key=value`` strings themselves)."""
    if cfg.resume:
        run_dir = Path(cfg.run_dir) if cfg.run_dir else newest_unfinished_run()
        saved = run_dir / "config.yaml"
        if not saved.exists():
            raise ConfigError(f"config key 'resume': {run_dir} holds no run (no config.yaml)")
        saved_cfg = load_saved_config(saved)
        _check_resume_overrides(cfg, saved_cfg, given)
        for key in ("wandb", "device", "precision"):
            saved_cfg[key] = cfg[key]
        saved_cfg.train.progress = cfg.train.progress
        if "train.strategy" in given_keys(given):
            saved_cfg.train.strategy = strategy(cfg)  # else the run goes on as it was launched
        return saved_cfg, run_dir, True
    run_dir = Path(cfg.run_dir) if cfg.run_dir else RUNS / f"{setting_stem(cfg.tasks, prune_mode(cfg))}-{datetime.now():%Y%m%d-%H%M%S}"
    if (run_dir / "config.yaml").exists():
        raise ConfigError(f"config key 'run_dir': {run_dir} already holds a run; pass resume=true to continue it "
                          "or choose another run_dir")
    return cfg, run_dir, False


def _check_resume_overrides(cfg: DictConfig, saved: DictConfig, given: list[str]) -> None:
    for key in given_keys(given):
        if key.startswith(RESUME_FREE):
            continue
        if OmegaConf.select(cfg, key) != OmegaConf.select(saved, key):
            raise ConfigError(f"config key '{key}': a resumed run keeps its saved config "
                              f"({key}={OmegaConf.select(saved, key)}); drop this override or start a new run")


# --- starting from a trained run (init=) --------------------------------------------------------
# Sections taken from the init run unless the command line sets them: the model must match its weights.
INHERITED = ("tasks", "encoder.name", "encoder.attn_implementation", "encoder.pool", "encoder.gate_groups", "data",
             "task")


def apply_init(cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """Check the ``prune`` section with ``init`` (:meth:`~mtl_heads.model.sparsity.Pruning.from_config`: static
    pruning needs ``init=``); with ``init=<run>``, copy ``INHERITED`` keys from that run unless they were given
    on the command line. ``tasks`` may be a subset of the run's tasks."""
    Pruning.from_config(cfg)  # a bad prune.* fails here, before the init run is read; the run's plan reads it again
    if not cfg.init:
        return cfg
    saved = load_saved_config(check_run_dir(cfg.init, key="init") / "config.yaml")
    given = given_keys(overrides)
    for key in INHERITED:
        value = OmegaConf.select(saved, key)
        if value is not None and not any(g == key or g.startswith(key + ".") or key.startswith(g + ".") for g in given):
            OmegaConf.update(cfg, key, value, merge=False)
    extra = [t for t in cfg.tasks if t not in saved.tasks]
    if extra:
        raise ConfigError(f"config key 'tasks': {cfg.init} has no decoder for {', '.join(extra)} "
                          f"(its tasks: {', '.join(saved.tasks)})")
    return cfg


def freeze(model: MultiTaskModel, pruning: Pruning) -> None:
    """Static pruning (``pruning``: the run's resolved ``prune`` section): the decoders are frozen, and the
    encoder too with ``prune.freeze_encoder``."""
    if pruning.mode != "static":
        return
    for p in model.decoders.parameters():
        p.requires_grad_(False)
    if pruning.freeze_encoder:
        for p in model.param_groups()["encoder"]:
            p.requires_grad_(False)


def gates_record(encoder: GatedEncoder) -> dict:
    values = encoder.gate_values().cpu()
    record = {"kind": type(encoder.gate).__name__ if encoder.gate is not None else "none",
              "layers": encoder.num_layers, "heads": encoder.num_heads, "values": values.tolist(),
              "kept": kept_count(values),
              "gate_groups": encoder.gate_groups, "kv_heads": encoder.num_kv_heads}  # kv: one gate per KV group
    if hasattr(encoder.gate, "expected_l0"):
        record["expected_l0"] = encoder.gate.expected_l0().detach().cpu().tolist()
    return record


# --- the run ----------------------------------------------------------------------------------
def run(overrides: list[str], on_step: Callable | None = None) -> dict:
    """Train and test as ``overrides`` (``key=value`` strings) say; returns the metrics written to
    ``metrics.json``."""
    return run_config(load_config(overrides), given_keys(overrides), on_step)


def run_config(cfg: DictConfig, given: list[str], on_step: Callable | None = None) -> dict:
    """Train and test with the loaded config ``cfg``, whose keys ``given`` were set by the user;
    returns the metrics written to ``metrics.json`` (``resume=true`` on a finished run: its record, as
    it stands)."""
    rank, world, device = setup_distributed(cfg)
    prepared = None
    if rank == 0:
        if not cfg.resume:
            cfg = apply_init(cfg, given)
        cfg, run_dir, resuming = prepare_run_dir(cfg, given)
        done = read_json(run_dir / "metrics.json") if resuming and (run_dir / "metrics.json").exists() else None
        prepared = (OmegaConf.to_yaml(cfg), str(run_dir), resuming, done)
    if world > 1:  # every rank uses rank 0's run folder and config
        import torch.distributed as dist

        box = [prepared]
        dist.broadcast_object_list(box, src=0)
        text, folder, resuming, done = box[0]
        cfg, run_dir = OmegaConf.create(text), Path(folder)
    log = print if rank == 0 else (lambda *_: None)
    if done is not None:  # resume=true on a finished run: its record stands, as a finished seed is skipped
        log(f"finished already ({run_dir}): nothing trained or scored again; "
            f"python -m mtl_heads evaluate {run_dir} scores it again")
        return done
    if cfg.get("reproducible", False) and cfg.get("threads") is None:  # recorded, so that a rerun uses the same
        cfg.threads = DEFAULT_THREADS
    plan = RunPlan.from_config(cfg, run_dir)  # the config resolved once; the run reads the plan from here on
    check_strategy(plan.strategy, world)  # e.g. fsdp without a distributed launch: before any file is written
    with reproducible_mode(cfg, log) as pins:
        return _train(plan, resuming, (rank, world, device), on_step, pins)


def _train(plan: RunPlan, resuming: bool, where: tuple[int, int, torch.device], on_step: Callable | None,
           pins: dict | None) -> dict:
    """The body of :func:`run_config` once the run folder is known and the config resolved (``plan``): data,
    model, training, metrics. ``where``: (rank, world size, device); ``pins``: reproducible mode's facts
    (``mtl_heads.reproducible.facts``), None when it is off."""
    cfg, run_dir, pruning = plan.cfg, plan.run_dir, plan.pruning
    rank, world, device = where
    log = print if rank == 0 else (lambda *_: None)
    started = time.time()
    # everything that can fail on bad input runs before the run folder is written
    tasks = build_tasks(cfg)
    cuts: dict = {}
    corpus = load_corpus(cfg.data, {layer for task in tasks.values() for layer in task.needs}, cuts=cuts)
    cuts = {role: cut for role, cut in cuts.items() if role != "train"}  # a smaller train split is only a choice
    for role, cut in cuts.items():
        log(f"note: {role} is cut to {cut_note(cut)}: its scores are not comparable with runs scored on "
            f"the whole {role} split")
    seed_everything(cfg.seed)
    encoder = build_encoder(cfg, pruning)
    examples = prepare_examples(corpus, tasks, encoder, cfg.data.long_policy, log,
                                OmegaConf.select(cfg, "data.task_splits", default=None))
    if rank == 0:
        run_dir.mkdir(parents=True, exist_ok=True)
        if not resuming:
            atomic_write_text(run_dir / "config.yaml", OmegaConf.to_yaml(cfg))
    init_labels = read_labels(Path(cfg.init) / "labels.json", tasks) if cfg.init else None
    for name, task in tasks.items():
        if init_labels is not None:  # the init run's decoders predict its label sets
            task.load_labels(init_labels[name])
        else:
            task.fit_labels([e.sentence for e in examples["train"][name]])
    model = MultiTaskModel(encoder, tasks)
    # a resumed run stopped before its first checkpoint starts over, from init= like a new one
    restarts = not resuming or not any((run_dir / name).is_dir() for name in ("checkpoint", "checkpoint.prev"))
    if resuming and restarts:
        log(f"note: {run_dir} has no checkpoint yet (one every train.checkpoint_every={cfg.train.checkpoint_every} "
            "steps and at each epoch end): it starts again from step 0")
    if cfg.init and restarts:  # pruning starts from fresh gates (unless prune.init_gates=init); plain training keeps them
        load_run_weights(model, cfg.init, gate=not pruning.active or pruning.init_gates == "init")
    freeze(model, pruning)
    parallel = make_parallel(plan.strategy, rank, world, device, bf16=uses_bf16(device, cfg.precision))
    tracker = Tracker(plan, enabled=rank == 0)
    trainer = Trainer(model, tasks, examples, plan, tracker, parallel, on_step,  # the Trainer wraps the model
                      ProcessFacts(started, machine_facts(device, world)))
    if resuming and trainer.load_checkpoint():
        log(f"resuming {run_dir} at epoch {trainer.state.epoch + 1}, step {trainer.state.step_in_epoch}")
    elif cfg.init:  # the weights this run starts from, named in its record (a checkpoint carries it on)
        trainer.state.init_weights_sha256 = file_sha256(Path(cfg.init) / "model.safetensors")
    if trainer.sparsity.active:
        target = (f"budget {trainer.sparsity.controller.target} heads" if trainer.sparsity.controller is not None
                  else f"lambda {trainer.sparsity.weight:g}")
        log(f"{pruning.mode} pruning of {encoder.num_layers * encoder.num_heads} heads, {target}")
    log(f"training {', '.join(tasks)} on {device} ({world} process{'es' if world > 1 else ''}"
        f"{', ' + parallel.name if world > 1 else ''}); run folder {run_dir}")
    try:
        trainer.fit()
        metrics = finish(trainer, tasks, cuts, pins)
    finally:
        tracker.finish()
    return metrics


def machine_facts(device: torch.device, processes: int = 1) -> dict:
    """Where a run trained, in its metrics.json: the device (with the GPU's or CPU's name; a CPU's family
    and model numbers too, as a virtual machine's name can be as vague as "AMD EPYC"), torch's CPU threads
    and the vector instructions its CPU kernels use (``cpu_capability``: AVX512, AVX2, ...), the processes,
    and the library versions. Float sums in another order (other threads, another BLAS, wider vectors)
    give other last bits: two one-thread runs on two "AMD EPYC" machines differed so. A retraining that
    does not reproduce its record names these (docs/ewt-study.sh's retrain stage)."""
    import transformers

    facts = {"device": str(device)}
    if device.type == "cuda":
        facts["name"] = torch.cuda.get_device_name(device)
    else:
        cpuinfo = Path("/proc/cpuinfo")
        block = cpuinfo.read_text().split("\n\n", 1)[0] if cpuinfo.exists() else ""  # the first CPU's fields
        first = {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in block.splitlines())}
        facts["name"] = first.get("model name") or platform.processor() or "unknown CPU"
        if "cpu family" in first and "model" in first:
            facts["cpu_model"] = f"family {first['cpu family']} model {first['model']}"
    return {**facts, "threads": torch.get_num_threads(), "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "processes": processes, "torch": str(torch.__version__), "transformers": transformers.__version__,
            "python": platform.python_version()}


def finish(trainer: Trainer, tasks: dict, cuts: dict | None = None, pins: dict | None = None) -> dict:
    """Reload the best checkpoint, evaluate dev and test, write metrics, labels and gates into the run folder
    (the trainer's plan says which, and its process's rank whether this one writes; ``seconds``: the
    run's wall time, every process of a resumed run, whose earlier ones are under ``resumed``). ``cuts``: the
    dev and test splits the config cut (``load_corpus``'s ``cuts``; default none), kept in the metrics
    as ``eval_cut`` and noted beside their scores. ``pins``: reproducible mode's facts (default None: the
    mode is off), kept as ``reproducible``.

    The record names its weights: ``weights_sha256`` (the SHA-256 of ``model.safetensors``), the weights it
    started from (``init_weights_sha256``, with ``init=``) and each checkpoint a process resumed from
    (``resumed_from``: the global step and its weights' SHA-256)."""
    import json

    cfg, run_dir, rank = trainer.plan.cfg, trainer.plan.run_dir, trainer.rank
    best = run_dir / "model.safetensors"
    if trainer._broadcast(best.exists() if rank == 0 else None):
        trainer.restore_weights(best)
    results = {role: trainer.scores(role) for role in ("dev", "test")}  # every process: FSDP's forward needs all
    metrics = {"tasks": list(tasks), "best_epoch": trainer.state.best_epoch, "dev": results["dev"],
               "test": results["test"], "dev_mean": mean_score(results["dev"], trainer.plan.selecting(tasks)),
               "test_mean": mean_score(results["test"], tasks), "history": trainer.state.history,
               "sentences": {role: {t: len(ex) for t, ex in per.items()} for role, per in trainer.examples.items()},
               "seed": cfg.seed, "experiment": cfg.experiment, "prune": trainer.plan.pruning.mode,
               "heads_kept": kept_count(trainer.model.encoder.gate_values()),
               "heads_total": trainer.model.encoder.num_layers * trainer.model.encoder.num_heads,
               "seconds": round(trainer.seconds(), 1), "machine": trainer.machine}
    metrics["reproducible"] = pins if pins is not None else False
    if rank == 0 and best.exists():
        metrics["weights_sha256"] = file_sha256(best)
    if trainer.state.init_weights_sha256:
        metrics["init_weights_sha256"] = trainer.state.init_weights_sha256
    if trainer.state.earlier:  # resumed: each earlier process's seconds and machine (its seconds are in the total)
        metrics["resumed"] = trainer.state.earlier
    if trainer.state.resumed_from:
        metrics["resumed_from"] = trainer.state.resumed_from
    if cuts:
        metrics["eval_cut"] = cuts
    controller = trainer.sparsity.controller
    if controller is not None:  # a head budget: how far the kept count ended from it
        metrics["budget"] = budget_gap(controller.target, metrics["heads_kept"])
    if rank == 0:
        write_json(run_dir / "gates.json", gates_record(trainer.model.encoder))
        atomic_write_text(run_dir / "labels.json", json.dumps({n: t.labels for n, t in tasks.items()}, indent=1))
        write_json(run_dir / "metrics.json", metrics)
        trainer.tracker.summary({f"{role}/{t}/{k}": v for role in ("dev", "test") for t, m in results[role].items()
                                 for k, v in m.items()})
        print(f"{'best' if trainer.select == 'best' else 'last'} epoch {trainer.state.best_epoch}; "
              f"heads kept {metrics['heads_kept']}/{metrics['heads_total']}")
        if "budget" in metrics:
            print(budget_line(metrics["budget"], [r["heads_kept"] for r in trainer.state.history if "heads_kept" in r],
                              cfg))
        elif trainer.sparsity.active and metrics["heads_kept"] == metrics["heads_total"]:  # lambda closed nothing
            print(nothing_pruned_line(trainer.sparsity.weight, metrics["heads_total"], cfg))
        trained_on = tuple(set(tasks) - set(trainer.plan.selecting(tasks)))
        cut = {role: f" [on {cut_note(c)}]" for role, c in (cuts or {}).items()}
        print(f"dev  {format_scores(results['dev'], tasks, trained_on)}{cut.get('dev', '')}")
        print(f"test {format_scores(results['test'], tasks)}{cut.get('test', '')}")
        print(f"run folder: {run_dir}")
    return metrics


def run_seeds(overrides: list[str], on_step: Callable | None = None) -> list[dict]:
    """:func:`run_seeds_config` for ``key=value`` strings."""
    return run_seeds_config(load_config(overrides), given_keys(overrides), on_step)


def run_seeds_config(cfg: DictConfig, given: list[str], on_step: Callable | None = None) -> list[dict]:
    """``seeds=1,2,3``: the same setting once per seed, into ``<experiment folder>/seed<N>``
    (``run_dir``, default ``runs/<experiment>``), all with the same ``experiment`` (W&B group).
    With ``resume=true``, finished seeds are skipped and an unfinished one continues. Without
    ``seeds``, one plain :func:`run_config`. ``cfg`` is the loaded config, ``given`` the keys the
    user set."""
    if not cfg.seeds:
        return [run_config(cfg, given, on_step)]
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise ConfigError(f"config key 'seeds': a seed is listed twice: {list(cfg.seeds)}")
    experiment = cfg.experiment
    if not experiment:  # named by its tasks and prune mode, as the init run gives them where it does
        resolved = apply_init(copy.deepcopy(cfg), given)
        experiment = f"{setting_stem(resolved.tasks, prune_mode(resolved))}-{datetime.now():%Y%m%d-%H%M%S}"
    parent = Path(cfg.run_dir) if cfg.run_dir else RUNS / experiment
    per_seed = ("seed", "seeds", "experiment", "run_dir", "resume")
    results = []
    for seed in cfg.seeds:
        child = seed_dir(parent, seed)
        if cfg.resume and (child / "metrics.json").exists():
            print(f"seed {seed}: finished already ({child})")
            results.append(read_json(child / "metrics.json"))
            continue
        seed_cfg = copy.deepcopy(cfg)
        seed_cfg.seed, seed_cfg.seeds, seed_cfg.experiment = seed, [], experiment
        seed_cfg.run_dir, seed_cfg.resume = str(child), bool(cfg.resume and (child / "config.yaml").exists())
        print(f"=== experiment {experiment}: seed {seed} -> {child}")
        results.append(run_config(seed_cfg, [k for k in given if k not in per_seed] + list(per_seed), on_step))
    return results
