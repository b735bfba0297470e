"""Scoring: a trained model on any corpus and split, or a prediction file against a gold file,
with the metrics training reports (``python -m mtl_heads evaluate`` is the command over it).

Files are scored as the training loop scores decoded batches: each task's ``gold(sentence)`` turns
a sentence's layer into the structure its decoder predicts, so ``metric.update([task.gold(pred)],
[task.gold(gold)])`` on a written prediction file gives exactly the scores of the predictions
themselves (``Task.annotate`` writes a prediction so that ``gold`` reads it back unchanged).
Another system's output is scored the same way.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import nltk
from omegaconf import DictConfig

from mtl_heads.config import ConfigError
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import read_conllu
from mtl_heads.data.errors import DataError
from mtl_heads.data.formats import format_by_name
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.text import read_jsonl

if TYPE_CHECKING:
    import torch

    from mtl_heads.training.build import LoadedRun

__all__ = ["Passes", "load_trained", "evaluate_trained", "score_sentences", "score_files", "read_annotated",
           "COUNT_METRICS", "format_metric", "format_metrics"]

# metrics that are counts, not rates: POS's scored tokens, DEP's scored words (the tasks give them as
# floats, like their rates); printed as integers
COUNT_METRICS = frozenset({"tokens", "words"})


@dataclass(frozen=True)
class Passes:
    """How a trained model's passes over a split run (the ``evaluate`` command's keys of the same names)."""

    device: str = "auto"
    """Where the model runs: ``auto`` (default: CUDA when available, else the CPU), ``cpu``, ``cuda``, ``cuda:N``."""
    precision: str = "auto"
    """``auto | fp32 | bf16`` autocast (``mtl_heads.model.precision``; default auto: bf16 on CUDA, fp32 on CPU)."""
    batch_size: int = 64
    """Sentences per pass (default 64)."""
    progress: bool = False
    """A progress bar per task (default False)."""


def load_trained(path: str | Path, device: str | torch.device = "cpu") -> LoadedRun:
    """A trained model from a run folder (:func:`mtl_heads.training.build.load_run`) or from its removal folder
    (``runs/<run>/removal/``, :func:`mtl_heads.training.build.load_removal`), in eval mode on ``device``.
    For a removal folder, ``metrics`` and ``gates`` are those of the run it came from when it sits
    inside it, and ``cfg`` is the removal folder's config (``encoder.gate=none``)."""
    # the model imports are deferred, as in evaluate_trained
    from mtl_heads.config import load_saved_config
    from mtl_heads.files import read_json
    from mtl_heads.folders import is_removal_dir, is_run_dir
    from mtl_heads.training.build import LoadedRun, load_removal, load_run

    path = Path(path)
    if is_run_dir(path):
        return load_run(path, device=device)
    if is_removal_dir(path):
        model = load_removal(path, device=device)
        parent = path.parent if is_run_dir(path.parent) else None
        return LoadedRun(path, load_saved_config(path / "config.yaml"), model, model.tasks,
                         read_json(parent / "metrics.json") if parent else None,
                         read_json(parent / "gates.json") if parent else None)
    raise ConfigError(f"{path} is neither a finished run folder (config.yaml, labels.json, model.safetensors) "
                      "nor a removal folder (heads.json, config.yaml, labels.json; python -m mtl_heads remove)")


def evaluate_trained(path: str | Path, data: DictConfig | None = None, split: str = "test",
                     tasks: list[str] | None = None, passes: Passes = Passes(), log: Callable = print) -> dict:
    """Scores of a run folder (or its ``removal/`` folder) on a corpus split.

    Args:
        path: the trained model's folder.
        data: the ``data`` config section of the corpus (default: the run's own).
        split: ``train``, ``dev`` or ``test`` (the role; ``data.splits`` maps roles to corpus splits).
        tasks: a subset of the run's tasks (default: all).
        passes: device, precision, batch size and progress bar of the passes (:class:`Passes`; default: on
            CUDA when available, bf16 there, 64 sentences a pass, no bar).
        log: where the data report goes (default ``print``).

    Returns: ``{"scores": {task: {metric: value}}, "sentences": {task: n}}``, ``weights_sha256`` (the digest
    of the run's weights file scored; not for a removal folder), and ``eval_cut`` when the data config keeps
    only part of the split (``load_corpus``'s ``cuts`` entry: scores not comparable with those on the whole
    split).
    """
    # deferred: torch and transformers, which scoring two files (score_files) does not need
    from mtl_heads.data.batching import prepare_examples
    from mtl_heads.data.corpus import load_corpus
    from mtl_heads.training.build import pick_device
    from mtl_heads.training.trainer import evaluate_examples

    target = pick_device(passes.device)
    loaded = load_trained(path, device=target)
    chosen = _chosen_tasks(loaded.tasks, tasks, f"{path}")
    data = copy.deepcopy(data if data is not None else loaded.cfg.data)
    cuts: dict = {}
    corpus = load_corpus(data, {layer for task in chosen.values() for layer in task.needs}, roles=(split,), cuts=cuts)
    examples = prepare_examples({split: corpus[split]}, chosen, loaded.model.encoder, data.long_policy, log,
                                require_train=False)[split]
    scores = evaluate_examples(loaded.model, chosen, examples, target, passes.precision, passes.batch_size,
                               passes.progress, split)
    result = {"scores": scores, "sentences": {name: len(ex) for name, ex in examples.items()}}
    if loaded.weights_sha256:  # the weights scored, by their digest
        result["weights_sha256"] = loaded.weights_sha256
    if split in cuts:  # data.max_eval_sentences (or data.max_sentences for train, data.sentences) cut the split
        result["eval_cut"] = cuts[split]
    return result


def format_metric(name: str, value) -> str:
    """One metric's value as printed: a count (an ``int``, or a metric of :data:`COUNT_METRICS` with
    a whole value) as an integer, ``19083``; any other number with two decimals, ``93.65``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int) or (name in COUNT_METRICS and float(value).is_integer()):
        return str(int(value))
    return f"{value:.2f}"


def format_metrics(scores: dict) -> str:
    """A task's ``{metric: value}`` as ``accuracy 93.65  tokens 19083`` (see :func:`format_metric`)."""
    return "  ".join(f"{name} {format_metric(name, value)}" for name, value in scores.items())


def _chosen_tasks(available: dict, names: list[str] | None, where: str) -> dict:
    if not names:
        return dict(available)
    unknown = [n for n in names if n not in available]
    if unknown:
        raise ConfigError(f"config key 'tasks': {where} has no decoder for {', '.join(unknown)} "
                          f"(its tasks: {', '.join(available)})")
    return {n: available[n] for n in names}


def score_sentences(pred: list[Sentence], gold: list[Sentence], tasks: dict, pred_name: str = "pred",
                    gold_name: str = "gold") -> dict:
    """Scores of predicted sentences against gold ones, sentence by sentence.

    Args:
        pred, gold: the same sentences (same words, same order).
        tasks: ``{name: Task}`` (label vocabularies are not needed).
        pred_name, gold_name: the files, for messages.

    A gold sentence without a task's layer is not scored for that task (as in training). A
    predicted sentence without it (e.g. written with empty layers because it was over the encoder
    limit) counts as predicting nothing: every gold unit of it is missed.

    Returns: ``{"scores": {task: {metric: value}}, "sentences": {task: n}, "unpredicted": {task: n}}``.
    """
    if len(pred) != len(gold):
        raise DataError(f"{pred_name}:1: {len(pred)} sentences, but {gold_name} has {len(gold)}; "
                        "expected the same sentences in the same order")
    for i, (p, g) in enumerate(zip(pred, gold)):
        if p.words != g.words:
            raise DataError(f"{p.source or f'{pred_name} sentence {i + 1}'}: words {_show(p.words)} differ from "
                            f"{g.source or f'{gold_name} sentence {i + 1}'}: {_show(g.words)}")
    scores, counts, unpredicted = {}, {}, {}
    for name, task in tasks.items():
        metric, n, missing = task.metric(), 0, 0
        preds, golds = [], []
        for p, g in zip(pred, gold):
            if not task.usable(g):
                continue
            if not task.usable(p):
                p, missing = _nothing_predicted(g, task), missing + 1
            preds.append(task.gold(p))
            golds.append(task.gold(g))
            n += 1
        if n:
            metric.update(preds, golds)
        scores[name], counts[name], unpredicted[name] = (metric.compute() if n else {}), n, missing
    return {"scores": scores, "sentences": counts, "unpredicted": unpredicted}


def _nothing_predicted(gold: Sentence, task) -> Sentence:
    """A sentence with ``gold``'s words whose layers for ``task`` predict nothing correct: POS and
    relations ``_``, heads pointing nowhere a gold head can be, no entity, a flat tree (no
    constituent besides the root, which EVALB ignores), no predicate."""
    n = len(gold.words)
    empty = Sentence(words=list(gold.words), pos=list(gold.pos) if gold.pos is not None else ["_"] * n,
                     source=gold.source)
    needs = set(task.needs)
    if "pos" in needs:
        empty.pos = ["_"] * n
    if "entities" in needs:
        empty.entities = []
    if "deps" in needs:
        empty.heads, empty.rels = _wrong_heads(gold.heads), ["_"] * n
    if "tree" in needs:
        tags = empty.pos if gold.tree is None else [t for _, t in gold.tree.pos()]
        empty.tree = nltk.Tree("TOP", [nltk.Tree(t, [w]) for w, t in zip(gold.words, tags)])
    if "srl" in needs:
        empty.predicates, empty.arguments = [], []
    return empty


def _wrong_heads(heads: list[int]) -> list[int]:
    """Heads that differ from the gold ``heads`` at every word (a valid index 0..n each)."""
    n = len(heads)
    return [next(h for h in range(n + 1) if h != gold and h != i + 1) if n > 1 else (0 if gold else 1)
            for i, gold in enumerate(heads)]


def read_annotated(path: str | Path, format: str = "auto", pos: str = "xpos", key: str = "pred_format") -> list[Sentence]:
    """Every layer a file holds: CoNLL-2012, CoNLL-U (``pos``: the column read as POS, ``upos`` or
    ``xpos``) or JSON lines (``format``: ``auto`` = by the file's name)."""
    readers = {"conll2012": read_conll2012, "conllu": lambda p: read_conllu(p, pos=pos), "jsonl": read_jsonl}
    name = format_by_name(path) if format == "auto" else format
    if name not in readers:
        raise ConfigError(f"config key '{key}': {path} must be one of {', '.join(readers)} to be scored "
                          f"(got {name or 'a name that says no format'}; PTB bracket lines hold no words' layers "
                          "beyond the tree: write CoNLL-2012 or JSON lines instead)")
    return readers[name](path)


def score_files(pred_path: str | Path, gold_path: str | Path, task_names: list[str], pred_format: str = "auto",
                gold_format: str = "auto", pos: str = "xpos", task_options: dict | None = None) -> dict:
    """Scores of a prediction file against a gold file (see :func:`score_sentences`).

    Args:
        pred_path, gold_path: the files (CoNLL-2012, CoNLL-U or JSON lines).
        task_names: the tasks to score, e.g. ``["pos", "dep"]``.
        pred_format, gold_format: ``auto`` (by the file's name) or a format name.
        pos: the CoNLL-U column read as POS (``xpos`` or ``upos``); default xpos.
        task_options: ``{task: options}`` as in the ``task`` config section (default: none).
    """
    from tasks import TASKS

    unknown = [n for n in task_names if n not in TASKS]
    if not task_names or unknown:
        raise ConfigError(f"config key 'tasks': expected task names from {', '.join(TASKS)}, got {list(task_names)}")
    tasks = {n: TASKS[n](dict((task_options or {}).get(n) or {})) for n in task_names}
    pred = read_annotated(pred_path, pred_format, pos, "pred_format")
    gold = read_annotated(gold_path, gold_format, pos, "gold_format")
    return score_sentences(pred, gold, tasks, str(pred_path), str(gold_path))


def _show(words: list[str]) -> str:
    text = " ".join(words)
    return repr(text if len(text) <= 60 else text[:57] + "...")
