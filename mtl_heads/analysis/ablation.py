"""Causal head ablation: what each task of a trained run loses when a set of heads is ablated,
against random head sets with the same number of heads in each layer (TransformerLens-style).

A head's context (its slice of the input of ``W_O``, after the gate) is replaced by
(:meth:`mtl_heads.model.encoder.GatedEncoder.replace_heads`, no attention code copied):

- ``zero``: 0, the same as closing its gate;
- ``mean``: its mean gated context over every real (non-padding) token of a reference split
  (default the run's dev split; special tokens included, as the model sees them), computed once;
- ``resample``: its context in another sentence of the same batch, at the same token position, from a
  clean (unablated) pass. The donor of sentence ``i`` is sentence ``i - 1`` (the batch rolled by one;
  batches group sentences of similar length, so most positions exist in the donor); a position where
  the donor has no token, and every position of a batch of one sentence, takes the head's mean
  context instead. Clean contexts are computed once; for the ablated layers they are kept for the whole
  split (tokens x heads x head_dim values per layer: on the model's device up to
  :data:`DONORS_ON_DEVICE` bytes, in host memory beyond).

Each task is scored with its main metric after a full decode (as training's evaluation). The null
is ``random_sets`` head sets drawn by :func:`mtl_heads.model.headsets.layer_matched_sets`: in each layer as
many heads as the ablated set holds there, uniformly without replacement (whole KV groups when the
run's gates are per group). The drop is ``base - ablated`` (metric points); the one-sided
``p = (1 + random drops >= the observed drop) / (1 + random sets)``.

A long study keeps what it has scored (:class:`KeptScores`, the command's ``<out>/ablation.partial.json``,
written atomically at most every minute and after each method): run again on the same weights with the
same plan, it reads them back and scores only the passes left; the record is the one an uninterrupted
study writes (its ``seconds`` summed over the attempts, ``resumed`` counting them).

Cost: batches are collated once and tasks read from the same sentences share one encoder pass per
batch; one pass over the split per method and head set (``methods x (1 + random_sets)``), plus one
unablated pass, one pass over the reference split for the means and one for the resample donors.

The scoring helpers shared with probes (``task_batches``, ``task_score``, ``eval_mode``, ``open_heads``)
live in :mod:`mtl_heads.model.scoring`, below both (this module reads corpora; the probes need not).
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from mtl_heads.config import ConfigError
from mtl_heads.data.batching import Example, prepare_examples
from mtl_heads.data.corpus import ROLES, load_corpus
from mtl_heads.data.errors import DataError
from mtl_heads.files import file_sha256, read_json, write_json
from mtl_heads.folders import ABLATION_NULLS
from mtl_heads.model.headsets import (cell_matched_sets, head_grid, head_names, importance_cells, layer_matched_sets,
                                      possible_sets)
from mtl_heads.model.precision import autocast
from mtl_heads.progress import progress_bar
from mtl_heads.model.gate_constants import KEPT_AT
from mtl_heads.model.scoring import batch_scores, eval_mode, open_heads, task_batches, task_score
from mtl_heads.stats import null_summary
from probes.importance import gradient_importance, normalise_per_layer

__all__ = ["METHODS", "DONORS_ON_DEVICE", "eval_mode", "open_heads", "split_examples", "task_batches",
           "task_score", "batch_scores", "chosen_tasks", "TaskGroup", "task_groups", "mean_contexts", "resample_donors",
           "collect_donors", "head_grid", "kv_block", "matched_sets", "task_importance", "MATCHED", "IMPORTANCE_BINS", "possible_sets", "drop_summary",
           "AblationPlan", "KeptScores", "ablation_study", "run_ablation", "table_lines"]

logger = logging.getLogger(__name__)

METHODS = ("zero", "mean", "resample")
MATCHED = {"layer": "layer-matched", "importance": "layer- and importance-matched"}  # AblationPlan.matched
IMPORTANCE_BINS = 3           # the importance-matched null's bins per layer (docs/ewt-study/rules-round3.md)
DONORS_ON_DEVICE = 1 << 30    # resample donors larger than this (bytes) wait in host memory


@dataclass(frozen=True)
class AblationPlan:
    """What an ablation study is asked to do: everything of :func:`run_ablation` but the run and the heads.
    Built from the ablate command's config by :meth:`from_config` (``configs/ablate.yaml``'s keys)."""

    methods: tuple[str, ...] = METHODS
    """How a head is replaced: some of :data:`METHODS` (default all three: zero, mean, resample)."""
    random_sets: int = 20
    """Random head sets of the null (default 20; at least 1)."""
    seed: int = 0
    """Seed of the random sets (numpy ``default_rng``; default 0)."""
    matched: str = "layer"
    """What the random sets match (a key of :data:`MATCHED`): ``layer`` (default: as many heads in each layer)
    or ``importance`` (as many in each layer's importance tertile: :data:`IMPORTANCE_BINS` bins of the heads
    ranked by Michel et al.'s importance for the scored tasks in this run, on the ``reference`` split's
    sentences, each layer's row L2-normalised and averaged over the tasks)."""
    split: str = "test"
    """The role scored: train | dev | test (default ``test``)."""
    reference: str = "dev"
    """The role whose tokens give the mean contexts (default ``dev``; only read for ``mean`` and ``resample``,
    and for ``matched="importance"``): every sentence of it that one of the run's tasks reads."""
    tasks: tuple[str, ...] | None = None
    """A subset of the run's tasks (default None: all)."""
    max_sentences: int | None = None
    """The first N sentences per task of the scored and reference splits (default None: all)."""
    reference_max: int | None = None
    """The first N sentences per task of the reference split (default None: ``max_sentences``): a small
    scored sample with well-estimated mean contexts."""
    batch_size: int = 32
    """Sentences per pass (default 32)."""
    precision: str = "auto"
    """``auto | fp32 | bf16`` autocast of the passes (default auto: bf16 on CUDA, fp32 on CPU)."""
    source: str = "list"
    """How the set was chosen, kept in the record (default ``list``)."""
    label: str = ""
    """A free label kept in the record (default empty)."""
    progress: bool = False
    """A progress bar over the passes (default False)."""

    @classmethod
    def from_config(cls, cfg, source: str = "list") -> "AblationPlan":
        """The plan of the ablate command's config (``configs/ablate.yaml`` with its ``key=value``
        overrides): ``reference_sentences`` is :attr:`reference_max`, an empty ``tasks`` list is all
        tasks; ``source``: how the heads were chosen (``mtl_heads.analysis.ablation_heads.head_source``)."""
        return cls(methods=tuple(cfg.methods), random_sets=cfg.random_sets, seed=cfg.seed, matched=cfg.matched,
                   split=cfg.split, reference=cfg.reference, tasks=tuple(cfg.tasks) or None,
                   max_sentences=cfg.max_sentences, reference_max=cfg.reference_sentences,
                   batch_size=cfg.batch_size, precision=cfg.precision, source=source, label=str(cfg.label),
                   progress=cfg.progress)

    @property
    def reference_first(self) -> int | None:
        """The first N sentences per task of the reference split: :attr:`reference_max`, else
        :attr:`max_sentences`."""
        return self.max_sentences if self.reference_max is None else self.reference_max


# --- data ---------------------------------------------------------------------------------------
def split_examples(loaded_run, role: str = "dev", max_sentences: int | None = None) -> dict[str, list[Example]]:
    """``{task: [Example]}`` of one role (train/dev/test) of the run's own data config, read and
    tokenised as training did (``load_corpus`` + ``prepare_examples``); only that role is read.

    Args:
        loaded_run: a ``mtl_heads.training.build.LoadedRun``.
        role: which role's sentences (default ``"dev"``).
        max_sentences: keep the first N examples per task (default: all).
    """
    if role not in ROLES:
        raise ValueError(f"role {role!r}: expected one of {', '.join(ROLES)}")
    tasks, encoder, cfg = loaded_run.tasks, loaded_run.model.encoder, loaded_run.cfg
    corpus = load_corpus(cfg.data, {layer for task in tasks.values() for layer in task.needs}, roles=(role,))
    examples = prepare_examples(corpus, tasks, encoder, cfg.data.long_policy, logger.info, require_train=False)[role]
    return {name: ex[:max_sentences] for name, ex in examples.items()}


@dataclass
class TaskGroup:
    """Tasks that read the same sentences, collated once: one encoder pass per batch serves them all.

    tasks: their names; batches: :func:`task_batches`; golds: ``{task: [gold structures per batch]}``;
    donors: per batch, the resample values (:func:`collect_donors`), empty until collected.
    """

    tasks: list[str]
    batches: list[tuple[dict, list]]
    golds: dict[str, list[list]]
    donors: list = field(default_factory=list)

    @property
    def sentences(self) -> int:
        return sum(len(s) for _, s in self.batches)


def task_groups(model: nn.Module, examples_by_task: dict[str, list[Example]], batch_size: int = 32) -> list[TaskGroup]:
    """The tasks grouped by their examples: tasks whose examples are the same sentences in the same
    order (``split_examples`` gives each task the sentences that carry its layers, so fully annotated
    data gives one group) share batches, collated once on the model's device."""
    by_sentences: dict[tuple, tuple[list[Example], list[str]]] = {}
    for task, examples in examples_by_task.items():
        by_sentences.setdefault(tuple(map(id, examples)), (examples, []))[1].append(task)
    groups = []
    for examples, tasks in by_sentences.values():
        batches = task_batches(model, examples, batch_size)
        golds = {t: [[model.tasks[t].gold(s) for s in sentences] for _, sentences in batches] for t in tasks}
        groups.append(TaskGroup(tasks, batches, golds))
    return groups


# --- what replaces a head -----------------------------------------------------------------------
def _clean_contexts(model: nn.Module, batch: dict) -> list[torch.Tensor]:
    """The unablated gated contexts of one batch: per layer ``[batch, seq, heads, head_dim]``."""
    with torch.no_grad(), model.encoder.capture_contexts() as contexts:
        model.encoder(batch["input_ids"], batch["attention_mask"])
    return list(contexts)


def mean_contexts(model: nn.Module, batches: list[tuple[dict, list]]) -> torch.Tensor:
    """``[layers, heads, head_dim]`` float32: each head's mean gated context over every real token
    (``attention_mask`` 1, special tokens included) of ``batches``, in the model's current mode.

    Args:
        model: the ``MultiTaskModel``.
        batches: the reference sentences (:func:`task_batches`).
    """
    sums, tokens = None, 0
    for batch, _ in batches:
        real = batch["attention_mask"].bool()  # (B, T)
        layer_sums = torch.stack([c[real].double().sum(0) for c in _clean_contexts(model, batch)])  # (L, H, d)
        sums = layer_sums if sums is None else sums + layer_sums
        tokens += int(real.sum())
    if not tokens:
        raise ValueError("mean_contexts: the reference batches hold no token")
    return (sums / tokens).float()


def resample_donors(contexts: Sequence[torch.Tensor], attention_mask: torch.Tensor, means: torch.Tensor,
                    layers: Sequence[int]) -> list[torch.Tensor | None]:
    """Resample values of one batch: per layer ``[batch, seq, heads, head_dim]`` for ``layers``, None
    for the others (:meth:`~mtl_heads.model.encoder.GatedEncoder.replace_heads`' per-position value).

    Sentence ``i`` takes the clean contexts of sentence ``i - 1`` (the batch rolled by one) at the same
    position; where that sentence has no token (its padding), and everywhere in a batch of one
    sentence, the head's mean context.

    Args:
        contexts: per layer ``[batch, seq, heads, head_dim]``, the batch's clean contexts.
        attention_mask: ``[batch, seq]`` of the batch.
        means: ``[layers, heads, head_dim]`` (:func:`mean_contexts`).
        layers: the layers whose values are needed (those with ablated heads).
    """
    batch = attention_mask.shape[0]
    has_token = attention_mask.roll(1, 0).bool() if batch > 1 else torch.zeros_like(attention_mask, dtype=torch.bool)
    keep = has_token[:, :, None, None]  # (B, T, 1, 1): the donor has a token here
    wanted = set(layers)
    return [torch.where(keep, c.roll(1, 0), means[i].to(c.dtype)) if i in wanted else None  # (B, T, H, d)
            for i, c in enumerate(contexts)]


def collect_donors(model: nn.Module, group: TaskGroup, means: torch.Tensor, layers: Sequence[int]) -> None:
    """Fill ``group.donors`` with :func:`resample_donors` of each batch, from one clean pass. They stay on
    the model's device up to :data:`DONORS_ON_DEVICE` bytes, else in host memory (moved per batch)."""
    size = sum(b["attention_mask"].numel() for b, _ in group.batches) * means[0].numel() * 4 * len(layers)
    on_host = size > DONORS_ON_DEVICE
    group.donors = []
    for batch, _ in group.batches:
        donors = resample_donors(_clean_contexts(model, batch), batch["attention_mask"], means, layers)
        group.donors.append([d.cpu() if on_host and d is not None else d for d in donors])


def chosen_tasks(names: Sequence[str] | None, available: Sequence[str], run: str | Path) -> list[str]:
    """``names`` (default: every one of ``available``, the tasks of ``run``), checked: a ConfigError
    naming the key ``tasks`` for a task the run does not have."""
    unknown = [t for t in names or () if t not in available]
    if unknown:
        raise ConfigError(f"config key 'tasks': {', '.join(unknown)} not among the tasks of {run} "
                          f"({', '.join(available)})")
    return list(names or available)


# --- head sets and the null ---------------------------------------------------------------------
def kv_block(chosen: np.ndarray, group_size: int, gate_groups: str) -> int:
    """Heads drawn together in the random sets: a KV group (``group_size``) when the run's gates are per
    group (``gate_groups == "kv"``) and ``chosen`` ``[layers, heads]`` holds whole groups; else 1."""
    if gate_groups != "kv" or group_size <= 1:
        return 1
    groups = np.asarray(chosen, dtype=bool).reshape(chosen.shape[0], -1, group_size)  # [L, groups, group_size]
    return group_size if (groups.all(-1) | ~groups.any(-1)).all() else 1


def matched_sets(chosen: np.ndarray, count: int, seed: int = 0, block: int = 1, *,
                 cells: np.ndarray | None = None) -> np.ndarray:
    """``[count, layers, heads]`` bool: ``count`` random head sets with as many heads in each layer as
    ``chosen`` ``[layers, heads]``, each drawn uniformly without replacement within its layer, in whole
    runs of ``block`` adjacent heads (KV groups); reproducible from ``seed`` (numpy ``default_rng``).
    ``cells`` (``[layers, heads]`` cell ids, e.g. :func:`mtl_heads.model.headsets.importance_cells`; default
    None): as many heads in each cell instead (``block`` must then be 1). Set i does not depend on ``count``:
    the first N sets of a draw of more are the draw of N, so a record drawn again with more ``random_sets`` (and
    the same ``seed``) keeps its sets and adds to them."""
    chosen = np.asarray(chosen, dtype=bool)
    if cells is not None and block != 1:
        raise ValueError("cell-matched random sets draw single heads: the run's gates are per KV group (block > 1)")
    rng = np.random.default_rng(seed)
    picks = (layer_matched_sets(rng, count, chosen, block) if cells is None
             else cell_matched_sets(rng, count, chosen, cells))  # [count, k] flat indices
    grids = np.zeros((count, chosen.size), dtype=bool)
    grids[np.arange(count)[:, None], picks] = True
    return grids.reshape(count, *chosen.shape)


def drop_summary(metric: str, base: float, ablated: float, random_scores: Sequence[float]) -> dict:
    """One method and task: ``metric``, ``base``, ``ablated``, ``drop`` (base - ablated), the random sets'
    ``random_drops``, their mean ``null_mean`` and 95th percentile ``null_95``, and the one-sided ``p``
    (:func:`mtl_heads.stats.null_summary`)."""
    drops = [base - s for s in random_scores]
    drop = base - ablated
    null_mean, null_95, p = null_summary(drop, drops)
    return {"metric": metric, "base": base, "ablated": ablated, "drop": drop, "random_drops": drops,
            "null_mean": null_mean, "null_95": null_95, "p": p}


# --- what an unfinished study keeps ------------------------------------------------------------
# the fields a finished record must share with today's study to be gone on from (KeptScores' earlier=):
# every record holds the first; records written since extensions were added hold the second too
RECORD_FACTS = ("weights_sha256", "heads", "tasks", "seed", "matched", "split", "sentences", "max_sentences",
                "reference_sentences", "precision")
NEWER_RECORD_FACTS = ("batch_size", "device")

class KeptScores:
    """The passes an unfinished study has scored, kept in a JSON file so that the same study, run again,
    goes on from them (a study of 1,000 random sets takes hours on a CPU); and the passes of a finished record
    of the same study with fewer random sets, which a study of more sets goes on from (set i does not depend
    on how many are drawn: :func:`matched_sets`).

    Args:
        path: the file (the ablate command's ``<out>/ablation.partial.json``).
        identity: what makes two studies the same (the weights' digest, the heads, the plan's fields that
            change a score); the random sets' digest is added by :func:`ablation_study`. Kept scores of
            another identity, or whose unablated scores differ from today's, are not read (a line says so)
            and are replaced.
        log: where the lines go (default the module logger).
        every: seconds between two writes (default 60; also written after each method).
        started: when this attempt began (``time.perf_counter()``; default now).
        earlier: a finished record (``ablation.json``) to go on from when no kept file is read (default None).
        facts: the fields that record must hold as today's record will (:data:`RECORD_FACTS`: the weights'
            digest, the heads, tasks, seed, null, split and sentences); its random sets must be the first of
            today's draw and its unablated scores today's, else it is not read (a line says so). Default None.
    """

    def __init__(self, path: Path, identity: dict, log: Callable[[str], object] = logger.info, every: float = 60.0,
                 started: float | None = None, earlier: Path | None = None, facts: dict | None = None):
        # as JSON gives it back (tuples become lists), so that a kept identity compares equal
        self.path, self.identity, self.log, self.every = Path(path), json.loads(json.dumps(identity)), log, every
        self.earlier, self.facts = earlier, json.loads(json.dumps(facts or {}))
        self.written = time.perf_counter()
        self.started = self.written if started is None else started
        self.earlier_seconds, self.resumed, self.extended = 0.0, 0, 0

    def read(self, sets: np.ndarray, base: dict) -> dict[str, dict[int, dict]]:
        """``{method: {set index: {task: score}}}`` kept by an earlier attempt of this study (index 0 is the
        chosen set, 1.. the random ``sets``, ``[N, layers, heads]``), else those of the ``earlier`` record;
        empty when there is none to read. ``base``: today's unablated ``{task: score}``, which the kept one
        must equal."""
        self.identity["sets_sha256"] = hashlib.sha256(np.ascontiguousarray(sets, dtype=bool).tobytes()).hexdigest()
        kept = read_json(self.path)
        if kept is None:
            return self._read_record(sets, base)
        if kept.get("identity") != self.identity or kept.get("base") != base:
            what = "its unablated scores differ from today's" if kept.get("identity") == self.identity else \
                "it was written for another study (weights, heads, plan or random sets)"
            self.log(f"not reading {self.path}: {what}; scoring from the start and replacing it")
            return {}
        self.earlier_seconds, self.resumed = float(kept["seconds"]), int(kept["resumed"]) + 1
        self.extended = int(kept.get("extended", 0))
        scores = {m: {int(i): s for i, s in by_set.items()} for m, by_set in kept["scores"].items()}
        done = sum(len(v) for v in scores.values())
        self.log(f"going on from {self.path}: {done} passes were scored before ({self.earlier_seconds:.0f} s)")
        return scores

    def _read_record(self, sets: np.ndarray, base: dict) -> dict[str, dict[int, dict]]:
        """The passes of the finished ``earlier`` record (:meth:`read`): its chosen set's scores as recorded, set
        i's as ``base - random_drops[i - 1]`` (exact where the drop was: the record keeps drops, not scores), for
        the first ``min(its sets, today's)`` random sets."""
        record = read_json(self.earlier) if self.earlier is not None else None
        if record is None:
            return {}
        count = min(len(record.get("random_heads", [])), len(sets))
        differs = [k for k, v in self.facts.items()
                   if (k in record or k not in NEWER_RECORD_FACTS) and record.get(k) != v]
        recorded = {t: r["base"] for by_task in record.get("methods", {}).values() for t, r in by_task.items()}
        if differs:
            why = f"it differs from today's study in {', '.join(differs)}"
        elif record.get("random_heads", [])[:count] != [head_names(s) for s in sets[:count]]:
            why = "its random sets are not the first of today's draw"
        elif recorded != {t: base[t] for t in recorded} or not recorded:
            why = "its unablated scores differ from today's"
        else:
            why = ""
        if why:
            self.log(f"not going on from {self.earlier}: {why}; scoring from the start")
            return {}
        if len(record["random_heads"]) > count:
            self.log(f"note: {self.earlier} holds {len(record['random_heads'])} random sets, more than the {count} asked: "
                     f"the record written replaces it with {count} (random_sets={len(record['random_heads'])} keeps them)")
        self.earlier_seconds, self.extended = float(record.get("seconds", 0.0)), count
        self.resumed = int(record.get("resumed", 0)) + 1
        scores = {m: {0: {t: r["ablated"] for t, r in by_task.items()},
                      **{i: {t: r["base"] - r["random_drops"][i - 1] for t, r in by_task.items()}
                         for i in range(1, count + 1)}}
                  for m, by_task in record["methods"].items() if m in self.identity["methods"]}
        self.log(f"going on from {self.earlier}: its {count} random sets of {len(sets)} were scored before "
                 f"({self.earlier_seconds:.0f} s)")
        return scores

    @property
    def seconds(self) -> float:
        """The study's wall-clock seconds over every attempt so far."""
        return self.earlier_seconds + time.perf_counter() - self.started

    def write(self, base: dict, scores: dict[str, dict[int, dict]], force: bool = False) -> None:
        """Keep ``scores`` (as :meth:`read` returns them) when ``every`` seconds have passed, or ``force``."""
        if force or time.perf_counter() - self.written >= self.every:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, {"identity": self.identity, "base": base, "seconds": round(self.seconds, 2),
                                   "resumed": self.resumed, "extended": self.extended, "scores": scores})
            self.written = time.perf_counter()


# --- the study ----------------------------------------------------------------------------------
def ablation_study(model: nn.Module, groups: list[TaskGroup], chosen: np.ndarray, plan: AblationPlan = AblationPlan(),
                   means: torch.Tensor | None = None, block: int = 1, cells: np.ndarray | None = None,
                   kept: KeptScores | None = None) -> dict:
    """Ablate ``chosen`` and ``plan.random_sets`` matched random sets with each of ``plan.methods``; score every task.

    Args:
        model: the ``MultiTaskModel`` (put in eval mode for the study, then restored).
        groups: :func:`task_groups` of the scored split.
        chosen: ``[layers, heads]`` bool, the heads ablated (at least one).
        plan: what to do (:class:`AblationPlan`); read here: ``methods``, ``random_sets``, ``seed``,
            ``precision`` and ``progress`` (the data fields were read to build ``groups`` and ``means``).
        means: ``[layers, heads, head_dim]`` mean contexts (:func:`mean_contexts`), needed by ``mean``
            and ``resample`` (default None).
        block: heads drawn together (:func:`kv_block`; default 1).
        cells: the random sets matched on these cells instead of the layers (:func:`matched_sets`; default None).
        kept: where the passes scored so far are kept and read back (:class:`KeptScores`; default None: not kept).

    Returns: ``{"methods": {method: {task: drop_summary}}, "random_heads": [[names] per random set]}``.
    """
    methods, random_sets, precision = plan.methods, plan.random_sets, plan.precision
    chosen = np.asarray(chosen, dtype=bool)
    unknown = [m for m in methods if m not in METHODS]
    if unknown or not methods:
        raise ValueError(f"methods: expected some of {', '.join(METHODS)}, got {list(methods)}")
    if not chosen.any() or random_sets < 1:
        raise ValueError("ablation_study needs at least one chosen head and one random set")
    if means is None and {"mean", "resample"} & set(methods):
        raise ValueError("the mean and resample methods need the mean contexts (mean_contexts)")
    sets = matched_sets(chosen, random_sets, plan.seed, block, cells=cells)  # [N, L, H]
    grids = [torch.from_numpy(g) for g in (chosen, *sets)]
    layers = [int(i) for i in np.nonzero(chosen.any(1))[0]]
    device = next(model.parameters()).device
    base = {}
    bar = progress_bar(total=len(methods) * len(grids) + 1, desc="ablation", disable=not plan.progress)
    with eval_mode(model), autocast(device, precision):
        for group in groups:
            base.update(batch_scores(model, group.tasks, group.batches, group.golds))
        bar.update()
        earlier = kept.read(sets, base) if kept is not None else {}
        scores = {m: dict(earlier.get(m, {})) for m in methods}  # method -> {grid index: {task: score}}
        bar.update(sum(len(v) for v in scores.values()))
        if "resample" in methods and len(scores["resample"]) < len(grids):
            for group in groups:
                collect_donors(model, group, means, layers)
        with model.encoder.replace_heads(grids[0]) as patch:
            for method in methods:
                patch.set(value=means if method == "mean" else None)
                for i, grid in enumerate(grids):
                    if i in scores[method]:
                        continue
                    patch.set(heads=grid)
                    scores[method][i] = {}
                    for group in groups:
                        donors = _donor_setter(patch, group, device) if method == "resample" else None
                        scores[method][i].update(batch_scores(model, group.tasks, group.batches, group.golds, donors))
                    bar.update()
                    if kept is not None:
                        kept.write(base, scores, force=i == len(grids) - 1)
    bar.close()
    results = {m: {t: drop_summary(model.tasks[t].main_metric, base[t], per_set[0][t],
                                   [per_set[i][t] for i in range(1, len(grids))])
                   for t in base} for m, per_set in scores.items()}
    return {"methods": results, "random_heads": [head_names(s) for s in sets]}


def _donor_setter(patch, group: TaskGroup, device: torch.device) -> Callable[[int], object]:
    """``before_batch`` of :func:`batch_scores` that puts batch ``b``'s resample donors into ``patch``."""
    def set_donors(b: int):
        return patch.set(value=[d if d is None else d.to(device, non_blocking=True) for d in group.donors[b]])
    return set_donors


def run_ablation(loaded_run, chosen: np.ndarray, plan: AblationPlan = AblationPlan(), run: str | None = None,
                 log: Callable[[str], object] = logger.info, kept: Path | None = None,
                 earlier: Path | None = None) -> dict:
    """The whole study on a loaded run, as the record ``ablation.json`` holds (see ``python -m
    mtl_heads ablate -h``).

    Args:
        loaded_run: a ``mtl_heads.training.build.LoadedRun`` (a run folder, gates as trained).
        chosen: ``[layers, heads]`` bool, the heads ablated.
        plan: what the study is asked to do (:class:`AblationPlan`: methods, the null, the splits, the
            tasks, the sample sizes, the passes, and what the record says of the set).
        run: the run folder as the user gave it (default ``loaded_run.path``).
        log: where data reports go (default the module logger).
        kept: a file where the passes scored so far are kept, read back by the same study run again
            (:class:`KeptScores`; the caller removes it once the record is written; default None: nothing kept).
        earlier: a finished record of this study with fewer random sets (``ablation.json``) to go on from, when
            ``kept`` holds nothing to read (:class:`KeptScores`; default None; read only where ``kept`` is given).

    The record's ``seconds`` is the wall-clock time of the whole study, over every attempt (the compute a
    study reports), ``resumed`` the attempts that went on from kept scores or an earlier record, and
    ``extended`` the random sets read from that record (0: none);
    its ``weights_sha256``, the SHA-256 of the weights file read (``LoadedRun.weights_sha256``), names the
    weights ablated; ``run_metrics_sha256``, the SHA-256 of the run folder's ``metrics.json`` as it was read
    (None where it has none), names the training they came from for records older than weights digests.
    """
    started = time.perf_counter()
    metrics = Path(loaded_run.path) / "metrics.json"
    run_metrics_sha256 = file_sha256(metrics) if metrics.is_file() else None
    model, encoder = loaded_run.model, loaded_run.model.encoder
    chosen = np.asarray(chosen, dtype=bool)
    if chosen.shape != (encoder.num_layers, encoder.num_heads) or not chosen.any():
        raise ValueError(f"chosen: expected a non-empty [{encoder.num_layers}, {encoder.num_heads}] grid")
    methods, split, reference, matched = plan.methods, plan.split, plan.reference, plan.matched
    batch_size, precision = plan.batch_size, plan.precision
    tasks = chosen_tasks(plan.tasks, list(loaded_run.tasks), loaded_run.path)
    examples = {t: ex for t, ex in split_examples(loaded_run, split, plan.max_sentences).items() if t in tasks}
    empty = [t for t in tasks if not examples[t]]
    if empty:
        raise DataError(f"the {split} split of {loaded_run.path}'s data has no sentence for {', '.join(empty)} "
                        "(see split= and tasks=)")
    groups = task_groups(model, examples, batch_size)
    means, reference_sentences, cells, importance = None, 0, None, None
    if matched not in MATCHED:
        raise ValueError(f"matched: expected one of {', '.join(MATCHED)}, got {matched!r}")
    first = plan.reference_first
    block = kv_block(chosen, encoder.group_size, encoder.gate_groups)
    if matched == "importance" and block != 1:
        raise ConfigError("config key 'matched': the importance-matched null draws single heads, and this run's gates "
                          f"are per key/value group ({block} heads each); use matched=layer")
    contexts = bool({"mean", "resample"} & set(methods))
    # the reference split, read once for both of its uses: the heads' importance and the mean contexts
    reference_examples = split_examples(loaded_run, reference, first) if matched == "importance" or contexts else {}
    if matched == "importance":
        importance = task_importance(model, reference_examples, tasks, batch_size, precision)
        cells = importance_cells(importance, IMPORTANCE_BINS)
    if contexts:
        pool = {id(e): e for ex in reference_examples.values() for e in ex}
        if not pool:
            raise DataError(f"the {reference} split of {loaded_run.path}'s data has no sentence for the mean "
                            "contexts (see reference=)")
        reference_batches = task_batches(model, list(pool.values()), batch_size)
        with eval_mode(model), autocast(next(model.parameters()).device, precision):
            means = mean_contexts(model, reference_batches)
        reference_sentences = len(pool)
    log(f"ablating {int(chosen.sum())} heads with {', '.join(methods)} against {plan.random_sets} {MATCHED[matched]} random "
        f"sets on {split} ({', '.join(f'{t} {len(ex)}' for t, ex in examples.items())} sentences)")
    identity = {"weights_sha256": loaded_run.weights_sha256, "heads": head_names(chosen), "tasks": tasks,
                "methods": methods, "random_sets": plan.random_sets, "seed": plan.seed, "matched": matched,
                "split": split, "reference": reference, "max_sentences": plan.max_sentences, "reference_max": first,
                "batch_size": batch_size, "precision": precision, "device": str(next(model.parameters()).device)}
    record = {"kind": "head ablation", "run": str(run if run is not None else loaded_run.path),
              "run_metrics_sha256": run_metrics_sha256,
              "weights_sha256": loaded_run.weights_sha256,
              "tasks": tasks, "heads": head_names(chosen),
              "source": plan.source, "label": plan.label, "split": split, "sentences": {t: len(ex) for t, ex in examples.items()},
              "random_sets": plan.random_sets, "seed": plan.seed,
              "matched": next(k for k, v in ABLATION_NULLS.items() if v == matched),
              "gate_groups": encoder.gate_groups,
              "heads_per_layer": [int(k) for k in chosen.sum(1)]}
    setup = {"reference": reference if means is not None else None, "reference_sentences": reference_sentences,
             "max_sentences": plan.max_sentences, "precision": precision, "batch_size": batch_size,
             "device": identity["device"]}
    known = {**record, **setup}  # what a finished record of this study holds before its scores
    keeper = KeptScores(kept, identity, log, started=started, earlier=earlier,
                        facts={k: known[k] for k in (*RECORD_FACTS, *NEWER_RECORD_FACTS)}) if kept is not None else None
    record.update(ablation_study(model, groups, chosen, plan, means, block, cells, keeper))
    record.update(_null_facts(chosen, block, plan.random_sets, encoder, cells), **setup,
                  seconds=round(keeper.seconds if keeper else time.perf_counter() - started, 2),
                  resumed=keeper.resumed if keeper else 0, extended=keeper.extended if keeper else 0)
    if importance is not None:  # the importance-matched null: each head's importance and its cell
        record.update(importance=np.round(importance, 6).tolist(), importance_bins=IMPORTANCE_BINS,
                      importance_cells=cells.tolist())
    return record


def task_importance(model: nn.Module, examples: dict[str, list[Example]], tasks: Sequence[str], batch_size: int = 32,
                    precision: str = "auto") -> np.ndarray:
    """``[layers, heads]``: Michel et al.'s head importance (:func:`probes.importance.gradient_importance`) for
    each of ``tasks`` on its sentences of ``examples`` (``{task: [Example]}``), each layer's row L2-normalised
    (:func:`probes.importance.normalise_per_layer`), averaged over the tasks. ``batch_size``: sentences per
    pass (default 32); ``precision``: the passes' autocast (default auto)."""
    rows = []
    for task in tasks:
        if not examples.get(task):
            raise DataError(f"no sentence of {task} to measure the heads' importance on (see reference=)")
        batches = task_batches(model, examples[task], batch_size)
        with autocast(next(model.parameters()).device, precision):
            rows.append(normalise_per_layer(gradient_importance(model, task, batches).float()))
    return torch.stack(rows).mean(0).cpu().numpy()


def _null_facts(chosen: np.ndarray, block: int, random_sets: int, encoder, cells: np.ndarray | None = None) -> dict:
    """What the record says about its null: ``block`` (heads drawn together), ``full_layers`` (layers whose
    every head is ablated: the random sets cannot vary there), ``degenerate`` (some such layer),
    ``possible_sets`` (distinct random sets of the null drawn: layer-matched, or within ``cells`` for the
    importance-matched null, :func:`possible_sets`; 1: the null is the set itself), ``closed_heads`` (ablated
    heads already closed in the run) and ``notes`` saying so."""
    full = [int(i) for i in np.nonzero(chosen.all(1))[0]]
    possible = possible_sets(chosen, block, cells)
    closed = ~open_heads(encoder).cpu().numpy()
    notes = []
    if possible == 1:
        notes.append(f"degenerate null: the set holds every head of each {'layer' if cells is None else 'importance cell'}"
                     " it touches, so every random set is the set itself (p = 1 by construction)")
    elif full:
        notes.append(f"degenerate null in layer {', '.join(map(str, full))}: the set holds every head there, so every "
                     "random set ablates it whole too; only the other layers vary")
    if 1 < possible < random_sets:
        notes.append(f"only {possible:,} distinct {MATCHED['layer' if cells is None else 'importance']} sets exist: "
                     "the random sets repeat")
    if block == 1 and encoder.gate_groups == "kv" and encoder.group_size > 1:
        notes.append("the set splits KV groups: random sets are drawn head by head, not by group")
    if (closed & chosen).any():
        notes.append(f"{int((closed & chosen).sum())} ablated heads are already closed in the run (gate < "
                     f"{KEPT_AT:g}): ablating them changes little")
    return {"block": block, "full_layers": full, "degenerate": bool(full), "possible_sets": possible,
            "closed_heads": head_names(closed & chosen), "notes": notes}


def table_lines(record: dict) -> list[str]:
    """A readable table of a record: one line per method and task (base, ablated, drop, random mean /
    95th percentile, p), then the record's notes. A record judged by ``python -m mtl_heads ablate``
    (``verdicts``: :func:`mtl_heads.commands.ablate.judge`) adds the Holm-adjusted p and the verdict to each
    line, a ``*`` on a p at its floor, then the rule and the verdicts' notes."""
    judged = "verdicts" in record
    lines = [f"{len(record['heads'])} heads ({record['source']}): {', '.join(record['heads'])}",
             f"{record['random_sets']} {MATCHED[ABLATION_NULLS[record.get('matched', 'layer')]]} random sets (seed "
             f"{record['seed']}, per layer "
             f"{record['heads_per_layer']}), {record['split']} split",
             f"{'method':<9} {'task':<6} {'metric':<9} {'base':>7} {'ablated':>8} {'drop':>7} "
             f"{'rand mean':>9} {'rand 95%':>8} {'p':>6}" + (f"  {'Holm p':>6}  verdict" if judged else "")]
    for method, by_task in record["methods"].items():
        for task, r in by_task.items():
            line = (f"{method:<9} {task:<6} {r['metric']:<9} {r['base']:>7.2f} {r['ablated']:>8.2f} "
                    f"{r['drop']:>7.2f} {r['null_mean']:>9.2f} {r['null_95']:>8.2f} {r['p']:>6.3f}")
            if judged:
                holm = "-" if r.get("p_holm") is None else f"{r['p_holm']:.3f}"
                line += f"{'*' if r.get('p_at_floor') else ' '} {holm:>6}  {r.get('verdict', '')}"
            lines.append(line)
    if judged:
        lines += [f"verdict: {record['verdicts']['rule']}", *record["verdicts"].get("notes", [])]
    return lines + [f"note: {n}" for n in record.get("notes", [])]
