"""Plain inputs for prediction: raw text, pre-tokenised text, the words of a CoNLL-U file, and
JSON lines (read and written).

Raw text is one sentence per line, split into words by NLTK's ``NLTKWordTokenizer`` (the Penn
Treebank rules of ``nltk.word_tokenize``, without its punkt sentence splitter, which needs a
download): ``can't`` -> ``ca n't``, punctuation apart, ``U.S.`` kept whole. The words keep the
characters as written (the tokenizer's spans are cut out of the line), so ``"`` stays ``"``
rather than becoming PTB's ``````/``''`` and ``(`` stays ``(``: the conventions of the EWT corpus.
Pre-tokenised text (``tokenized=True``) is split on whitespace. Blank lines are skipped (an empty
sentence has nothing to predict); every sentence keeps its ``path:line`` as ``source``.

A word is a non-empty string without whitespace (what every output format can hold); anything
else is a :class:`~mtl_heads.data.errors.DataError` naming ``path:line`` (and the key, for JSON).

JSON lines: one object per line, ``{"words": [...]}`` or ``{"text": "..."}`` (tokenised as raw
text, or on whitespace with ``tokenized=True``; ``words`` wins when both are given), plus any
layers: ``pos``, ``entities`` (``[[start, end_exclusive, label], ...]``), ``heads`` (1-based,
0 = root), ``rels``, ``tree`` (a PTB bracket string whose leaves are the words, brackets in words
written ``-LRB-``/``-RRB-``), ``predicates`` and ``arguments`` (per predicate
``[[start, end_exclusive, role], ...]``). :func:`write_jsonl` writes every layer (``null`` where a
sentence lacks it) and :func:`read_jsonl` reads them back.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import nltk

from mtl_heads.data.conllu import FORM, word_rows
from mtl_heads.data.errors import DataError, data_error, read_lines
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.trees import MAX_TREE_DEPTH, ptb_line, too_deep
from mtl_heads.files import atomic_write_text

__all__ = ["tokenize_text", "check_words", "read_text", "read_conllu_words", "read_jsonl", "write_jsonl",
           "sentence_to_json"]

_TOKENIZER = None


def tokenize_text(text: str) -> list[str]:
    """The words of one sentence of raw text by the Penn Treebank rules (``NLTKWordTokenizer``),
    each word the characters of the text it covers (no quote or bracket conversion)."""
    global _TOKENIZER
    if _TOKENIZER is None:
        _TOKENIZER = nltk.tokenize.NLTKWordTokenizer()
    try:
        return [text[start:end] for start, end in _TOKENIZER.span_tokenize(text)]
    except ValueError:  # the tokens could not be aligned back onto the text: take them as converted
        return _TOKENIZER.tokenize(text)


def check_words(words, where: str, key: str | None = None) -> list[str]:
    """``words`` as a list, or DataError at ``where`` when it is empty or a word is not a non-empty
    string without whitespace (``key``: the JSON key, for the message)."""
    what = f"key '{key}': " if key else ""
    if not isinstance(words, (list, tuple)) or not words:
        raise data_error(where, f"{what}expected a non-empty list of words, got {_show(words)}")
    for i, word in enumerate(words):
        if not isinstance(word, str) or not word or any(ch.isspace() for ch in word):
            raise data_error(where, f"{what}word {i + 1} is {_show(word)}; expected a non-empty string without "
                                    "whitespace (split multi-word tokens, or give raw text to be tokenised)")
    return list(words)


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _no_sentence(path, what: str) -> DataError:
    return data_error(f"{path}:1", f"no sentence found: the file is empty or holds only blank lines; expected {what}")


# ---------------------------------------------------------------- text


def read_text(path: str | os.PathLike, tokenized: bool = False) -> list[Sentence]:
    """One sentence per non-blank line of a UTF-8 text file: raw text split by
    :func:`tokenize_text`, or with ``tokenized=True`` words separated by whitespace. Blank lines
    are skipped; ``source`` is the line's ``path:line``."""
    sentences = []
    for number, line in enumerate(read_lines(path, "text file, one sentence per line"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        words = line.split() if tokenized else tokenize_text(line)
        sentences.append(Sentence(words=check_words(words, where), source=where))
    if not sentences:
        raise _no_sentence(path, "one sentence per line")
    return sentences


# ---------------------------------------------------------------- CoNLL-U words


def read_conllu_words(path: str | os.PathLike) -> list[Sentence]:
    """The words (FORM, column 2) of each sentence of a CoNLL-U file, for prediction: the lines are checked
    as the training reader checks them (:func:`~mtl_heads.data.conllu.word_rows`: 10 tab-separated columns,
    ids 1..n; multi-word token ranges ``1-2`` and empty nodes ``8.1`` skipped), the other columns may hold
    anything (``_`` heads too) and are not read. A sentence whose every FORM is ``_`` (a treebank
    distributed without its text) has no words to predict on: a DataError at its first line, as are bad
    lines and a FORM with whitespace."""
    sentences: list[Sentence] = []
    for words in word_rows(path):
        for number, cols in words:
            if any(ch.isspace() for ch in cols[FORM]):
                raise data_error(f"{path}:{number}", f"FORM {_show(cols[FORM])} holds whitespace; expected a word")
        sentences.append(_conllu_sentence(path, words[0][0], [cols[FORM] for _, cols in words]))
    if not sentences:
        raise _no_sentence(path, "CoNLL-U word lines (ID, FORM, ... tab-separated)")
    return sentences


def _conllu_sentence(path, first: int, words: list[str]) -> Sentence:
    where = f"{path}:{first}"
    if all(word == "_" for word in words):
        raise data_error(where, "sentence has no words: every FORM (column 2) is '_' (a treebank distributed "
                                "without its text?); expected the words to predict on")
    return Sentence(words=words, source=where)


# ---------------------------------------------------------------- JSON lines


def read_jsonl(path: str | os.PathLike, tokenized: bool = False) -> list[Sentence]:
    """One sentence per non-blank line, each a JSON object (see the module docstring); layers
    present in the object are read and checked, ``source`` is the line's ``path:line``."""
    sentences = []
    for number, line in enumerate(read_lines(path, "JSON-lines file"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise data_error(where, f"not valid JSON at character {err.colno} ({err.msg}); expected one object per "
                                    'line, e.g. {"words": ["Hello", "!"]} or {"text": "Hello!"}') from None
        sentences.append(_json_sentence(obj, where, tokenized))
    if not sentences:
        raise _no_sentence(path, 'one JSON object per line, e.g. {"words": ["Hello", "!"]} or {"text": "Hello!"}')
    return sentences


def _json_sentence(obj, where: str, tokenized: bool) -> Sentence:
    if not isinstance(obj, dict):
        raise data_error(where, f"a JSON {type(obj).__name__}; expected an object with 'words' or 'text'")
    if obj.get("words") is not None:
        words = check_words(obj["words"], where, "words")
    elif obj.get("text") is not None:
        text = obj["text"]
        if not isinstance(text, str):
            raise data_error(where, f"key 'text': expected a string, got {_show(text)}")
        words = check_words(text.split() if tokenized else tokenize_text(text), where, "text")
    else:
        raise data_error(where, f"no key 'words' or 'text' (keys: {', '.join(map(str, obj)) or 'none'}); expected "
                                'e.g. {"words": ["Hello", "!"]} or {"text": "Hello!"}')
    n = len(words)
    sentence = Sentence(words=words, source=where)
    sentence.pos = _labels(obj, "pos", n, where)
    sentence.rels = _labels(obj, "rels", n, where)
    if obj.get("heads") is not None:
        heads = obj["heads"]
        if not isinstance(heads, list) or len(heads) != n or any(
                not isinstance(h, int) or isinstance(h, bool) or not 0 <= h <= n for h in heads):
            raise data_error(where, f"key 'heads': expected {n} integers in 0..{n} (1-based, 0 = root)")
        sentence.heads = heads
    if obj.get("entities") is not None:
        sentence.entities = _spans(obj["entities"], n, where, "entities")
    if obj.get("predicates") is not None or obj.get("arguments") is not None:
        predicates, arguments = obj.get("predicates"), obj.get("arguments")
        if not isinstance(predicates, list) or not isinstance(arguments, list) or len(predicates) != len(arguments) \
                or any(not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < n for p in predicates):
            raise data_error(where, f"keys 'predicates'/'arguments': expected word indices in 0..{n - 1} and one "
                                    "argument list per predicate")
        sentence.predicates = predicates
        sentence.arguments = [_spans(args, n, where, f"arguments[{k}]") for k, args in enumerate(arguments)]
    if obj.get("tree") is not None:
        sentence.tree = _tree(obj["tree"], words, where)
    return sentence


def _labels(obj: dict, key: str, n: int, where: str):
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) != n or not all(isinstance(x, str) and x for x in value):
        raise data_error(where, f"key '{key}': expected {n} non-empty strings (one per word), got {_show(value)}")
    return value


def _spans(value, n: int, where: str, key: str) -> list:
    ok = isinstance(value, list) and all(
        isinstance(s, list) and len(s) == 3 and all(isinstance(i, int) and not isinstance(i, bool) for i in s[:2])
        and isinstance(s[2], str) and s[2] and 0 <= s[0] < s[1] <= n for s in value)
    spans = sorted(tuple(s) for s in value) if ok else []
    if not ok or any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
        raise data_error(where, f"key '{key}': expected non-overlapping [start, end_exclusive, label] spans within "
                                f"0..{n}, got {_show(value)}")
    return spans


def _tree(text, words: list[str], where: str) -> nltk.Tree:
    if not isinstance(text, str):
        raise data_error(where, f"key 'tree': expected a bracketed tree string, got {_show(text)}")
    if too_deep(text):
        raise data_error(where, f"key 'tree': nests constituents more than {MAX_TREE_DEPTH} deep")
    try:
        tree = nltk.Tree.fromstring(text)
    except ValueError as err:
        raise data_error(where, f"key 'tree': not a bracketed tree ({err})") from None
    positions = tree.treepositions("leaves")
    if len(positions) != len(words) or any(len(p) < 2 for p in positions):
        raise data_error(where, f"key 'tree': {len(positions)} leaves for {len(words)} words; expected one leaf per "
                                "word, each under its own preterminal")
    for position, word in zip(positions, words):  # leaves were written escaped: take the words back
        tree[position] = word
    return tree


def sentence_to_json(sentence: Sentence) -> dict:
    """The JSON object of one sentence: every layer, ``null`` where the sentence lacks it, and its
    ``source``."""
    def spans(value):
        return None if value is None else [list(s) for s in value]

    return {"words": list(sentence.words), "pos": sentence.pos, "entities": spans(sentence.entities),
            "heads": sentence.heads, "rels": sentence.rels,
            "tree": None if sentence.tree is None else ptb_line(sentence.tree),
            "predicates": sentence.predicates,
            "arguments": None if sentence.arguments is None else [spans(a) for a in sentence.arguments],
            "source": sentence.source or None}


def write_jsonl(sentences: list[Sentence], path: str | os.PathLike) -> Path:
    """Write one JSON object per sentence (:func:`sentence_to_json`), in order, atomically."""
    path = Path(path)
    atomic_write_text(path, "".join(json.dumps(sentence_to_json(s), ensure_ascii=False) + "\n" for s in sentences))
    return path

