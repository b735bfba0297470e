"""From sentences to padded sub-word batches, and the multi-task batch schedule.

Sub-word alignment uses the fast tokenizer's ``word_ids``: each sub-word position gets the index
of its word (-1 for [CLS]/[SEP]/padding), which the encoder uses to average a word's pieces.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError
from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence


@dataclass
class Example:
    """A sentence with its sub-word ids and word alignment."""

    sentence: Sentence
    input_ids: list[int]
    word_index: list[int]  # per sub-word position: 0-based word index, -1 for special tokens


@dataclass
class TokenizeReport:
    """What tokenisation had to do: counts reported to the user, nothing dropped silently."""

    sentences: int = 0
    too_long: int = 0            # sentences over the encoder's sub-word limit
    skipped: int = 0             # ... left out (policy skip)
    split: int = 0               # ... cut into pieces (policy split)
    pieces: int = 0              # pieces those produced
    layers_dropped: dict = field(default_factory=dict)  # layer -> sentences whose layer a split lost
    empty_words: int = 0         # words the tokenizer turned into no piece (fed as the unknown token)

    def lines(self) -> list[str]:
        out = [f"{self.sentences} sentences"]
        if self.empty_words:
            out.append(f"{self.empty_words} words had no sub-word and were fed as the unknown token")
        if self.too_long:
            action = f"skipped {self.skipped}" if self.skipped else f"split {self.split} into {self.pieces} pieces"
            out.append(f"{self.too_long} longer than the encoder limit: {action}")
        for layer, count in sorted(self.layers_dropped.items()):
            out.append(f"{count} split sentences lost their '{layer}' layer (it spans the cut)")
        return out


def tokenize(sentences: list[Sentence], tokenizer, max_length: int, policy: str = "skip") -> tuple[list[Example], TokenizeReport]:
    """Tokenise pre-split ``sentences`` with a fast ``tokenizer``.

    Args:
        max_length: the encoder's limit in sub-words, special tokens included.
        policy: what to do with a longer sentence: ``skip`` it, or ``split`` it into pieces that
            fit (word-level layers are kept; a tree, SRL or dependency layer is dropped from the
            pieces and counted). Either way the report counts it.
    """
    if policy not in ("skip", "split"):
        raise ValueError(f"data.long_policy: expected skip or split, got {policy!r}")
    report = TokenizeReport(sentences=len(sentences))
    examples: list[Example] = []
    for sentence, (ids, index) in zip(sentences, _encode(tokenizer, sentences, report)):
        if len(ids) <= max_length:
            examples.append(Example(sentence, ids, index))
            continue
        report.too_long += 1
        if policy == "skip":
            report.skipped += 1
            continue
        pieces = split_sentence(sentence, index, max_length, report)
        report.split += 1
        report.pieces += len(pieces)
        for piece, (p_ids, p_index) in zip(pieces, _encode(tokenizer, pieces, report)):
            examples.append(Example(piece, p_ids, p_index))
    return examples, report


def _encode(tokenizer, sentences: list[Sentence], report: TokenizeReport) -> list[tuple[list[int], list[int]]]:
    if not sentences:
        return []
    enc = tokenizer([s.words for s in sentences], is_split_into_words=True, add_special_tokens=True,
                    truncation=False, verbose=False)
    out = []
    for i, sentence in enumerate(sentences):
        ids, index = enc["input_ids"][i], [-1 if w is None else w for w in enc.word_ids(i)]
        if len(set(index) - {-1}) != len(sentence.words):
            ids, index = _encode_with_unknowns(tokenizer, sentence, index, report)
        out.append((ids, index))
    return out


def _encode_with_unknowns(tokenizer, sentence: Sentence, index: list[int], report: TokenizeReport):
    """Some words (e.g. a lone zero-width character) give no sub-word; feed them as [UNK] so that
    every word has a vector."""
    present = set(index)
    words = [w if i in present else tokenizer.unk_token for i, w in enumerate(sentence.words)]
    report.empty_words += sum(1 for i in range(len(words)) if i not in present)
    enc = tokenizer([words], is_split_into_words=True, add_special_tokens=True, truncation=False, verbose=False)
    return enc["input_ids"][0], [-1 if w is None else w for w in enc.word_ids(0)]


def split_sentence(sentence: Sentence, word_index: list[int], max_length: int, report: TokenizeReport) -> list[Sentence]:
    """Cut a long sentence into consecutive pieces of at most ``max_length`` sub-words, preferring
    cuts outside entities. POS and entities inside a piece are kept."""
    pieces_per_word = [0] * len(sentence.words)
    for w in word_index:
        if w >= 0:
            pieces_per_word[w] += 1
    budget = max_length - (len(word_index) - sum(pieces_per_word))  # room left after specials
    inside = set()
    for start, end, _ in sentence.entities or []:
        inside.update(range(start + 1, end))  # cutting before these words would split an entity
    cuts, start, used, last_good = [0], 0, 0, None
    for i, n in enumerate(pieces_per_word):
        if used + n > budget and i > start:
            cut = last_good if last_good is not None and last_good > start else i
            cuts.append(cut)
            start, used, last_good = cut, sum(pieces_per_word[cut:i]), None
        if i not in inside:
            last_good = i
        used += n
    cuts.append(len(sentence.words))
    pieces = [_slice(sentence, a, b) for a, b in zip(cuts, cuts[1:]) if b > a]
    for layer in ("tree", "srl", "deps"):
        if sentence.has(layer):
            report.layers_dropped[layer] = report.layers_dropped.get(layer, 0) + 1
    if sentence.entities:
        kept = sum(len(p.entities) for p in pieces)
        if kept < len(sentence.entities):
            report.layers_dropped["entities(partly)"] = report.layers_dropped.get("entities(partly)", 0) + 1
    return pieces


def _slice(sentence: Sentence, a: int, b: int) -> Sentence:
    entities = None
    if sentence.entities is not None:
        entities = [(s - a, e - a, label) for s, e, label in sentence.entities if s >= a and e <= b]
    return Sentence(words=sentence.words[a:b], pos=sentence.pos[a:b] if sentence.pos else None,
                    entities=entities, source=f"{sentence.source} (words {a}-{b - 1})")


def length_batches(lengths: list[int], batch_size: int, rng: random.Random | None = None,
                   pool: int = 50) -> list[list[int]]:
    """Group example indices into batches of ``batch_size`` of similar length.

    With ``rng`` (training): shuffle, sort within pools of ``pool`` batches, shuffle the batches.
    Without (evaluation): sort everything by length.
    """
    order = list(range(len(lengths)))
    if rng is None:
        order.sort(key=lambda i: lengths[i])
        return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(order)
    batches = []
    step = batch_size * pool
    for p in range(0, len(order), step):
        chunk = sorted(order[p:p + step], key=lambda i: lengths[i])
        batches.extend(chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size))
    rng.shuffle(batches)
    return batches


def collate(examples: list[Example], pad_id: int, device: torch.device | str | None = None) -> dict[str, torch.Tensor]:
    """Pad a batch: ``input_ids``, ``attention_mask``, ``word_index`` ``[batch, seq]``;
    ``word_mask`` ``[batch, n_words]``. ``device``: where the tensors go (default: stay on the CPU;
    copied with ``non_blocking=True``)."""
    seq = max(len(e.input_ids) for e in examples)
    n_words = max(len(e.sentence.words) for e in examples)
    input_ids = torch.full((len(examples), seq), pad_id, dtype=torch.long)
    word_index = torch.full((len(examples), seq), -1, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), seq), dtype=torch.long)
    word_mask = torch.zeros((len(examples), n_words), dtype=torch.bool)
    for i, e in enumerate(examples):
        input_ids[i, : len(e.input_ids)] = torch.tensor(e.input_ids)
        word_index[i, : len(e.word_index)] = torch.tensor(e.word_index)
        attention_mask[i, : len(e.input_ids)] = 1
        word_mask[i, : len(e.sentence.words)] = True
    batch = {"input_ids": input_ids, "attention_mask": attention_mask, "word_index": word_index, "word_mask": word_mask}
    return batch if device is None else {k: v.to(device, non_blocking=True) for k, v in batch.items()}


def task_probabilities(n_batches: dict[str, int], alpha: float) -> dict[str, float]:
    """P(task) proportional to (number of batches) ** alpha."""
    weights = {t: n ** alpha for t, n in n_batches.items() if n > 0}
    total = sum(weights.values())
    return {t: w / total for t, w in weights.items()}


def epoch_plan(batches: dict[str, list[list[int]]], alpha: float, rng: random.Random) -> list[tuple[str, list[int]]]:
    """The steps of one epoch: ``sum(n_batches)`` steps, each a task drawn with
    :func:`task_probabilities` and that task's next batch (a task whose batches run out starts
    over in a new order). Deterministic given ``rng``, so a resumed run rebuilds the same plan."""
    names = sorted(t for t, b in batches.items() if b)
    probs = task_probabilities({t: len(batches[t]) for t in names}, alpha)
    n_steps = sum(len(batches[t]) for t in names)
    picks = rng.choices(names, weights=[probs[t] for t in names], k=n_steps)
    queues = {t: list(batches[t]) for t in names}
    cursor = dict.fromkeys(names, 0)
    plan = []
    for task in picks:
        if cursor[task] == len(queues[task]):
            rng.shuffle(queues[task])
            cursor[task] = 0
        plan.append((task, queues[task][cursor[task]]))
        cursor[task] += 1
    return plan


# --- examples per task ------------------------------------------------------------------------
def prepare_examples(corpus: dict, tasks: dict, encoder, policy: str, log: Callable,
                     task_splits: dict | None = None, require_train: bool = True) -> dict:
    """``{role: {task: [Example]}}``: each role's sentences tokenised once with ``encoder``'s tokenizer
    and length limit (``policy``: ``data.long_policy``); each task keeps those
    that carry the layers it needs. ``task_splits`` (``data.task_splits``) lets one task read
    another role's sentences, e.g. ``{ner: {train: dev}}`` (EWT annotates entities on dev/test only).
    A task left with no ``train`` sentence is a DataError saying why, unless ``require_train`` is
    False (evaluation)."""
    tokenised, reports = {}, {}
    for role, sentences in corpus.items():
        tokenised[role], reports[role] = tokenize(sentences, encoder.tokenizer, encoder.max_length, policy)
        log(f"data {role}: " + "; ".join(reports[role].lines()))
    remap = check_task_splits(task_splits, tasks, corpus)
    examples = {role: {} for role in corpus}
    for role in corpus:
        for name, task in tasks.items():
            source = remap.get(name, {}).get(role, role)
            usable = [e for e in tokenised[source] if task.usable(e.sentence)]
            left_out = len(tokenised[source]) - len(usable)
            examples[role][name] = usable
            log(f"  {role} {name}: {len(usable)} sentences" + (f" (from {source})" if source != role else "")
                + (f" ({left_out} without the '{'/'.join(task.needs)}' layer left out)" if left_out else ""))
            if role == "train" and require_train and not usable:
                raise DataError(f"task '{name}' has no training sentence: "
                                + _why_empty(len(corpus[source]), reports[source].skipped, left_out, task, source,
                                             encoder.max_length))
    return examples


def _why_empty(n_read: int, n_long: int, n_without: int, task, split: str, limit: int) -> str:
    """Why a task's training set came out empty, for the error message."""
    if n_read == 0:
        return f"the '{split}' split holds no sentence (see data.* and data.max_sentences)"
    reasons = []
    if n_long:
        reasons.append(f"{n_long} of {n_read} longer than the encoder limit of {limit} sub-words "
                       "(skipped under data.long_policy=skip; data.long_policy=split keeps them)")
    if n_without:
        reasons.append(f"{n_without} without the '{'/'.join(task.needs)}' layer (see data.unannotated and "
                       "data.task_splits)")
    return f"all {n_read} sentences of the '{split}' split were left out: " + "; ".join(reasons)


def check_task_splits(value, tasks: dict, corpus: dict) -> dict[str, dict[str, str]]:
    """``data.task_splits`` as ``{task: {role: source role}}``, checked."""
    remap = OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value or {})
    for name, roles in remap.items():
        if name not in tasks:
            raise ConfigError(f"config key 'data.task_splits.{name}': {name} is not among the tasks {', '.join(tasks)}")
        if not isinstance(roles, dict) or any(r not in corpus or s not in corpus for r, s in roles.items()):
            raise ConfigError(f"config key 'data.task_splits.{name}': expected {{role: role}} with roles "
                              f"{', '.join(corpus)}, got {roles!r}")
    return remap


def move_to(obj, device: torch.device):
    """Tensors in ``obj`` (a tensor, or dicts/lists/tuples of them) moved to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: move_to(v, device) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(move_to(v, device) for v in obj)
    return obj
