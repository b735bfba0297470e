"""Put a trained model to work: the :class:`Predictor` API.

Example::

    from mtl_heads.analysis.inference import Predictor

    predictor = Predictor.load("runs/<run>")                   # or runs/<run>/removal; tasks=["pos", "dep"]
    s = predictor.predict("The cat sat on the mat.")          # raw text of ONE sentence -> Sentence
    s.pos, s.entities, s.heads, s.rels, s.tree, s.predicates, s.arguments
    s = predictor.predict(["The", "cat", "sat", "."])         # one pre-tokenised sentence -> Sentence
    many = predictor.predict([["A", "dog", "."], "Raw text two."])   # a list of either -> [Sentence]
    sentences, stats = predictor.predict_sentences(texts, batch_size=64, progress=True)
    print(stats.sentences_per_second, stats.too_long)

What goes in: a string is the raw text of one sentence, split into words by NLTK's Penn Treebank
tokenizer (:func:`mtl_heads.data.text.tokenize_text`); a list of strings is one sentence's words;
a :class:`Sentence` gives its words (its own layers are not read, and not copied). ``predict`` on
a list whose items are lists (or Sentences, or strings mixed with those) predicts many;
``predict_sentences`` always takes many, and there a string item is one sentence of raw text. A
word must be a non-empty string without whitespace (every output format can write it); anything
else is a ``DataError`` naming the sentence.

What comes out: a new ``Sentence`` per input, in input order, with the words and ``source`` of the
input and every requested task's layer (``Task.annotate``): ``pos``; ``entities`` (spans);
``heads``/``rels``; ``tree`` (leaves = words, preterminals = the predicted POS when POS is predicted
too, else ``_``); ``predicates``/``arguments``. Sentences are predicted in batches sorted by length
(one encoder pass per batch feeds every decoder: ``MultiTaskModel.decode_all``).

Sentences longer than the encoder's limit (``encoder.max_length`` sub-words) are never dropped:
with ``long_policy="skip"`` (default) they come back with their layers ``None``; with ``"split"``
they are cut into pieces that fit (``batching.split_sentence``), and the word-level layers (POS,
NER) of the pieces are joined, while the tree, dependency and SRL layers stay ``None``. Either way
``stats.too_long`` counts them.

A word the tokenizer turns into no sub-word (a lone zero-width or control character, which BERT's
normaliser strips) is fed to the encoder as the unknown token, so it still gets a vector and a
prediction; ``stats.empty_words`` counts such words (``batching.tokenize`` does this for training
too).
"""
from __future__ import annotations

import contextlib
import gc
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, NamedTuple

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, load_saved_config, pos_column
from mtl_heads.data.batching import collate, length_batches, tokenize
from mtl_heads.data.errors import data_error
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.text import check_words, tokenize_text
from mtl_heads.folders import is_run_dir
from mtl_heads.training.build import load_removal, load_run, pick_device
from mtl_heads.model.precision import autocast, uses_bf16
from mtl_heads.model.removal import HEADS
from mtl_heads.progress import Unit, progress_bar

__all__ = ["Predictor", "PredictStats", "Prediction", "LONG_POLICIES", "WORD_LEVEL_TASKS"]

LONG_POLICIES = ("skip", "split")
WORD_LEVEL_TASKS = frozenset({"pos", "ner"})
"""Tasks whose prediction is one label per word, so that the pieces of a split sentence join up."""

ANNOTATE_FIRST = ("pos",)
"""Tasks annotated first: a CON tree takes its preterminals from the sentence's predicted POS."""


@dataclass
class PredictStats:
    """What one :meth:`Predictor.predict_sentences` call did.

    sentences, words: given (and returned); too_long: over the encoder limit (layers None under
    ``skip``; ``split``: cut into ``pieces`` pieces); empty_words: words with no sub-word, fed as
    the unknown token; batches: encoder passes; seconds: wall time of the whole call
    (tokenisation, model, annotation).
    """

    sentences: int = 0
    words: int = 0
    too_long: int = 0
    pieces: int = 0
    empty_words: int = 0
    batches: int = 0
    seconds: float = 0.0
    long_policy: str = "skip"

    @property
    def sentences_per_second(self) -> float:
        return self.sentences / self.seconds if self.seconds > 0 else float("inf")

    @property
    def words_per_second(self) -> float:
        return self.words / self.seconds if self.seconds > 0 else float("inf")

    def lines(self) -> list[str]:
        """A short human report."""
        if self.long_policy == "skip":
            long = f"{self.too_long} skipped as too long (written with empty layers)"
        else:
            long = f"{self.too_long} too long, split into {self.pieces} pieces (POS/NER joined; tree, DEP, SRL empty)"
        out = [f"{self.sentences} sentences, {self.words} words; {long}",
               f"{self.sentences_per_second:.1f} sentences/s, {self.words_per_second:.1f} words/s "
               f"({self.seconds:.2f} s, {self.batches} batches)"]
        if self.empty_words:
            out.append(f"{self.empty_words} words had no sub-word and were fed as the unknown token")
        return out


class Prediction(NamedTuple):
    """What :meth:`Predictor.predict_sentences` returns: the sentences (input order) and the stats."""

    sentences: list[Sentence]
    stats: PredictStats


class Predictor:
    """A trained multi-task model ready to annotate sentences.

    Args:
        model: a ``MultiTaskModel`` (its encoder must carry its tokenizer).
        tasks: the tasks to predict (names, or a comma-separated string); default all the model's.
        device: where it runs (the model is moved there).
        precision: ``auto`` (bf16 autocast on CUDA), ``fp32`` or ``bf16`` (see ``mtl_heads.model.precision``).
        long_policy: ``skip`` or ``split`` sentences over the encoder limit (module docstring).
        pos_column: the CoNLL-U column POS tags belong in (``xpos``/``upos``; the run's ``data.pos``).
        source: where the model came from, for messages.
    """

    def __init__(self, model, tasks=None, device: str | torch.device = "cpu", precision: str = "auto",
                 long_policy: str = "skip", pos_column: str = "xpos", source: str | Path | None = None,
                 cfg: DictConfig | None = None):
        self.device = pick_device(device) if isinstance(device, str) else device
        uses_bf16(self.device, precision)  # checks the value
        if long_policy not in LONG_POLICIES:
            raise ConfigError(f"config key 'long_policy': expected {' or '.join(LONG_POLICIES)}, got {long_policy!r}")
        self.model = model.to(self.device).eval()
        self.source = str(source) if source is not None else type(model).__name__
        self.tasks = self._pick_tasks(tasks)
        self.precision = precision
        self.long_policy = long_policy
        self.pos_column = pos_column
        self.cfg = cfg
        if getattr(model.encoder, "tokenizer", None) is None:
            raise ConfigError(f"{self.source}: the model's encoder has no tokenizer; cannot turn words into sub-words")

    # --- loading ------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, device: str | torch.device = "auto", tasks=None, precision: str = "auto",
             long_policy: str = "skip") -> "Predictor":
        """A predictor from a run folder (``runs/<run>``, written by ``python -m mtl_heads.train``)
        or a removal folder (``runs/<run>/removal``, written by ``python -m mtl_heads remove``).

        ``tasks`` naming a task the model was not trained on is a ConfigError naming the key."""
        path = Path(path)
        device = pick_device(device) if isinstance(device, str) else device
        uses_bf16(device, precision)
        heads_file = _removal_marker()
        if is_run_dir(path):
            loaded = load_run(path, device=device)
            model, cfg = loaded.model, loaded.cfg
        elif path.is_dir() and (path / heads_file).exists():
            cfg = load_saved_config(path / "config.yaml") if (path / "config.yaml").exists() else None
            attn = OmegaConf.select(cfg, "encoder.attn_implementation", default="sdpa") if cfg is not None else "sdpa"
            model = load_removal(path, device=device, attn_implementation=attn)
            if not hasattr(model, "decoders"):
                raise ConfigError(f"{path}: an encoder with heads removed but without task decoders; remove the "
                                  "heads of a trained run (`python -m mtl_heads remove runs/<run>`) to predict with it")
        else:
            raise ConfigError(f"{path} is neither a finished run folder (config.yaml, labels.json, model.safetensors) "
                              f"nor a removal folder ({heads_file}); train one with `python -m mtl_heads.train` "
                              "or write one with `python -m mtl_heads remove runs/<run>`")
        return cls(model, tasks=tasks, device=device, precision=precision, long_policy=long_policy,
                   pos_column=_pos_column(cfg), source=path, cfg=cfg)

    def _pick_tasks(self, tasks) -> list[str]:
        trained = list(self.model.decoders)
        if tasks is None:
            names = trained
        else:
            names = [t.strip() for t in tasks.split(",")] if isinstance(tasks, str) else [str(t) for t in tasks]
            if not names or not all(names):
                raise ConfigError(f"config key 'tasks': give tasks to predict, e.g. tasks={','.join(trained)}")
            if len(set(names)) != len(names):
                raise ConfigError(f"config key 'tasks': a task is listed twice: {names}")
            missing = [t for t in names if t not in trained]
            if missing:
                raise ConfigError(f"config key 'tasks': {self.source} was trained on {', '.join(trained)}, "
                                  f"not on {', '.join(missing)}")
        # POS first: a CON tree takes its preterminals from the predicted POS
        return sorted(names, key=lambda t: (t not in ANNOTATE_FIRST, names.index(t)))

    @property
    def task_objects(self) -> dict:
        """``{name: Task}`` of the tasks predicted."""
        return {name: self.model.tasks[name] for name in self.tasks}

    # --- predicting -----------------------------------------------------------------------------
    def predict(self, x):
        """Predict one sentence or many.

        Args:
            x: a string (the raw text of ONE sentence), a list of strings (one sentence's words), a
                ``Sentence``, or a list of such sentences (strings in it are raw text).

        Returns:
            a ``Sentence`` for one sentence, a list of them for many (module docstring).
        """
        if isinstance(x, (str, Sentence)) or _is_token_list(x):
            return self.predict_sentences([x]).sentences[0]
        if isinstance(x, (list, tuple)):
            return self.predict_sentences(x).sentences
        raise TypeError(f"predict takes a string, a list of words, a Sentence or a list of those; got "
                        f"{type(x).__name__}")

    @torch.no_grad()
    def predict_sentences(self, sentences: Iterable, batch_size: int = 32, progress: bool = False) -> Prediction:
        """Predict many sentences in length-sorted batches of ``batch_size``; output in input order.

        Args:
            sentences: items as for :meth:`predict` (a string is one sentence of raw text, a list of
                strings one sentence's words, a ``Sentence`` its words).
            batch_size: sentences per encoder pass.
            progress: a progress bar (sentences) on stderr; plain lines when stderr is not a terminal
                (:mod:`mtl_heads.progress`).

        Returns:
            ``Prediction(sentences, stats)``.
        """
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise ConfigError(f"config key 'batch_size': expected an integer >= 1, got {batch_size!r}")
        with _collector_paused():
            return self._predict_sentences(sentences, batch_size, progress)

    def _predict_sentences(self, sentences: Iterable, batch_size: int, progress: bool) -> Prediction:
        started = time.perf_counter()
        out = [self._as_sentence(item, i) for i, item in enumerate(sentences)]
        stats = PredictStats(sentences=len(out), words=sum(len(s.words) for s in out), long_policy=self.long_policy)
        encoder = self.model.encoder
        examples, report = tokenize(out, encoder.tokenizer, encoder.max_length, "skip")
        stats.empty_words = report.empty_words
        position = {id(s): i for i, s in enumerate(out)}
        work = [(e, position[id(e.sentence)], None) for e in examples]  # (example, sentence index, piece offset)
        fits = {id(e.sentence) for e in examples}
        too_long = [i for i, s in enumerate(out) if id(s) not in fits]
        stats.too_long = len(too_long)
        if self.long_policy == "split":
            for i in too_long:
                pieces, _ = tokenize([out[i]], encoder.tokenizer, encoder.max_length, "split")
                stats.pieces += len(pieces)
                offset = 0
                for piece in pieces:
                    work.append((piece, i, offset))
                    offset += len(piece.sentence.words)
        tasks = self.task_objects
        joined: dict[int, list] = {}  # sentence index -> [(offset, {task: prediction})] of its pieces
        pad_id = encoder.tokenizer.pad_token_id
        batches = length_batches([len(e.input_ids) for e, _, _ in work], batch_size)
        with progress_bar(total=len(work), unit=Unit("sent"), desc="predict", disable=not progress) as bar:
            for ids in batches:
                chunk = [work[j] for j in ids]
                batch = collate([e for e, _, _ in chunk], pad_id, self.device)
                with autocast(self.device, self.precision):
                    predictions = self.model.decode_all(batch, self.tasks)  # one encoder pass for every task
                for k, (_, index, offset) in enumerate(chunk):
                    if offset is None:
                        for name, task in tasks.items():
                            task.annotate(out[index], predictions[name][k])
                    else:
                        joined.setdefault(index, []).append(
                            (offset, {name: predictions[name][k] for name in tasks if name in WORD_LEVEL_TASKS}))
                stats.batches += 1
                bar.update(len(chunk))
        for index, pieces in joined.items():
            pieces.sort(key=lambda p: p[0])
            for name, task in tasks.items():
                if name in WORD_LEVEL_TASKS:
                    task.annotate(out[index], [label for _, preds in pieces for label in preds[name]])
        stats.seconds = time.perf_counter() - started
        return Prediction(out, stats)

    def _as_sentence(self, item, i: int) -> Sentence:
        """A fresh words-only Sentence for one input item (see :meth:`predict_sentences`)."""
        if isinstance(item, Sentence):
            where = item.source or f"sentence {i + 1}"
            return Sentence(words=check_words(item.words, where), source=item.source)
        where = f"sentence {i + 1}"
        if isinstance(item, str):
            words = tokenize_text(item)
            if not words:
                raise data_error(where, f"the text {item!r} holds no word")
            return Sentence(words=check_words(words, where))
        if _is_token_list(item):
            return Sentence(words=check_words(list(item), where))
        raise data_error(where, f"expected a string of raw text, a list of words or a Sentence, got "
                                f"{type(item).__name__}: {item!r:.60}")


@contextlib.contextmanager
def _collector_paused():
    """Python's cyclic garbage collector paused for the block. Predicting makes tens of thousands of
    small objects that hold no cycle (trees, spans, label lists); their allocations set off
    collections that walk every object of the process, the corpus read in and earlier predictions
    included, and find nothing to collect (their measured share of the prediction time:
    ``docs/guides/benchmarks.md``). The collector runs again, as before, once the block ends."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _is_token_list(x) -> bool:
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(w, str) for w in x)


def _pos_column(cfg: DictConfig | None) -> str:
    """The POS column the run was trained on (``data.pos``, ``auto`` resolved: UPOS for CoNLL-U
    corpora, XPOS, i.e. PTB tags, otherwise): where CoNLL-U output puts the predicted tags."""
    data = OmegaConf.select(cfg, "data", default=None) if cfg is not None else None
    return pos_column(data) if data is not None and "format" in data else "xpos"


def _removal_marker() -> str:
    return HEADS
