"""The training loop: MTL task sampling, AdamW with per-group learning rates, warmup + linear
decay (per phase of ``train.phases``), clipping, dev evaluation per epoch, best checkpoint, atomic
resumable checkpoints."""
from __future__ import annotations

import os
import random
import shutil
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch import nn

from mtl_heads.data.batching import Example, collate, epoch_plan, length_batches, move_to
from mtl_heads.config import ConfigError
from mtl_heads.files import (RefusedFile, UnreadableFile, file_sha256, fsync_dir, load_state, load_tensors, load_weights,
                              save_state, save_tensors)
from mtl_heads.model.gate_constants import kept_count
from mtl_heads.training.parallel import Replicated, training_bytes
from mtl_heads.training.plan import Phase, RunPlan
from mtl_heads.model.precision import autocast, uses_bf16
from mtl_heads.progress import Display, progress_bar, write
from mtl_heads.model.sparsity import sparsity_of


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. the loss became NaN); the message says where and what to try."""


@dataclass
class TrainState:
    """Everything besides tensors that a resumed run needs to carry on exactly."""

    epoch: int = 0            # current epoch (0-based)
    step_in_epoch: int = 0    # steps of the current epoch already done
    global_step: int = 0
    best_score: float = float("-inf")
    best_epoch: int = -1
    history: list = field(default_factory=list)   # one dict per finished epoch
    finished: bool = False
    # the run's time across resumes: the process that wrote the checkpoint (its wall seconds up to it
    # and where it ran, experiment.machine_facts), and the processes before it (one {"seconds",
    # "machine"} each, oldest first); what a process did after its last checkpoint is done again, not counted
    seconds: float = 0.0
    machine: dict = field(default_factory=dict)
    earlier: list = field(default_factory=list)
    # the weights a run read: its init= run's model.safetensors (SHA-256; None without init=), and each
    # checkpoint a process resumed from ({"global_step", "weights_sha256"}, oldest first)
    init_weights_sha256: str | None = None
    resumed_from: list = field(default_factory=list)


@dataclass(frozen=True)
class ProcessFacts:
    """This process of a run, as each checkpoint records it, so that a resumed run's time and machines add up."""

    started: float = field(default_factory=time.time)
    """When this process began the run (``time.time()``; default: when the facts are made), from which its wall
    time is counted."""
    machine: dict = field(default_factory=dict)
    """Where it runs (``experiment.machine_facts``: device, CPU or GPU name, threads, library versions; default
    none given)."""


# --- state ----------------------------------------------------------------------------------
def rng_state() -> dict:
    """Every RNG's state as tensors and plain Python values (no numpy array: the state file is
    read back by the restricted unpickler, see ``mtl_heads.files.load_state``)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {"python": random.getstate(),
            "numpy": {"kind": kind, "keys": keys.tolist(), "pos": int(pos), "has_gauss": int(has_gauss),
                      "cached_gaussian": float(cached)},
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict) -> None:
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["kind"], np.asarray(n["keys"], dtype=np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# --- the loop ---------------------------------------------------------------------------------
class Trainer:
    """Trains a :class:`~mtl_heads.model.model.MultiTaskModel`.

    Args:
        model: the model; the Trainer puts it on the device and wraps or shards it (``parallel.wrap``).
        tasks: ``{name: Task}``.
        examples: ``{role: {task: [Example]}}`` for roles train/dev/test.
        plan: the run's config resolved (:class:`~mtl_heads.training.plan.RunPlan`): its folder, pruning,
            schedule and selection; the ``train`` section's plain values are read from ``plan.cfg``.
        tracker: a :class:`~mtl_heads.training.tracking.Tracker`.
        parallel: the ``train.strategy`` (:mod:`mtl_heads.training.parallel`): this process's rank, the number
            of processes and the device, and how the model is wrapped (DDP or none) or sharded (FSDP).
        on_step: called as ``on_step(trainer)`` after every optimiser step (tests use it to
            interrupt a run). Default None.
        process: when this process began the run and where it runs (:class:`ProcessFacts`; default: now, no
            machine given).
    """

    def __init__(self, model, tasks, examples, plan: RunPlan, tracker, parallel: Replicated,
                 on_step: Callable | None = None, process: ProcessFacts | None = None):
        self.model, self.tasks, self.examples, self.plan = model, tasks, examples, plan
        self.cfg, self.run_dir, self.phases, self.select = plan.cfg, plan.run_dir, plan.phases, plan.select
        self.selecting = plan.selecting(tasks)  # the tasks whose mean dev score selects the epoch
        process = process if process is not None else ProcessFacts()
        self.started, self.machine = process.started, process.machine
        self.parallel, self.tracker, self.on_step = parallel, tracker, on_step
        self.rank, self.world, self.device = parallel.rank, parallel.world, parallel.device
        self.wrapped = parallel.wrap(model)  # to the device; DDP wrapper, or the encoder sharded in place (fsdp)
        self.memory: dict[str, int] | None = None  # training_bytes after the first step of this process
        self.tc = plan.cfg.train
        self.pad_id = model.encoder.tokenizer.pad_token_id
        self.bf16 = uses_bf16(self.device, plan.cfg.precision)  # bf16 autocast (mtl_heads.model.precision): auto = CUDA
        self.state = TrainState()
        self.steps_per_epoch = sum(len(b) for b in self._train_batches(0).values())
        if self.steps_per_epoch == 0:
            raise TrainingError("no training batch: every task has an empty training set (see the data report)")
        self.sparsity = sparsity_of(plan.pruning, model.encoder.gate)
        self.optimizer = self._optimizer()
        self.gate_optimizer = self._gate_optimizer()
        if self.optimizer is None and self.gate_optimizer is None:
            raise TrainingError("nothing to train: every parameter is frozen (see prune.freeze_encoder and encoder.gate)")
        self.scheduler = self._scheduler()
        self.frozen: list[nn.Parameter] = []  # the parameters the current phase does not update (_start_phase)
        self.checkpoint_dir = plan.run_dir / "checkpoint"

    # --- setup ----------------------------------------------------------------------------
    def _optimizer(self) -> torch.optim.Optimizer | None:
        """AdamW over the trainable encoder and decoder weights (warmup + linear decay)."""
        groups = self.model.param_groups()
        lrs = {"encoder": self.tc.lr_encoder, "decoder": self.tc.lr_decoder}
        params = [{"params": trainable, "lr": lrs[g], "weight_decay": self.tc.weight_decay, "name": g}
                  for g in ("encoder", "decoder") if (trainable := [p for p in groups[g] if p.requires_grad])]
        return torch.optim.AdamW(params) if params else None

    def _gate_optimizer(self) -> torch.optim.Optimizer | None:
        """The gates' own Adam at a constant ``train.lr_gate`` (as in the reference scripts), plus
        the budget controller's multipliers (ascending, see ``mtl_heads.model.sparsity``)."""
        groups = [{"params": [p for p in self.model.param_groups()["gate"] if p.requires_grad],
                   "lr": self.tc.lr_gate, "name": "gate"}]
        if self.sparsity.parameters():
            groups.append({"params": self.sparsity.parameters(), "lr": self.plan.pruning.lr_lagrangian,
                           "name": "lagrangian"})
        groups = [g for g in groups if g["params"]]
        return torch.optim.Adam(groups) if groups else None

    def _scheduler(self) -> torch.optim.lr_scheduler.LambdaLR | None:
        """One factor per group of the AdamW (encoder, decoder): in each phase, that phase's rate over
        the group's ``train.lr_*`` times a linear warm-up and decay (:func:`phase_factor`)."""
        if self.optimizer is None:
            return None
        spans = phase_spans(self.phases, self.steps_per_epoch)
        factors = [phase_factor(spans, [p.lr(group["name"]) / group["lr"] for p in self.phases], self.tc.warmup)
                   for group in self.optimizer.param_groups]
        return torch.optim.lr_scheduler.LambdaLR(self.optimizer, factors)

    def phase(self, epoch: int) -> tuple[int, Phase]:
        """``(index, phase)`` of the phase (:attr:`~mtl_heads.training.plan.RunPlan.phases`) that holds ``epoch`` (0-based)."""
        end = 0
        for index, phase in enumerate(self.phases):
            end += phase.epochs
            if epoch < end:
                return index, phase
        return len(self.phases) - 1, self.phases[-1]

    def _start_phase(self, epoch: int) -> None:
        """Set :attr:`frozen` for ``epoch``'s phase (its ``freeze``: the decoders' parameters, whose
        gradients :meth:`_step` drops, so that AdamW neither moves nor decays them), and on rank 0 say so
        when a phase of several begins, or when a resumed process starts inside one (``resumed in phase``).
        Called at every epoch's start, a resumed one too."""
        index, phase = self.phase(epoch)
        self.frozen = list(self.model.decoders.parameters()) if "decoders" in phase.freeze else []
        first = sum(p.epochs for p in self.phases[:index])
        begins = epoch == first and self.state.step_in_epoch == 0
        # this process's first epoch, resumed (its checkpoint's step, the last of resumed_from): inside the phase
        resumed = self.state.resumed_from
        inside = bool(resumed) and self.state.global_step == resumed[-1]["global_step"]
        if len(self.phases) > 1 and (begins or inside) and self.rank == 0:
            epochs = f"epoch {first + 1}" if phase.epochs == 1 else f"epochs {first + 1}-{first + phase.epochs}"
            write(f"{'' if begins else 'resumed in '}phase {index + 1}/{len(self.phases)}, {epochs}: encoder at "
                  f"{phase.lr_encoder:g}, decoders " + ("frozen" if self.frozen else f"at {phase.lr_decoder:g}")
                  + f", gates at {self.tc.lr_gate:g}")

    def _optimizers(self) -> list[torch.optim.Optimizer]:
        return [o for o in (self.optimizer, self.gate_optimizer) if o is not None]

    def _train_batches(self, epoch: int) -> dict[str, list[list[int]]]:
        """Each task's batches for ``epoch`` (this rank's share under DDP). Deterministic in
        (seed, epoch), so a resumed run rebuilds them."""
        rng = random.Random(f"{self.cfg.seed}-batches-{epoch}")
        out = {}
        for name in sorted(self.tasks):
            examples = self.examples["train"][name]
            batches = length_batches([len(e.input_ids) for e in examples], self.tc.batch_size, rng)
            per_rank = len(batches) // self.world
            out[name] = batches[self.rank::self.world][:per_rank]
        return out

    # --- checkpoints ----------------------------------------------------------------------
    def save_checkpoint(self) -> None:
        """Model, optimiser, schedule, RNG and loop state. The new checkpoint is written complete
        into ``checkpoint.tmp`` first; then the current one becomes ``checkpoint.prev`` and the
        new one ``checkpoint``. At any moment a complete checkpoint exists, and the previous one
        is kept as a fallback for a newest one that is later found unreadable.

        Every process calls it: the full state is gathered from all of them under FSDP
        (``mtl_heads.training.parallel``), and each process's RNG state is kept (``rng_ranks``), so that a
        resumed process draws the dropout and gate samples it would have drawn. Rank 0 writes."""
        tmp, prev = self.run_dir / "checkpoint.tmp", self.run_dir / "checkpoint.prev"
        if self.rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir()
        weights = self.parallel.model_state(self.model)
        if self.rank == 0:  # written before the optimiser state is gathered: one full copy in memory at a time
            save_tensors(weights, tmp / "model.safetensors")
        del weights
        optimizer = self.parallel.optimizer_state(self.model, self.optimizer) if self.optimizer is not None else None
        rngs = self._gather(rng_state())
        if self.rank != 0:
            return
        self.state.seconds, self.state.machine = round(time.time() - self.started, 1), self.machine
        save_state({"optimizer": optimizer, "gate_optimizer": _state(self.gate_optimizer),
                    "scheduler": _state(self.scheduler), "sparsity": self.sparsity.state_dict(),
                    "rng": rngs[0], "rng_ranks": rngs, "state": asdict(self.state)}, tmp / "state.pt")
        fsync_dir(tmp)
        if self.checkpoint_dir.exists():
            shutil.rmtree(prev, ignore_errors=True)
            os.replace(self.checkpoint_dir, prev)
        os.replace(tmp, self.checkpoint_dir)
        fsync_dir(self.run_dir)

    def load_checkpoint(self, log: Callable = print) -> bool:
        """Restore the newest readable checkpoint of the run folder; False when the run has none.

        An unreadable newest checkpoint (truncated, empty, not ours) is reported and the previous
        one (``checkpoint.prev``) is used; when neither can be read, :class:`TrainingError` says
        so for each. A state file that holds code is refused outright (:class:`UnreadableFile`):
        the folder is not what mtl-heads wrote, and no fallback is tried.

        Without FSDP every process reads the files. Under FSDP rank 0 alone reads and checks them
        (a whole copy of a large model per process would not fit); its verdict, the small state and,
        through the sharded loaders, the tensors go to the others."""
        if not self.parallel.sharded:
            found = self._read_checkpoint(log)
            if found is not None:
                self._restore(*found)
            return found is not None
        found = self._on_rank0(lambda: self._checked(self._read_checkpoint(log)))
        head = self._broadcast((str(found[0]), {k: v for k, v in found[1].items() if k != "optimizer"})
                               if found is not None else None)
        if head is None:
            return False
        folder, blob = Path(head[0]), head[1]
        blob["optimizer"] = found[1]["optimizer"] if found is not None else None
        self._restore(folder, blob, found[2] if found is not None else {})
        return True

    def _read_checkpoint(self, log: Callable) -> tuple[Path, dict, dict] | None:
        """``(folder, state, weights)`` of the newest readable checkpoint; None when there is none."""
        folders = [f for f in (self.checkpoint_dir, self.run_dir / "checkpoint.prev") if f.exists()]
        if not folders:
            return None
        problems = []
        for folder in folders:
            try:
                blob = load_state(folder / "state.pt")
                weights = load_tensors(folder / "model.safetensors")
            except RefusedFile:
                raise
            except UnreadableFile as err:
                problems.append(str(err))
                log(f"warning: checkpoint {folder} is unreadable: {err}")
                continue
            if problems:
                log(f"warning: resuming from the previous checkpoint {folder} instead")
            blob["weights_sha256"] = file_sha256(folder / "model.safetensors")  # what this process resumes from
            return folder, blob, weights
        raise TrainingError("no readable checkpoint to resume from: " + "; ".join(problems)
                            + (" (and no previous checkpoint)" if len(folders) == 1 else "")
                            + f". Start a new run, or delete {self.run_dir / 'checkpoint*'} to restart this one from scratch")

    def _checked(self, found: tuple[Path, dict, dict] | None) -> tuple[Path, dict, dict] | None:
        """``found`` when it fits this run's model and optimisers, else :class:`TrainingError`: under
        FSDP the loaders are collectives, so a misfit must be found by rank 0 before they start."""
        if found is None:
            return None
        folder, blob, weights = found
        missing = [k for k in ("optimizer", "gate_optimizer", "scheduler", "rng", "state") if k not in blob]
        problem = (f"no {missing[0]!r} entry" if missing else
                   self.parallel.misfit(self.model, self.optimizer, weights, blob["optimizer"]))
        if problem:
            raise TrainingError(f"{folder}: the checkpoint does not fit this run's model and config ({problem}); "
                                "was the run folder's config.yaml edited?")
        return found

    def _restore(self, folder: Path, blob: dict, weights: dict) -> None:
        """Put a read checkpoint into the model, optimisers and loop state."""
        try:
            self.parallel.load_model_state(self.model, weights)
            if self.optimizer is not None:
                self.parallel.load_optimizer_state(self.model, self.optimizer, blob["optimizer"])
            for name in ("gate_optimizer", "scheduler"):
                if getattr(self, name) is not None:
                    getattr(self, name).load_state_dict(blob[name])
            self.sparsity.load_state_dict(blob.get("sparsity", {}))
            ranks = blob.get("rng_ranks")  # absent in checkpoints written before it, or of another world size
            set_rng_state(ranks[self.rank] if isinstance(ranks, list) and len(ranks) == self.world else blob["rng"])
            saved = TrainState(**blob["state"])  # its writer joins the earlier processes (older files: none)
            earlier = saved.earlier + ([{"seconds": saved.seconds, "machine": saved.machine}] if saved.seconds else [])
            resumed = saved.resumed_from + [{"global_step": saved.global_step, "weights_sha256": blob.get("weights_sha256")}]
            self.state = replace(saved, earlier=earlier, seconds=0.0, machine={}, resumed_from=resumed)
        except (KeyError, TypeError, ValueError, RuntimeError) as err:
            detail = str(err).strip().splitlines()[-1][:300] if str(err).strip() else type(err).__name__
            raise TrainingError(f"{folder}: the checkpoint does not fit this run's model and config ({detail}); "
                                "was the run folder's config.yaml edited?") from None

    def restore_weights(self, path: Path) -> None:
        """Load a weights file written by this run (the selected epoch's ``model.safetensors``) into
        the model of every process; under FSDP rank 0 reads it and the shards are filled by broadcast."""
        if not self.parallel.sharded:
            load_weights(self.model, path)
            return

        def read() -> dict:
            weights = load_tensors(path)
            problem = self.parallel.misfit(self.model, None, weights, None)
            if problem:
                raise UnreadableFile(f"{path}: the weights do not fit the model: {problem}")
            return weights

        self.parallel.load_model_state(self.model, self._on_rank0(read))

    def _on_rank0(self, fn: Callable):
        """``fn()`` run by rank 0 alone; the ConfigError or TrainingError it raises (a bad file, no
        readable checkpoint) is raised on every process, so that none waits in a collective for
        the others. Returns ``fn()``'s result on rank 0, None on the others."""
        if self.world == 1:
            return fn()
        result, error = None, None
        if self.rank == 0:
            try:
                result = fn()
            except (ConfigError, TrainingError) as err:
                error = err
        error = self._broadcast(error)
        if error is not None:
            raise error
        return result

    # --- training -------------------------------------------------------------------------
    def seconds(self) -> float:
        """The run's wall seconds so far: this process's since ``started``, plus the earlier processes' (a
        resumed run) up to their last checkpoints."""
        return time.time() - self.started + sum(part["seconds"] for part in self.state.earlier)

    def fit(self) -> TrainState:
        try:
            while self.state.epoch < self.tc.epochs and not self._patience_spent():
                self._train_epoch()
                self._end_epoch()
        except KeyboardInterrupt:  # Ctrl-C: where the run can go on from, said with its folder
            if self.rank == 0:
                write(f"interrupted at epoch {self.state.epoch + 1}, step {self.state.step_in_epoch}. "
                      + self._checkpoint_note())
            raise
        return self.state

    def _patience_spent(self) -> bool:
        """``train.patience`` epochs have gone by without a better mean dev score (with ``select=best``):
        training stops early, its best epoch kept (``train.epochs`` is the cap)."""
        patience = self.tc.get("patience")
        if not patience or self.select != "best" or self.state.best_epoch < 1:
            return False
        if self.state.epoch - self.state.best_epoch >= patience:
            if self.rank == 0:
                write(f"stopped after epoch {self.state.epoch}: no better dev score for {patience} epochs "
                      f"(the best: epoch {self.state.best_epoch})")
            return True
        return False

    def _train_epoch(self) -> None:
        epoch = self.state.epoch
        self._start_phase(epoch)
        plan = epoch_plan(self._train_batches(epoch), self.tc.sampling_alpha,
                          random.Random(f"{self.cfg.seed}-plan-{epoch}"))
        self.model.train()
        # on a terminal a bar that vanishes at the epoch's end; in a log, a few plain lines and the epoch's own
        bar = progress_bar(total=len(plan), initial=self.state.step_in_epoch, desc=f"epoch {epoch + 1}/{self.tc.epochs}",
                           disable=self.rank != 0 or not self.tc.progress, display=Display(summary=True))
        for task, batch_ids in plan[self.state.step_in_epoch:]:
            loss = self._step(task, [self.examples["train"][task][i] for i in batch_ids])
            if self.memory is None:
                self._report_memory()
            self.state.step_in_epoch += 1
            self.state.global_step += 1
            bar.set_postfix(task=task, loss=f"{loss:.3f}")  # first: a plain line written by update shows this step
            bar.update(1)
            if self.state.global_step % 20 == 0:
                self.tracker.log({f"train/loss/{task}": loss, **self._train_stats()}, step=self.state.global_step)
            if self.tc.checkpoint_every and self.state.global_step % self.tc.checkpoint_every == 0:
                self.save_checkpoint()
            if self.on_step is not None:
                self.on_step(self)
        bar.close()

    def _step(self, task: str, examples: list[Example]) -> float:
        batch = collate(examples, self.pad_id, self.device)
        targets = self.tasks[task].targets([e.sentence for e in examples], batch["word_mask"].shape[1])
        targets = move_to(targets, self.device)
        with autocast(self.device, self.cfg.precision):
            loss, _ = self.wrapped(batch, task, targets)
        penalty = self.sparsity.term()  # outside autocast: gate statistics stay in fp32
        if penalty is not None:
            loss = loss + penalty
        if not torch.isfinite(loss):
            raise TrainingError(
                f"the loss of task '{task}' is {loss.item()} at epoch {self.state.epoch + 1}, step "
                f"{self.state.step_in_epoch + 1}; stopping. {self._checkpoint_note()} "
                f"Try a lower learning rate (train.lr_encoder={self.tc.lr_encoder}, train.lr_decoder={self.tc.lr_decoder}) "
                f"or gradient clipping (train.clip={self.tc.clip}).")
        for optimizer in self._optimizers():
            optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.parallel.sync_grads(self.model)  # FSDP: the replicated gates and decoders (DDP: done in backward)
        for p in self.frozen:  # a phase's frozen parameters: no gradient, so no update, no decay, no part in clipping
            p.grad = None
        if self.tc.clip:
            self.parallel.clip_grad_norm([p for p in self.model.parameters() if p.requires_grad], self.tc.clip)
        for optimizer in self._optimizers():
            optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        return loss.item()

    def _report_memory(self) -> None:
        """Record (and on rank 0 print) what this process holds for training after its first step:
        parameters, gradients and optimiser state (``mtl_heads.training.parallel.training_bytes``)."""
        self.memory = training_bytes(self.model, self._optimizers())
        if self.rank == 0:
            mb = {k: f"{v / 2**20:.1f} MB" for k, v in self.memory.items()}
            how = self.parallel.name if self.world > 1 else "one process"
            write(f"training memory of rank 0 ({how}): parameters {mb['parameters']}, gradients "
                  f"{mb['gradients']}, optimiser state {mb['optimizer']}")

    def _checkpoint_note(self) -> str:
        """Where a stopped run can be resumed from, for messages."""
        if self.checkpoint_dir.exists():
            return (f"The last good checkpoint is in {self.checkpoint_dir}; continue with: "
                    f"python -m mtl_heads train resume=true run_dir={self.run_dir}")
        return (f"No checkpoint was written yet (one every train.checkpoint_every={self.tc.checkpoint_every} "
                f"steps and at each epoch end), so resume=true run_dir={self.run_dir} would start it again from step 0.")

    def _train_stats(self) -> dict[str, float]:
        """Learning rate and, when pruning, the expected number of open heads and the multipliers."""
        stats = {"train/lr": self.scheduler.get_last_lr()[0]} if self.scheduler is not None else {}
        if self.sparsity.active:
            stats["prune/expected_heads"] = self.sparsity.expected_heads()
            stats["prune/kept_heads"] = kept_count(self.model.encoder.gate_values())
            if self.sparsity.controller is not None:
                stats["prune/lambda_1"] = self.sparsity.controller.lambda_1.item()
                stats["prune/lambda_2"] = self.sparsity.controller.lambda_2.item()
        return stats

    def _end_epoch(self) -> None:
        scores = self.scores("dev")
        mean = mean_score(scores, self.selecting)
        record = {"epoch": self.state.epoch + 1, "dev": scores, "dev_mean": mean}
        kept = kept_count(self.model.encoder.gate_values())
        if self.sparsity.active:
            record["heads_kept"] = kept
            record["expected_heads"] = round(self.sparsity.expected_heads(), 2)
        self.state.history.append(record)
        improved = mean > self.state.best_score if self.select == "best" else True
        if improved:
            self.state.best_score, self.state.best_epoch = mean, self.state.epoch + 1
            weights = self.parallel.model_state(self.model)  # every process: a gather under FSDP
            if self.rank == 0:
                save_tensors(weights, self.run_dir / "model.safetensors")
        if self.rank == 0:
            flat = {f"dev/{t}/{k}": v for t, m in scores.items() for k, v in m.items()}
            self.tracker.log({**flat, "dev/mean": mean, "epoch": self.state.epoch + 1}, step=self.state.global_step)
            self.tracker.log_gates(self.model.encoder.gate_values().cpu(), step=self.state.global_step)
            trained_on = tuple(set(self.tasks) - set(self.selecting))
            write(f"epoch {self.state.epoch + 1}: dev " + format_scores(scores, self.tasks, trained_on)
                  + f" | mean {mean:.2f}" + (f" | heads kept {kept}" if self.sparsity.active else "")
                  + (f" (budget {self.sparsity.controller.target})" if self.sparsity.controller is not None else "")
                  + (" (best)" if improved and self.select == "best" else ""))
        self.state.epoch += 1
        self.state.step_in_epoch = 0
        self.save_checkpoint()

    def _broadcast(self, obj):
        """Rank 0's ``obj`` on every process."""
        if self.world == 1:
            return obj
        import torch.distributed as dist

        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def _gather(self, obj) -> list:
        """Every process's ``obj``, in rank order, on every process."""
        if self.world == 1:
            return [obj]
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    # --- evaluation -----------------------------------------------------------------------
    def scores(self, role: str) -> dict[str, dict[str, float]]:
        """:meth:`evaluate` on ``role`` as every process gets it. A sharded model's forward pass
        needs every process, so under FSDP all of them evaluate the whole split (the same batches
        in the same order, hence the same scores; rank 0's are broadcast so that all hold its exact
        floats). Otherwise rank 0 evaluates alone and broadcasts."""
        if self.parallel.sharded:
            return self._broadcast(self.evaluate(role))
        return self._broadcast(self.evaluate(role) if self.rank == 0 else None)

    @torch.no_grad()
    def evaluate(self, role: str) -> dict[str, dict[str, float]]:
        """Metrics of every task on ``role`` (dev or test) with the current weights."""
        results = evaluate_examples(self.model, self.tasks, self.examples[role], self.device, self.cfg.precision,
                                    self.tc.eval_batch_size, progress=self.rank == 0 and self.tc.progress, desc=role)
        self.model.train()
        return results


@torch.no_grad()
def evaluate_examples(model, tasks: dict, examples: dict, device: torch.device, precision: str = "auto",
                      batch_size: int = 64, progress: bool = False, desc: str = "") -> dict[str, dict[str, float]]:
    """Each task's metrics on its examples, the model in eval mode: training's dev/test scores and
    ``python -m mtl_heads evaluate`` come from here.

    Args:
        model: a ``MultiTaskModel`` on ``device``.
        tasks: ``{name: Task}``; examples: ``{name: [Example]}`` (``prepare_examples``' per-role dict).
        precision: ``auto | fp32 | bf16`` (see ``mtl_heads.model.precision``); batch_size: sentences per batch.
        progress, desc: a progress bar per task, labelled ``"{desc} {task}"``.

    Returns: ``{task: {metric: value}}`` (plain Python numbers); ``{}`` for a task without examples.
    """
    model.eval()
    pad_id = model.encoder.tokenizer.pad_token_id
    results = {}
    for name, task in sorted(tasks.items()):
        chunk_of = examples.get(name, [])
        metric = task.metric()
        batches = length_batches([len(e.input_ids) for e in chunk_of], batch_size)
        for ids in progress_bar(batches, desc=f"{desc} {name}".strip(), disable=not progress):
            chunk = [chunk_of[i] for i in ids]
            batch = collate(chunk, pad_id, device)
            with autocast(device, precision):
                preds = model.decode(batch, name)
            metric.update(preds, [task.gold(e.sentence) for e in chunk])
        # plain Python numbers: seqeval's are numpy scalars, which the checkpoint's history would
        # carry into state.pt, where the restricted unpickler refuses them on resume
        scores = metric.compute() if chunk_of else {}
        results[name] = {k: v.item() if hasattr(v, "item") else v for k, v in scores.items()}
    return results


def phase_spans(phases: tuple[Phase, ...], steps_per_epoch: int) -> list[tuple[int, int]]:
    """``(first step, steps)`` of each phase (``phases``: :attr:`~mtl_heads.training.plan.RunPlan.phases`) when
    every epoch has ``steps_per_epoch`` optimiser steps."""
    spans, start = [], 0
    for phase in phases:
        spans.append((start, phase.epochs * steps_per_epoch))
        start += spans[-1][1]
    return spans


def phase_factor(spans: list[tuple[int, int]], rates: list[float], warmup: float) -> Callable[[int], float]:
    """The learning-rate factor of one parameter group at each step (for ``LambdaLR``, which multiplies the
    group's base rate by it).

    Args:
        spans: ``(first step, steps)`` of each phase (:func:`phase_spans`).
        rates: per phase, its rate over the group's base rate (1.0 where the phase keeps the base rate).
        warmup: the fraction of a phase's steps with a linear warm-up (``train.warmup``); then a linear
            decay to 0 at the phase's end. Past the last phase the factor is 0.

    One phase of rate 1.0 is the schedule of a run without ``train.phases``, to the bit."""
    def factor(step: int) -> float:
        index = next((i for i, (start, steps) in enumerate(spans) if step < start + steps), len(spans) - 1)
        (start, steps), rate = spans[index], rates[index]
        local, warm = step - start, int(warmup * steps)
        if local < warm:
            return rate * ((local + 1) / warm)
        return rate * max(0.0, (steps - local) / max(1, steps - warm))

    return factor


def _state(obj) -> dict | None:
    return obj.state_dict() if obj is not None else None


def mean_score(scores: dict[str, dict[str, float]], tasks: dict) -> float:
    """Mean over tasks of each task's main metric (tasks without dev data are left out)."""
    values = [scores[t][tasks[t].main_metric] for t in sorted(tasks) if scores.get(t)]
    return float(sum(values) / len(values)) if values else float("-inf")


def format_scores(scores: dict[str, dict[str, float]], tasks: dict, trained_on: tuple[str, ...] = ()) -> str:
    """``task metric value`` per task; a task in ``trained_on`` (its score is on its own training
    sentences, see :attr:`~mtl_heads.training.plan.RunPlan.selection_tasks`) is marked ``(train data)``."""
    return "  ".join(f"{t} {tasks[t].main_metric} {scores[t][tasks[t].main_metric]:.2f}"
                     + (" (train data)" if t in trained_on else "") for t in sorted(tasks) if scores.get(t))
