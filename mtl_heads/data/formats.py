"""File formats by name: the readers and writers of ``python -m mtl_heads predict``.

Two plain dicts map a format name to the function that lives beside its format in
``mtl_heads/data/``; adding a format is one line in each (and an extension in
:data:`EXTENSIONS` if it has one):

========== ============================================ ===========================================
name       reader (``fn(path) -> [Sentence]``)          writer (``fn(sentences, path)``)
========== ============================================ ===========================================
text       ``text.read_text`` (raw or tokenised lines)  --
conllu     ``text.read_conllu_words`` (FORM only)       ``conllu.write_conllu`` (``pos_column=``)
conll2012  ``conll2012.read_conll2012``                 ``conll2012.write_conll2012``
jsonl      ``text.read_jsonl``                          ``text.write_jsonl``
ptb        --                                           ``write_ptb``
========== ============================================ ===========================================

Readers in :data:`TOKENIZING` take ``tokenized=`` (raw text split by NLTK's Penn Treebank
tokenizer, or on whitespace). The CoNLL-U reader of prediction input reads the words only, so a
file without annotations (``_`` heads) is fine; ``conllu.read_conllu`` reads gold annotations.
"""
from __future__ import annotations

import os
from pathlib import Path

from mtl_heads.config import ConfigError
from mtl_heads.data.conll2012 import read_conll2012, write_conll2012
from mtl_heads.data.conllu import write_conllu
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.text import read_conllu_words, read_jsonl, read_text, write_jsonl
from mtl_heads.data.trees import ptb_line
from mtl_heads.files import atomic_write_text

__all__ = ["READERS", "WRITERS", "TOKENIZING", "EXTENSIONS", "LAYERS_WRITTEN", "format_by_name", "input_format",
           "output_format", "read", "write", "write_ptb"]


def write_ptb(sentences: list, path):
    """Write each sentence's constituency tree as one PTB bracket line (:func:`ptb_line`), in order.

    A sentence without a tree (``tree is None``: not predicted, or too long for the encoder) is an
    empty line, so that line ``i`` of the file always belongs to sentence ``i``. Written
    atomically (a temporary file, then a rename); returns the path.
    """
    path = Path(path)
    lines = ["" if s.tree is None else ptb_line(s.tree) for s in sentences]
    atomic_write_text(path, "".join(line + "\n" for line in lines))
    return path


READERS = {
    "text": read_text,
    "conllu": read_conllu_words,
    "conll2012": read_conll2012,
    "jsonl": read_jsonl,
}

WRITERS = {
    "conll2012": write_conll2012,
    "conllu": write_conllu,
    "ptb": write_ptb,
    "jsonl": write_jsonl,
}

TOKENIZING = frozenset({"text", "jsonl"})
"""Readers that split text into words themselves and take ``tokenized=``."""

EXTENSIONS = {
    "_conll": "conll2012",   # OntoNotes' *.gold_conll, *.v4_gold_conll, *_conll
    ".conll": "conll2012",
    ".conllu": "conllu",
    ".ptb": "ptb",
    ".trees": "ptb",
    ".jsonl": "jsonl",
    ".txt": "text",
}
"""File name endings -> format (checked longest first, case-insensitively)."""

LAYERS_WRITTEN = {
    "conll2012": ("pos", "tree", "entities", "srl"),
    "conllu": ("pos", "deps", "entities"),
    "ptb": ("tree",),
    "jsonl": ("pos", "tree", "entities", "srl", "deps"),
}
"""The Sentence layers each writer keeps (``Sentence.has`` names); the others are not written."""


def format_by_name(path: str | os.PathLike) -> str | None:
    """The format that the ending of ``path``'s name says, or None."""
    name = Path(path).name.lower()
    for ending in sorted(EXTENSIONS, key=len, reverse=True):
        if name.endswith(ending):
            return EXTENSIONS[ending]
    return None


def input_format(path: str | os.PathLike, given: str = "auto", key: str = "input.format") -> str:
    """``given``, or with ``auto`` the format of ``path``'s name, text for a name that says none."""
    if given != "auto":
        if given not in READERS:
            raise ConfigError(f"config key '{key}': expected auto, {', '.join(READERS)}; got {given!r}")
        return given
    found = format_by_name(path)
    return found if found in READERS else "text"


def output_format(path: str | os.PathLike, given: str = "auto", key: str = "format") -> str:
    """``given``, or with ``auto`` the format of ``path``'s name; a name that says none is an error."""
    if given != "auto":
        if given not in WRITERS:
            raise ConfigError(f"config key '{key}': expected auto, {', '.join(WRITERS)}; got {given!r}")
        return given
    found = format_by_name(path)
    if found not in WRITERS:
        endings = ", ".join(e for e, f in EXTENSIONS.items() if f in WRITERS)
        raise ConfigError(f"config key '{key}': cannot tell the output format from the name {Path(path).name!r} "
                          f"(known endings: {endings}); give {key}={'|'.join(WRITERS)}")
    return found


def read(path: str | os.PathLike, format: str = "auto", tokenized: bool = False) -> list[Sentence]:
    """The sentences of ``path`` in ``format`` (``auto``: by its name, else text)."""
    name = input_format(path, format)
    reader = READERS[name]
    return reader(path, tokenized=tokenized) if name in TOKENIZING else reader(path)


def write(sentences: list[Sentence], path: str | os.PathLike, format: str = "auto", pos_column: str = "xpos") -> Path:
    """Write ``sentences`` to ``path`` in ``format`` (``auto``: by its name). ``pos_column``: the
    CoNLL-U column of POS tags (``xpos`` or ``upos``, as the run was trained)."""
    name = output_format(path, format)
    writer = WRITERS[name]
    writer(sentences, path, pos_column=pos_column) if name == "conllu" else writer(sentences, path)
    return Path(path)
