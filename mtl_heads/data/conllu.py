"""CoNLL-U reader and writer (any Universal Dependencies treebank), and the alignment of CoNLL-U
sentences onto CoNLL-2012 sentences (our EWT corpus).

Hand-written rather than the ``conllu`` package: the format is tiny (10 tab-separated columns,
``#`` comments, blank line between sentences), and we want every error to name ``path:line``,
which the package does not report: every problem with the file (invalid UTF-8, a NUL byte, column
counts, ids, heads, a column filled on some words only) is a DataError at the line. A UTF-8
byte-order mark and ``\\r\\n`` line ends are fine.

What a Sentence gets from the ten columns (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC):

* ``words``: FORM of the syntactic words, the lines whose ID is an integer. Multi-word-token
  range lines (``1-2 don't``) and empty nodes of enhanced graphs (``8.1``) are skipped, so
  ``don't`` = ``1-2`` over ``1 do`` and ``2 n't`` gives the words ``do n't``. Nothing is
  language-specific: any Unicode FORM is a word as it stands.
* ``pos``: UPOS (``pos="upos"``) or XPOS (``pos="xpos"``).
* ``heads``/``rels``: HEAD and DEPREL (basic tree; checked: heads in 0..n, one root, no cycle);
  ``deprel="universal"`` strips the subtype (``nsubj:pass`` -> ``nsubj``).
* ``entities``: BIO tags in MISC under the key ``NER`` (``NER=B-PER``, ``NER=I-PER``, ``NER=O``),
  read into spans as conlleval does (an ``I-X`` that does not continue an ``X`` span starts one).
  This is what :func:`write_conllu` writes, so that a file of predictions can be scored.
* LEMMA, FEATS, DEPS and the rest of MISC are not read.

A layer is annotated on a whole sentence or not at all: a chosen column (UPOS/XPOS, HEAD) that is
``_`` on every word of a sentence, or a MISC without ``NER=`` on every word, means the sentence
does not annotate that layer (the field is None). A split whose column is ``_`` everywhere is thus
declared unannotated for that layer (a task that needs it leaves the split out, and says so), and
sentences left without a layer, as :func:`write_conllu` writes predictions the model skipped, read
back without it (counted in the "left out" line of each task). A column filled on some words of
a sentence and ``_`` on others is a DataError at the first word that lacks it: a sentence with
holes in its tags or tree would train and score silently wrong.

The CoNLL-U writer writes the same columns (LEMMA, FEATS and DEPS as ``_``) and is the inverse of
the reader: ``read_conllu(write_conllu(s, p, pos_column=c), pos=c) == s`` for words, pos, heads,
rels and entities.
"""

import numbers
import os
import re
from pathlib import Path

from mtl_heads.data.errors import MissingDataError, data_error, line_of, read_lines
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.trees import bio_to_spans
from mtl_heads.files import atomic_write_text

ID, FORM, LEMMA, UPOS, XPOS, FEATS, HEAD, DEPREL, DEPS, MISC = range(10)  # 0-based columns
N_COLUMNS = 10
MAX_DIGITS = 9  # of a word id or head
POS_COLUMNS = {"upos": UPOS, "xpos": XPOS}
"""``pos`` option -> the column read into ``Sentence.pos``."""
DEPRELS = ("full", "universal")
"""``deprel`` option: relations as written, or without the ``:subtype``."""
NER_KEY = "NER"
"""The MISC key of the BIO entity tag (``NER=B-PER``)."""
_NOT_A_WORD = re.compile(r"\d+-\d+|\d+\.\d+")  # multi-word token range, enhanced empty node
_NER_VALUE = re.compile(r"O|[BI]-[^\s|=]+")

Row = tuple[int, list[str]]  # (1-based line number, columns)


# ---------------------------------------------------------------- reading


def read_conllu(path: str | os.PathLike, pos: str = "upos", deprel: str = "full") -> list[Sentence]:
    """Read a CoNLL-U file.

    Args:
        path: the ``.conllu`` file.
        pos: the column read as ``Sentence.pos``: ``"upos"`` (default) or ``"xpos"``.
        deprel: ``"full"`` (default; relations as written) or ``"universal"`` (the universal
            relation only: ``nsubj:pass`` -> ``nsubj``).

    Returns:
        one Sentence per sentence with ``words`` (the syntactic words: multi-word-token range
        lines ``1-2`` and empty nodes ``8.1`` are skipped), ``pos``, ``heads`` (1-based, 0 =
        root), ``rels`` and ``entities`` (from ``NER=`` in MISC); a layer left ``_`` on every
        word of a sentence is None there (see the module docstring). Raises DataError
        ("path:line: ...") on bad input, ValueError for an unknown ``pos`` or ``deprel``.
    """
    if pos not in POS_COLUMNS:
        raise ValueError(f"pos={pos!r}; expected one of {', '.join(POS_COLUMNS)}")
    if deprel not in DEPRELS:
        raise ValueError(f"deprel={deprel!r}; expected one of {', '.join(DEPRELS)}")
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"{path}:1: no such file; expected a CoNLL-U file")
    blocks = word_rows(path)
    if not blocks:
        raise data_error(f"{path}:1", "no sentences found; expected CoNLL-U word lines of "
                                      f"{N_COLUMNS} tab-separated columns")
    return [_sentence(path, words, pos, deprel) for words in blocks]


def word_rows(path: str | os.PathLike) -> list[list[Row]]:
    """The word lines of each sentence of a CoNLL-U file (``path``), as (line number, columns): ranges and
    empty nodes dropped; every line of 10 tab-separated columns, ids 1..n, a FORM; else a DataError at the
    line. What :func:`read_conllu` reads its layers from, and prediction (:func:`mtl_heads.data.text.read_conllu_words`)
    its words."""
    path = Path(path)
    return [_word_rows(path, rows) for rows in _row_blocks(path)]


def _row_blocks(path: Path) -> list[list[Row]]:
    """Split a file into sentences: lists of (line number, columns) of its token lines."""
    blocks: list[list[Row]] = []
    rows: list[Row] = []
    for number, line in enumerate(read_lines(path, "CoNLL-U file"), start=1):
        if not line.strip():
            if rows:
                blocks.append(rows)
            rows = []
        elif not line.startswith("#"):
            rows.append((number, line.split("\t")))
    if rows:
        blocks.append(rows)
    return blocks


def _word_rows(path: Path, rows: list[Row]) -> list[Row]:
    """The word lines of one sentence (ranges and empty nodes dropped), with column counts, ids
    and forms checked."""
    words = []
    for number, cols in rows:
        here = f"{path}:{number}"
        if len(cols) != N_COLUMNS:
            raise data_error(here, f"line has {len(cols)} tab-separated columns; expected {N_COLUMNS}")
        if _NOT_A_WORD.fullmatch(cols[ID]):
            continue  # multi-word token range or enhanced empty node: not a word
        _check_id(cols[ID], len(words) + 1, here)
        if not cols[FORM].strip():
            raise data_error(here, f"FORM {_cell(cols[FORM])} is empty; expected the word")
        words.append((number, cols))
    if not words:
        raise data_error(f"{path}:{rows[0][0]}", "sentence has no word line (only ranges or empty nodes)")
    return words


def _annotated(path: Path, given: list[tuple[int, bool]], column: str, expected: str) -> bool:
    """Whether a sentence annotates a layer, from (line, the word has it) of each of its words:
    True when every word has it, False when none has; DataError at the first word without it when
    only some have it."""
    with_it = [number for number, has in given if has]
    if not with_it:
        return False
    without = next((number for number, has in given if not has), None)
    if without is not None:
        raise data_error(f"{path}:{without}",
                         f"{column} is missing ('_') on this word but given on other words of its sentence (line "
                         f"{with_it[0]}); expected {expected} on every word of a sentence, or '_' on all of them for "
                         "a sentence without that annotation")
    return True


def _ner_tag(misc: str, where: str) -> str | None:
    """The ``NER=`` value of a MISC cell (None without one); DataError for a bad or second one."""
    if misc == "_":
        return None
    values = [item[len(NER_KEY) + 1:] for item in misc.split("|") if item.startswith(NER_KEY + "=")]
    if len(values) > 1:
        raise data_error(where, f"MISC {_cell(misc)} has {len(values)} {NER_KEY}= items; expected one")
    if values and not _NER_VALUE.fullmatch(values[0]):
        raise data_error(where, f"MISC {NER_KEY}={_cell(values[0])}; expected O, B-<label> or I-<label>")
    return values[0] if values else None


def _sentence(path: Path, words: list[Row], pos: str, deprel: str) -> Sentence:
    """Build one Sentence from the word lines of one CoNLL-U sentence."""
    first = f"{path}:{words[0][0]}"
    ner = [_ner_tag(cols[MISC], f"{path}:{number}") for number, cols in words]
    has_pos = _annotated(path, [(number, cols[POS_COLUMNS[pos]] != "_") for number, cols in words],
                         pos.upper(), "a tag")
    has_deps = _annotated(path, [(number, cols[HEAD] != "_") for number, cols in words], "HEAD", "a head")
    has_ner = _annotated(path, [(number, tag is not None) for (number, _), tag in zip(words, ner)],
                         f"MISC {NER_KEY}=", "an entity tag (NER=O outside entities)")
    heads, rels = [], []
    for number, cols in words:
        here = f"{path}:{number}"
        if not has_deps:
            if cols[DEPREL] != "_":
                raise data_error(here, f"DEPREL {_cell(cols[DEPREL])} without a head (HEAD is '_' on every word "
                                       "of the sentence); expected '_'")
            continue
        heads.append(_integer(cols[HEAD], "head", here))
        rel = cols[DEPREL] if deprel == "full" else cols[DEPREL].split(":", 1)[0]
        if cols[DEPREL] == "_" or not rel.strip():
            raise data_error(here, f"DEPREL {_cell(cols[DEPREL])} for head {cols[HEAD]}; expected a relation")
        rels.append(rel)
    if has_deps:
        _check_heads(heads, [f"{path}:{number}" for number, _ in words], first)
    return Sentence(words=[cols[FORM] for _, cols in words],
                    pos=[cols[POS_COLUMNS[pos]] for _, cols in words] if has_pos else None,
                    entities=bio_to_spans(ner) if has_ner else None,
                    heads=heads if has_deps else None, rels=rels if has_deps else None, source=first)


def _integer(text: str, what: str, where: str) -> int:
    """``text`` as an int, or DataError at ``where`` naming the column ``what``."""
    if re.fullmatch(r"-?\d+", text) is None:
        raise data_error(where, f"{what} {_cell(text)} is not an integer")
    if len(text) > MAX_DIGITS:  # no sentence is that long; int() refuses over 4300 digits
        raise data_error(where, f"{what} {_cell(text)} has {len(text)} characters; expected a word number "
                                f"of at most {MAX_DIGITS} digits")
    return int(text)


def _cell(text: str) -> str:
    """``text`` quoted for a message, cut short when long."""
    return repr(text if len(text) <= 40 else text[:37] + "...")


def _check_id(text: str, expected: int, where: str) -> None:
    """The word id must be the integer ``expected`` (ids run 1..n in order)."""
    if _integer(text, "id", where) != expected:
        raise data_error(where, f"word id {_cell(text)}; expected {expected} (ids run 1..n in order)")


def _check_heads(heads: list[int], where: list[str], first: str) -> None:
    """Heads in 0..n, exactly one root, no cycle (``first``: the sentence's first line)."""
    n = len(heads)
    for i, head in enumerate(heads):
        if head < 0 or head > n:
            raise data_error(where[i], f"head {head} out of range; expected 0..{n}")
    roots = [i + 1 for i, head in enumerate(heads) if head == 0]
    if len(roots) != 1:
        raise data_error(first, f"sentence has {len(roots)} roots (words {roots}); expected exactly one "
                                "word with head 0")
    for i in range(1, n + 1):
        if not _reaches_root(i, heads):
            raise data_error(first, f"dependency heads form a cycle through word {i}; expected a tree")


def _reaches_root(word: int, heads: list[int]) -> bool:
    """True when following heads from ``word`` (1-based) reaches 0 within n steps."""
    for _ in range(len(heads)):
        word = heads[word - 1]
        if word == 0:
            return True
    return False


# ---------------------------------------------------------------- writing


def write_conllu(sentences: list[Sentence], path: str | os.PathLike, pos_column: str = "upos") -> Path:
    """Write ``sentences`` as CoNLL-U so that :func:`read_conllu` gives them back.

    Args:
        sentences: the sentences; ``words`` required, ``pos``, ``heads``/``rels`` and
            ``entities`` optional per sentence (a sentence without one gets ``_`` there and
            reads back without it).
        path: the file to write (atomically: a temporary file, flushed, then renamed).
        pos_column: ``"upos"`` (default) or ``"xpos"``: the column that gets ``pos``; the other
            is ``_``.

    Columns: ID, FORM, LEMMA ``_``, UPOS/XPOS, FEATS ``_``, HEAD and DEPREL (``_`` without
    dependencies), DEPS ``_``, MISC ``NER=B-<label>``/``NER=I-<label>``/``NER=O`` on every word
    of a sentence with ``entities`` (``[]`` included), else ``_``. Each sentence gets
    ``# sent_id = <1-based index>`` and ``# text = <words joined by spaces>``. Returns ``path``;
    raises ValueError for what CoNLL-U cannot hold (an empty word, a tab or line break in a cell,
    a tag ``_``, dependencies that are not a tree, overlapping entities) before anything is
    written.
    """
    if pos_column not in POS_COLUMNS:
        raise ValueError(f"pos_column={pos_column!r}; expected one of {', '.join(POS_COLUMNS)}")
    lines = []
    for index, sentence in enumerate(sentences, start=1):
        lines.extend(_conllu_lines(sentence, index, POS_COLUMNS[pos_column]))
        lines.append("")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, "\n".join(lines) + ("\n" if lines else ""))
    return path


def _name(sentence: Sentence) -> str:
    return sentence.source or _show(sentence.words)


def _conllu_lines(sentence: Sentence, index: int, pos_at: int) -> list[str]:
    """The comment and word lines of one sentence."""
    n = len(sentence.words)
    where = _name(sentence)
    if n == 0:
        raise ValueError(f"sentence {index}: a sentence needs at least one word")
    for word in sentence.words:
        _check_cell(word, "word", where, allow_space=True)
    if sentence.pos is not None:
        _check_layer(sentence.pos, n, "POS tags", where)
    heads, rels = sentence.heads, sentence.rels
    if sentence.has("deps"):
        _check_layer(rels, n, "relations", where)
        if len(heads) != n:
            raise ValueError(f"{where}: {len(heads)} heads for {n} words")
        if any(not isinstance(h, numbers.Integral) or not 0 <= h <= n for h in heads) or sum(h == 0 for h in heads) != 1 \
                or not all(_reaches_root(i, heads) for i in range(1, n + 1)):
            raise ValueError(f"{where}: heads {heads} are not a tree with one root (heads in 0..{n})")
    ner = _bio(sentence.entities, n, where) if sentence.entities is not None else None
    text = " ".join(sentence.words)
    lines = [f"# sent_id = {index}", f"# text = {text}"]
    for i, word in enumerate(sentence.words):
        row = [str(i + 1), word] + ["_"] * 8
        if sentence.pos is not None:
            row[pos_at] = sentence.pos[i]
        if sentence.has("deps"):
            row[HEAD], row[DEPREL] = str(heads[i]), rels[i]
        if ner is not None:
            row[MISC] = f"{NER_KEY}={ner[i]}"
        lines.append("\t".join(row))
    return lines


def _check_cell(text, what: str, where: str, allow_space: bool = False) -> None:
    """ValueError unless ``text`` is a string a CoNLL-U cell can hold."""
    if not isinstance(text, str) or not text.strip() or re.search(r"[\t\n\r]" if allow_space else r"\s", text):
        raise ValueError(f"{where}: {what} {text!r} cannot be written to CoNLL-U (empty, or holds a tab, "
                         f"line break{'' if allow_space else ' or space'})")


def _check_layer(values: list[str], n: int, what: str, where: str) -> None:
    if len(values) != n:
        raise ValueError(f"{where}: {len(values)} {what} for {n} words")
    for value in values:
        _check_cell(value, what[:-1], where)
        if value == "_":
            raise ValueError(f"{where}: {what[:-1]} '_' would read back as 'not annotated'")


def _bio(entities: list, n: int, where: str) -> list[str]:
    """BIO tags of non-overlapping ``entities``; ValueError for overlaps or bad labels."""
    tags = ["O"] * n
    end_of_last = 0
    for start, end, label in sorted(entities):
        if start < end_of_last or not 0 <= start < end <= n:
            raise ValueError(f"{where}: entity {(start, end, label)} overlaps another or lies outside 0..{n}; "
                             "BIO tags hold non-overlapping entities only")
        if not _NER_VALUE.fullmatch(f"B-{label}"):
            raise ValueError(f"{where}: entity label {label!r} cannot be written as NER=B-<label> in MISC")
        tags[start:end] = [f"B-{label}"] + [f"I-{label}"] * (end - start - 1)
        end_of_last = end
    return tags


# ---------------------------------------------------------------- CoNLL-2012 + CoNLL-U (EWT)


def attach_conllu(sentences: list[Sentence], conllu_sentences: list[Sentence], conllu_path: str | os.PathLike,
                  layers: tuple[str, ...] = ("deps",)) -> None:
    """Copy layers from aligned CoNLL-U sentences onto CoNLL-2012 sentences, in place.

    Args:
        sentences: CoNLL-2012 sentences (from :func:`read_conll2012`).
        conllu_sentences: the same sentences, same order, from :func:`read_conllu`: their words
            are the syntactic words (FORM of the integer-id lines), as in our EWT files.
        conllu_path: the CoNLL-U file, for error messages.
        layers: what to copy: ``"deps"`` (heads and rels; the default) and/or ``"pos"`` (the
            CoNLL-U sentences' ``pos``, e.g. UPOS in place of the CoNLL-2012 PTB tags; the
            constituency tree keeps its PTB preterminals).

    Raises DataError at the CoNLL-U sentence's first line (naming the CoNLL-2012 sentence)
    when counts or words differ; nothing is changed then.
    """
    unknown = set(layers) - {"deps", "pos"}
    if unknown:
        raise ValueError(f"layers {sorted(unknown)}; expected 'deps' and/or 'pos'")
    for sentence, other in zip(sentences, conllu_sentences):
        if other.words != sentence.words:
            raise data_error(_where(conllu_path, other), f"CoNLL-U words {_show(other.words)} differ from "
                                                         f"the CoNLL-2012 sentence at {sentence.source}: "
                                                         f"{_show(sentence.words)}; expected the same words")
    if len(sentences) != len(conllu_sentences):
        raise _count_error(sentences, conllu_sentences, conllu_path)
    for sentence, other in zip(sentences, conllu_sentences):
        if "deps" in layers:
            sentence.heads = list(other.heads) if other.heads is not None else None
            sentence.rels = list(other.rels) if other.rels is not None else None
        if "pos" in layers:
            sentence.pos = list(other.pos) if other.pos is not None else None


def _count_error(sentences, conllu_sentences, conllu_path):
    """The DataError for sentence lists of different lengths."""
    n, m = len(sentences), len(conllu_sentences)
    if m > n:
        where = _where(conllu_path, conllu_sentences[n])
        what = f"CoNLL-U sentence {n + 1} has no CoNLL-2012 counterpart"
    else:
        where = _where(conllu_path, conllu_sentences[-1]) if m else f"{conllu_path}:1"
        what = f"CoNLL-U ends before the CoNLL-2012 sentence at {sentences[m].source}"
    first = sentences[0].source if sentences else "(no CoNLL-2012 sentence)"
    return data_error(where, f"{what}: {m} CoNLL-U sentences but {n} CoNLL-2012 sentences "
                             f"(from {first}); expected the same sentences in the same order")


def _where(conllu_path, sentence: Sentence) -> str:
    """``conllu_path:line`` of a CoNLL-U sentence."""
    return f"{conllu_path}:{line_of(sentence.source)}"


def _show(words: list[str]) -> str:
    """A short rendering of a word list for messages."""
    text = " ".join(words)
    return repr(text if len(text) <= 80 else text[:77] + "...")
