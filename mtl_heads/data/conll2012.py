"""Reader and writer for the CoNLL-2012 ``*_conll`` format (OntoNotes 5, our EWT corpus).

One row per word, whitespace-separated columns::

    1 doc id   2 part   3 word index (0-based)   4 word   5 POS   6 parse bit
    7 predicate lemma   8 frameset / sense number   9 word sense   10 speaker
    11 named entities   12 .. 11+N one SRL column per predicate   last: coreference

A predicate is a row whose column 8 is not ``-`` (``get.01`` in propbank-release and our EWT
files, just ``01`` in OntoNotes 5 proper); the i-th SRL column belongs to the i-th predicate.
Sentences are separated by blank lines; documents are wrapped in ``#begin document (...)`` /
``#end document``; other ``#`` lines are ignored. The markers are checked (an unclosed document,
the mark of a truncated file, is an error); a file that has markers keeps every row inside a
document, while a file with no marker at all is read as one run of sentences.

Every problem with an input file is a :class:`~mtl_heads.data.errors.DataError` whose message
starts with "path:line: ": decoding (invalid UTF-8, NUL bytes; a UTF-8 byte-order mark and
``\r\n`` line ends are fine), document markers, columns, and the parse and bracket columns.
"""

import os
from pathlib import Path

from mtl_heads.data.errors import MissingDataError, data_error, read_lines
from mtl_heads.data.sentence import Sentence
from mtl_heads.data.trees import brackets_to_spans, parse_bits_to_tree, spans_to_brackets, tree_to_parse_bits

MIN_COLUMNS = 12  # 11 fixed columns + coreference; each predicate adds one SRL column
WORD, POS, PARSE, LEMMA, FRAMESET, NE, FIRST_SRL = 3, 4, 5, 6, 7, 10, 11  # 0-based columns

Row = tuple[int, list[str]]  # (1-based line number, columns)

PLACEHOLDER_FRAMESET = "?"
"""Column 8 of written predicate rows: a Sentence keeps no frameset, only that the row is one."""


# ---------------------------------------------------------------- reading


def read_conll2012(path: str | os.PathLike, empty_ne_file_is_unannotated: bool = False) -> list[Sentence]:
    """Read CoNLL-2012 sentences.

    Args:
        path: a ``*_conll`` file, or a folder whose files ending in ``_conll`` are read
            (recursively, in sorted path order).
        empty_ne_file_is_unannotated: a file whose NE column holds no entity at all is taken as
            not NE-annotated (``entities = None``) rather than "no entity anywhere" (``[]``):
            corpora leave the column as ``*`` when they lack NER (e.g. our EWT train split).
            Default False: in OntoNotes a short document may well have no entity, and it is a
            true negative. Training runs declare unannotated splits with ``data.unannotated``.

    Returns:
        the sentences, in file order; raises DataError ("path:line: ...") on bad input.
    """
    sentences = []
    for file in conll2012_files(path):
        sentences.extend(_read_file(file, empty_ne_file_is_unannotated))
    return sentences


def conll2012_files(path: str | os.PathLike) -> list[Path]:
    """The files :func:`read_conll2012` reads for ``path`` (a file or a folder)."""
    path = Path(path)
    if not path.exists():
        raise MissingDataError(f"{path}:1: no such file or folder; expected a *_conll file or a folder of them")
    if path.is_file():
        return [path]
    files = sorted(p for p in path.rglob("*_conll") if p.is_file())
    if not files:
        raise MissingDataError(f"{path}:1: folder holds no file whose name ends in '_conll'")
    return files


def _read_file(path: Path, empty_ne_file_is_unannotated: bool) -> list[Sentence]:
    """Read the sentences of one file (see :func:`read_conll2012`)."""
    blocks = _row_blocks(path)
    if not blocks:
        raise data_error(f"{path}:1", "no sentences found; expected CoNLL-2012 rows of at least "
                                      f"{MIN_COLUMNS} whitespace-separated columns")
    sentences = [_sentence(path, rows) for rows in blocks]
    if empty_ne_file_is_unannotated and not any(s.entities for s in sentences):
        for sentence in sentences:
            sentence.entities = None
    return sentences


def _row_blocks(path: Path) -> list[list[Row]]:
    """Split a file into sentences: lists of (line number, columns) rows.

    Document markers are checked here: a ``#begin document`` must be closed by ``#end document``
    before the next one begins and before the file ends (an unclosed document is what a truncated
    file looks like), and an ``#end document`` must close an open document. A file that uses the
    markers (its first row comes after a ``#begin document``, as our writer always writes it) must
    keep every row inside a document; a file with no marker at all (some corpora have none) is
    read as one run of sentences.
    """
    blocks: list[list[Row]] = []
    rows: list[Row] = []
    begun = None  # line of the open '#begin document'
    ended = None  # line of the last '#end document'
    loose = None  # line of the first row outside any document (a file without markers)
    lines = read_lines(path, "CoNLL-2012 file")
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if text.startswith("#begin document"):
            _check_begin(path, number, begun, loose)
            begun = number
        elif text.startswith("#end document"):
            if begun is None:
                before = f"the last document ended at line {ended}" if ended else "no document began before it"
                raise data_error(f"{path}:{number}", f"'#end document' closes no document ({before}); expected "
                                                     "'#begin document (...)' before it")
            begun, ended = None, number
        elif text.startswith("#"):
            continue
        elif text:
            if begun is None and ended is not None:
                raise data_error(f"{path}:{number}", f"row outside any document (the last one ended at line "
                                                     f"{ended}); expected every row between '#begin document' and "
                                                     "'#end document', as the rest of the file has them")
            if begun is None and loose is None:
                loose = number
            rows.append((number, text.split()))
            continue
        if rows:  # a blank line or a document marker ends the sentence
            blocks.append(rows)
        rows = []
    if begun is not None:
        last = len(lines) - (len(lines) > 1 and lines[-1] == "")  # a final newline starts no line
        raise data_error(f"{path}:{begun}", f"document begun here is never closed: the file ends at line "
                                            f"{last} without its '#end document'; the file looks truncated")
    if rows:
        blocks.append(rows)
    return blocks


def _check_begin(path: Path, number: int, begun: int | None, loose: int | None) -> None:
    """A ``#begin document`` at line ``number`` must not nest or follow rows outside documents."""
    if begun is not None:
        raise data_error(f"{path}:{number}", f"'#begin document' inside the document begun at line {begun}; "
                                             "expected '#end document' first (documents do not nest)")
    if loose is not None:
        raise data_error(f"{path}:{number}", f"'#begin document' after the row at line {loose}, which lies "
                                             "outside any document; expected every row inside a document, or "
                                             "no document markers at all")


def _sentence(path: Path, rows: list[Row]) -> Sentence:
    """Build one Sentence from its rows, checking every layer."""
    where = [f"{path}:{number}" for number, _ in rows]
    columns = [cols for _, cols in rows]
    predicates = _check_columns(columns, where)
    words = [cols[WORD] for cols in columns]
    pos = [cols[POS] for cols in columns]
    return Sentence(
        words=words,
        pos=pos,
        tree=_tree(words, pos, [cols[PARSE] for cols in columns], where),
        entities=_entities([cols[NE] for cols in columns], where),
        predicates=predicates,
        arguments=_arguments(columns, predicates, where),
        source=where[0],
    )


def _check_columns(columns: list[list[str]], where: list[str]) -> list[int]:
    """Check column counts and word indices; return the predicate word indices."""
    count = len(columns[0])
    if count < MIN_COLUMNS:
        raise data_error(where[0], f"row has {count} columns; expected at least {MIN_COLUMNS} (doc id, part, "
                                   "word index, word, POS, parse bit, lemma, frameset, sense, speaker, NE, "
                                   "one SRL column per predicate, coreference)")
    for i, cols in enumerate(columns):
        if len(cols) != count:
            raise data_error(where[i], f"row has {len(cols)} columns; expected {count} like the sentence's "
                                       f"first row ({where[0]})")
        if cols[2] != str(i):
            raise data_error(where[i], f"word index {cols[2]!r}; expected {i} (0-based, consecutive within "
                                       "the sentence)")
    predicates = [i for i, cols in enumerate(columns) if cols[FRAMESET] != "-"]
    if count != MIN_COLUMNS + len(predicates):
        raise data_error(where[0], f"sentence has {len(predicates)} predicates (rows whose column 8 is not "
                                   f"'-') but {count} columns; expected {MIN_COLUMNS} + {len(predicates)} = "
                                   f"{MIN_COLUMNS + len(predicates)}")
    return predicates


def _tree(words: list[str], pos: list[str], bits: list[str], where: list[str]):
    """The parse tree, or None when every parse bit is ``-``."""
    if all(bit == "-" for bit in bits):
        return None
    return parse_bits_to_tree(words, pos, bits, where)


def _entities(column: list[str], where: list[str]):
    """The NE spans, or None when every NE cell is ``-``."""
    if all(cell == "-" for cell in column):
        return None
    return brackets_to_spans(column, where, "NE column (11)")


def _arguments(columns: list[list[str]], predicates: list[int], where: list[str]):
    """The SRL spans of each predicate's column; each must hold a ``V`` span."""
    arguments = []
    for k, predicate in enumerate(predicates):
        name = f"SRL column {k + 1} (predicate {columns[predicate][WORD]!r})"
        spans = brackets_to_spans([cols[FIRST_SRL + k] for cols in columns], where, name)
        if not any(label == "V" for _, _, label in spans):
            raise data_error(where[predicate], f"{name} has no '(V*' span; expected the "
                                               "predicate's V span")
        arguments.append(spans)
    return arguments


# ---------------------------------------------------------------- writing


def write_conll2012(sentences: list[Sentence], path: str | os.PathLike, doc_id: str = "doc") -> Path:
    """Write ``sentences`` as one CoNLL-2012 document so that :func:`read_conll2012` gives them back.

    Args:
        sentences: the sentences; ``pos`` and ``words`` are required, other layers optional.
        path: the file to write (atomically: a temporary file, then ``os.replace``).
        doc_id: the document id (column 1 and the ``#begin document`` line).

    Missing layers are written as ``-`` (POS, parse bits, NE) or as no SRL column (read back as
    ``predicates == []``). A Sentence keeps no predicate lemma or frameset, so a predicate row gets
    its word as lemma and :data:`PLACEHOLDER_FRAMESET` as frameset.
    """
    path = Path(path)
    lines = [f"#begin document ({doc_id}); part 000"]
    for sentence in sentences:
        lines.extend(_sentence_lines(sentence, doc_id))
        lines.append("")
    lines.append("#end document")
    _write_atomically(path, "\n".join(lines) + "\n")
    return path


def _sentence_lines(sentence: Sentence, doc_id: str) -> list[str]:
    """The rows of one sentence, columns right-aligned for readability."""
    n = len(sentence.words)
    _check_writable(sentence)
    pos = sentence.pos if sentence.pos is not None else _tree_tags(sentence.tree, n)
    bits = tree_to_parse_bits(sentence.tree) if sentence.tree is not None else ["-"] * n
    ne = spans_to_brackets(sentence.entities, n) if sentence.entities is not None else ["-"] * n
    predicates = sentence.predicates or []
    srl = [spans_to_brackets(spans, n) for spans in (sentence.arguments or [])]
    rows = []
    for i, word in enumerate(sentence.words):
        lemma, frameset = (word, PLACEHOLDER_FRAMESET) if i in predicates else ("-", "-")
        rows.append([doc_id, "0", str(i), word, pos[i], bits[i], lemma, frameset, "-", "-", ne[i]]
                    + [column[i] for column in srl] + ["-"])
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [" ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]


def _tree_tags(tree, n: int) -> list[str]:
    """The preterminal labels of ``tree``, or ``-`` placeholders when there is no tree."""
    return [tag for _, tag in tree.pos()] if tree is not None else ["-"] * n


def _check_writable(sentence: Sentence) -> None:
    """Raise ValueError for a sentence the format cannot hold."""
    if not sentence.words:
        raise ValueError(f"{sentence.source}: a sentence needs at least one word")
    if len(set(sentence.predicates or [])) != len(sentence.predicates or []):
        raise ValueError(f"{sentence.source}: a word is predicate twice: {sentence.predicates}")
    if any(not word or len(word.split()) != 1 for word in sentence.words):
        raise ValueError(f"{sentence.source}: a word is empty or holds whitespace: {sentence.words}")
    if len(sentence.predicates or []) != len(sentence.arguments or []):
        raise ValueError(f"{sentence.source}: {len(sentence.predicates or [])} predicates but "
                         f"{len(sentence.arguments or [])} argument lists")


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
