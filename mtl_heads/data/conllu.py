"""CoNLL-U reader (words, XPOS, basic dependencies) and its alignment onto CoNLL-2012 sentences.

Hand-written rather than the ``conllu`` package: the format is tiny (10 tab-separated columns,
``#`` comments, blank line between sentences), and we want every error to name ``path:line``,
which the package does not report: every problem with the file (invalid UTF-8, a NUL byte, column
counts, ids, heads) is a DataError at the line. A UTF-8 byte-order mark and ``\r\n`` line ends
are fine.
"""

import os
import re
from pathlib import Path

from mtl_heads.data.errors import MissingDataError, data_error, line_of, read_lines
from mtl_heads.data.sentence import Sentence

ID, FORM, XPOS, HEAD, DEPREL = 0, 1, 4, 6, 7  # 0-based columns
N_COLUMNS = 10
MAX_DIGITS = 9  # of a word id or head
_NOT_A_WORD = re.compile(r"\d+-\d+|\d+\.\d+")  # multi-word token range, enhanced empty node

Row = tuple[int, list[str]]  # (1-based line number, columns)


def read_conllu(path: str | os.PathLike) -> list[Sentence]:
    """Read a CoNLL-U file.

    Args:
        path: the ``.conllu`` file.

    Returns:
        one Sentence per sentence with ``words``, ``pos`` (XPOS; None when a word has ``_``),
        ``heads`` (1-based, 0 = root) and ``rels``; multi-word-token range lines (``1-2``) and
        empty nodes (``8.1``) are skipped. Raises DataError ("path:line: ...") on bad input.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingDataError(f"{path}:1: no such file; expected a CoNLL-U file")
    blocks = _row_blocks(path)
    if not blocks:
        raise data_error(f"{path}:1", "no sentences found; expected CoNLL-U word lines of "
                                      f"{N_COLUMNS} tab-separated columns")
    return [_sentence(path, rows) for rows in blocks]


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


def _sentence(path: Path, rows: list[Row]) -> Sentence:
    """Build one Sentence from the token lines of one CoNLL-U sentence."""
    first = f"{path}:{rows[0][0]}"
    words, xpos, heads, rels, where = [], [], [], [], []
    for number, cols in rows:
        here = f"{path}:{number}"
        if len(cols) != N_COLUMNS:
            raise data_error(here, f"line has {len(cols)} tab-separated columns; expected {N_COLUMNS}")
        if _NOT_A_WORD.fullmatch(cols[ID]):
            continue  # multi-word token range or enhanced empty node: not a word
        _check_id(cols[ID], len(words) + 1, here)
        words.append(cols[FORM])
        xpos.append(cols[XPOS])
        heads.append(_integer(cols[HEAD], "head", here))
        rels.append(cols[DEPREL])
        where.append(here)
    _check_heads(heads, where, first)
    pos = None if "_" in xpos else xpos
    return Sentence(words=words, pos=pos, heads=heads, rels=rels, source=first)


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
    if n == 0:
        raise data_error(first, "sentence has no word line (only ranges or empty nodes)")
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


def attach_conllu(sentences: list[Sentence], conllu_sentences: list[Sentence], conllu_path: str | os.PathLike) -> None:
    """Copy heads/rels from aligned CoNLL-U sentences onto CoNLL-2012 sentences, in place.

    Args:
        sentences: CoNLL-2012 sentences (from :func:`read_conll2012`).
        conllu_sentences: the same sentences, same order, from :func:`read_conllu`.
        conllu_path: the CoNLL-U file, for error messages.

    Raises DataError at the CoNLL-U sentence's first line (naming the CoNLL-2012 sentence)
    when counts or words differ; nothing is changed then.
    """
    for sentence, other in zip(sentences, conllu_sentences):
        if other.words != sentence.words:
            raise data_error(_where(conllu_path, other), f"CoNLL-U words {_show(other.words)} differ from "
                                                         f"the CoNLL-2012 sentence at {sentence.source}: "
                                                         f"{_show(sentence.words)}; expected the same words")
    if len(sentences) != len(conllu_sentences):
        raise _count_error(sentences, conllu_sentences, conllu_path)
    for sentence, other in zip(sentences, conllu_sentences):
        sentence.heads = list(other.heads)
        sentence.rels = list(other.rels)


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
