"""Build the five-layer EWT corpus (``../shared/data/ewt``) from its three public sources.

The corpus pairs, sentence by sentence, a PropBank EWT skeleton (POS, parse bits, SRL; the word
column holds ``[WORD]`` placeholders) with the UD_English-EWT source file of the same document
(words, UD trees) and, in dev and test, the Universal NER sentence of the same UD ``sent_id``
(PER/ORG/LOC). :func:`build_corpus` reads the three repositories (:data:`REPOS`, at the pinned
commits), writes ``en_ewt.{train,dev,test}.{gold_conll,conllu}``, the three licence files and a
README.md that gives the counts, the dropped sentences, the checks run on the written files and
the caveats; it returns a :class:`BuildSummary` of the same numbers. Built from the pinned sources
(``../shared/data/ewt-sources``) every file is byte-identical to ``../shared/data/ewt`` but for one
count in README.md that the published text has wrong (``tests/test_ewt_build.py`` says which).

Alignment (the README's "How the layers were aligned" says the same to the corpus' users):

* documents in the order of propbank-release's ``docs/evaluation/ewt.<split>.txt``; a listed
  document without a skeleton is left out (``document_has_no_propbank_skeleton``);
* skeleton sentence k pairs with UD sentence k when their word counts (UD integer-id lines) are
  equal, else it is dropped (``token_count_mismatch``);
* only when the two sides of a document have different numbers of sentences: a skeleton sentence
  whose words are those of 2-3 consecutive UD sentences (counts add up, POS agreement >= 50%) is
  dropped and pairing resumes after them (``ud_split_sentence``), 2-3 skeleton sentences that make
  one UD sentence likewise (``ud_merged_sentences``), and a skeleton sentence with no UD sentence
  left to pair is dropped (``no_ud_sentence``);
* NER is taken from the UNER sentence of the same ``sent_id`` when its token count equals the UD
  word count; an ``I-`` tag that continues no entity starts one (counted as a repair).

Standard library plus the data layer's own helpers (errors, bracket columns, parse bits): it sits
on the data floor and imports nothing above ``mtl_heads/data``.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mtl_heads.data.conll2012 import FIRST_SRL, FRAMESET, MIN_COLUMNS, NE, PARSE, POS, WORD
from mtl_heads.data.conllu import _reaches_root
from mtl_heads.data.errors import DataError, MissingDataError, data_error, read_lines
from mtl_heads.data.trees import bio_to_spans, brackets_to_spans, parse_bits_to_tree

SPLITS = ("train", "dev", "test")
NER_SPLITS = ("dev", "test")
"""The splits UNER annotates (its train release is not in the pinned snapshot)."""


# ---------------------------------------------------------------- the three repositories


@dataclass(frozen=True)
class Repo:
    """One source repository of the corpus.

    Args:
        key: its name in :func:`build_corpus`'s ``roots`` ("propbank", "ud", "uner").
        folder: its folder name (as in ``../shared/data/ewt-sources`` and a git clone).
        github: ``owner/name`` on GitHub.
        commit: the pinned commit the corpus is built from.
        licence: the licence file in the repository.
        licence_out: the name of its copy in the corpus.
    """

    key: str
    folder: str
    github: str
    commit: str
    licence: str
    licence_out: str

    @property
    def url(self) -> str:
        return f"https://github.com/{self.github}"


REPOS = {repo.key: repo for repo in (
    Repo("propbank", "propbank-release", "propbank/propbank-release",
         "4abade0b53ce4a181e1d98b3518101c1a44d395a", "LICENSE", "LICENSE-propbank.txt"),
    Repo("ud", "UD_English-EWT", "UniversalDependencies/UD_English-EWT",
         "15d613d8447b3478787d4c278730a1e48a945efb", "LICENSE.txt", "LICENSE-ud.txt"),
    Repo("uner", "UNER_English-EWT", "UniversalNER/UNER_English-EWT",
         "8ed072de2fd24022cc62458997fe96a8fe191ea4", "LICENSE.txt", "LICENSE-uner.txt"),
)}
"""The source repositories by key, in the order the README names them."""

UD_SNAPSHOT_DATE = "2025-05-10"
"""The date of the pinned UD commit (a development state between releases; the README names it)."""

SPLIT_LIST = "docs/evaluation/ewt.{split}.txt"
SKELETONS = "data/google/ewt"
UD_SOURCES = "not-to-release/sources"
UD_RELEASE = "en_ewt-ud-{split}.conllu"
UNER_FILE = "en_ewt-ud-{split}.iob2"
README = "README.md"
DOC_PREFIX = "google/ewt/"
"""Skeleton doc ids are ``google/ewt/<name>`` for a split-list entry ``<name>``."""


def source_files(name: str, root: str | Path) -> list[str]:
    """The repository-relative paths (sorted, ``/``-separated) of the files the build reads.

    Args:
        name: a :data:`REPOS` key ("propbank", "ud", "uner") or folder name ("propbank-release", ...).
        root: the repository's root folder: the per-document files are those present there
            (skeletons ``data/google/ewt/*/*/*.gold_skel``, UD sources
            ``not-to-release/sources/*/*.xml.conllu``); fixed files are listed whether present
            or not (the build then reports them missing).
    """
    root = Path(root)
    repo = next((repo for repo in REPOS.values() if name in (repo.key, repo.folder)), None)
    if repo is None:
        raise ValueError(f"unknown repository {name!r}; expected one of {', '.join(REPOS)}")
    name = repo.key
    if name == "propbank":
        fixed = [SPLIT_LIST.format(split=split) for split in SPLITS]
        pattern = f"{SKELETONS}/*/*/*.gold_skel"
    elif name == "ud":
        fixed = [README] + [UD_RELEASE.format(split=split) for split in NER_SPLITS]
        pattern = f"{UD_SOURCES}/*/*.xml.conllu"
    else:
        fixed = [README] + [UNER_FILE.format(split=split) for split in NER_SPLITS]
        pattern = None
    found = [p.relative_to(root).as_posix() for p in root.glob(pattern) if p.is_file()] if pattern else []
    return sorted({repo.licence, *fixed, *found})


# ---------------------------------------------------------------- reading the sources

SKEL_DOC, SKEL_WORD, SKEL_POS, SKEL_PARSE, SKEL_FRAMESET = 0, 3, 4, 5, 7  # 0-based .gold_skel columns
SKEL_COLUMNS = 8  # doc id, sentence index, word index, [WORD], POS, parse bit, lemma, frameset; then SRL


@dataclass
class SkeletonSentence:
    """One sentence of a PropBank ``.gold_skel`` file.

    Args:
        index: 0-based sentence index in the skeleton (= in the EWT ``.tree`` file).
        where: "path:line" of its first row.
        rows: per word, the skeleton's columns (doc id, sentence index, word index, ``[WORD]``,
            POS, parse bit, predicate lemma, frameset, then one SRL column per predicate).
    """

    index: int
    where: str
    rows: list[list[str]]

    @property
    def pos(self) -> list[str]:
        return [row[SKEL_POS] for row in self.rows]

    @property
    def size(self) -> int:
        return len(self.rows)


@dataclass
class UdSentence:
    """One sentence of a UD source file.

    Args:
        sent_id: its ``# sent_id``.
        comments: its comment lines except ``# newdoc`` and ``# newpar``, verbatim.
        lines: its token lines verbatim, multi-word-token ranges and empty nodes included.
        words: the tab-separated columns of its integer-id lines (the syntactic words).
        where: "path:line" of its first line.
    """

    sent_id: str
    comments: list[str]
    lines: list[str]
    words: list[list[str]]
    where: str

    @property
    def forms(self) -> list[str]:
        return [cols[1] for cols in self.words]

    @property
    def pos(self) -> list[str]:
        """The XPOS tags (UD's revised Penn Treebank tags)."""
        return [cols[4] for cols in self.words]

    @property
    def size(self) -> int:
        return len(self.words)


@dataclass
class Document:
    """One document of a split list with its two sides.

    Args:
        name: the split-list entry without ``.conllu``, e.g. ``answers/00/20070404104007AAY1Chs_ans.xml``.
        split: "train", "dev" or "test".
        ud_id: the UD ``# newdoc id``.
        ud: the UD sentences.
        skeleton: the skeleton sentences, None when propbank-release has no skeleton for it.
        ud_text: the UD source file's text (to check it against the UD release).
    """

    name: str
    split: str
    ud_id: str
    ud: list[UdSentence]
    skeleton: list[SkeletonSentence] | None
    ud_text: str = field(default="", repr=False)

    @property
    def doc_id(self) -> str:
        return DOC_PREFIX + self.name


def read_split_list(path: Path) -> list[str]:
    """The document names of a propbank-release split list, in order (``.conllu`` suffixes, which
    the dev list has, removed); DataError for a missing file or a malformed entry."""
    names = []
    for number, line in enumerate(read_lines(path, "split list (one document per line)"), start=1):
        name = line.strip().removesuffix(".conllu")
        if not name:
            continue
        if not re.fullmatch(r"[a-z]+/\d\d/[^/\s]+\.xml", name):
            raise data_error(f"{path}:{number}", f"entry {line.strip()!r}; expected <genre>/<nn>/<NAME>.xml "
                                                 "(optionally followed by .conllu)")
        names.append(name)
    if not names:
        raise data_error(f"{path}:1", "split list names no document; expected one <genre>/<nn>/<NAME>.xml per line")
    return names


def read_skeleton(path: Path, doc_id: str) -> list[SkeletonSentence]:
    """The sentences of a ``.gold_skel`` file, each checked (:func:`_check_skeleton_sentence`).

    Args:
        path: the file.
        doc_id: the document id its first column must hold.
    """
    sentences: list[SkeletonSentence] = []
    rows: list[tuple[int, list[str]]] = []
    lines = read_lines(path, "PropBank skeleton (.gold_skel)")
    for number, line in enumerate(lines + [""], start=1):
        if line.strip():
            rows.append((number, line.split()))
        elif rows:
            sentences.append(_check_skeleton_sentence(path, len(sentences), rows, doc_id))
            rows = []
    if not sentences:
        raise data_error(f"{path}:1", "no sentence found; expected CoNLL-2012 skeleton rows")
    return sentences


def _check_skeleton_sentence(path: Path, index: int, rows: list[tuple[int, list[str]]],
                             doc_id: str) -> SkeletonSentence:
    """Check one skeleton sentence (columns, ids, SRL column count, balanced brackets).

    Args:
        path: the skeleton file, for messages.
        index: the sentence's 0-based index in the file.
        rows: its (line number, columns) rows.
        doc_id: the document id column 1 must hold.
    """
    width = len(rows[0][1])
    for i, (number, cols) in enumerate(rows):
        here = f"{path}:{number}"
        if len(cols) != width or width < SKEL_COLUMNS:
            raise data_error(here, f"row has {len(cols)} columns; expected {max(width, SKEL_COLUMNS)} like the "
                                   "sentence's first row, at least 8 (the file may be truncated)")
        if cols[SKEL_DOC:SKEL_WORD] != [doc_id, str(index), str(i)]:
            raise data_error(here, f"row starts {' '.join(cols[SKEL_DOC:SKEL_WORD])!r}; expected {doc_id} {index} {i} "
                                   "(doc id, sentence index, word index)")
    _check_balanced(path, rows, [SKEL_PARSE] + list(range(SKEL_COLUMNS, width)))
    framesets = sum(cols[SKEL_FRAMESET] != "-" for _, cols in rows)
    if width != SKEL_COLUMNS + framesets:
        raise data_error(f"{path}:{rows[0][0]}", f"sentence has {framesets} framesets but {width} columns; expected "
                                                 f"{SKEL_COLUMNS} + one SRL column per frameset (the file may be "
                                                 "truncated)")
    return SkeletonSentence(index, f"{path}:{rows[0][0]}", [cols for _, cols in rows])


def _check_balanced(path: Path, rows: list[tuple[int, list[str]]], columns: list[int]) -> None:
    """Brackets of each of ``columns`` (parse bits, SRL) never close more than they opened and are
    all closed at the sentence's end (a truncated file fails here)."""
    for column in columns:
        depth = 0
        for number, cols in rows:
            depth += cols[column].count("(") - cols[column].count(")")
            if depth < 0:
                raise data_error(f"{path}:{number}", f"column {column + 1} closes a bracket never opened")
        if depth:
            raise data_error(f"{path}:{rows[-1][0]}", f"column {column + 1} leaves {depth} bracket(s) open at "
                                                      "the sentence's end; the file may be truncated")


def read_ud_document(path: Path) -> tuple[str, list[UdSentence], str]:
    """The ``# newdoc id``, the sentences and the text of one UD source file (``<NAME>.xml.conllu``)."""
    lines = read_lines(path, "UD source file (CoNLL-U)")
    doc_id, sentences, block = None, [], []
    for number, line in enumerate(lines + [""], start=1):
        if line.startswith("# newdoc id = ") and doc_id is None:
            doc_id = line[len("# newdoc id = "):]
        if line:
            block.append((number, line))
        elif block:
            sentences.append(_ud_sentence(path, block))
            block = []
    if doc_id is None or not sentences:
        raise data_error(f"{path}:1", "no '# newdoc id' or no sentence; expected a UD document")
    return doc_id, sentences, "\n".join(lines)


def _ud_sentence(path: Path, block: list[tuple[int, str]]) -> UdSentence:
    """One UD sentence from its (line number, line) pairs."""
    comments, lines, words, sent_id = [], [], [], None
    for number, line in block:
        if line.startswith("#"):
            if line.startswith("# sent_id = "):
                sent_id = line[len("# sent_id = "):]
            if not line.startswith(("# newdoc", "# newpar")):
                comments.append(line)
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            raise data_error(f"{path}:{number}", f"line has {len(cols)} tab-separated columns; expected 10")
        lines.append(line)
        if cols[0].isdigit():
            words.append(cols)
    if sent_id is None or not words:
        raise data_error(f"{path}:{block[0][0]}", "sentence without '# sent_id' or without word lines")
    return UdSentence(sent_id, comments, lines, words, f"{path}:{block[0][0]}")


@dataclass
class UnerSentence:
    """One sentence of a UNER ``.iob2`` file: token forms, BIO tags and "path:line"."""

    forms: list[str]
    tags: list[str]
    where: str


UNER_LABELS = {"PER": "PERSON", "ORG": "ORG", "LOC": "LOC"}
"""UNER label -> corpus label (OntoNotes names)."""
_UNER_TAG = re.compile(f"O|[BI]-({'|'.join(UNER_LABELS)})")


def read_uner(path: Path) -> dict[str, UnerSentence]:
    """UNER sentences by ``sent_id``; DataError for a bad row or an unknown tag."""
    sentences: dict[str, UnerSentence] = {}
    current = None
    for number, line in enumerate(read_lines(path, "UNER file (.iob2)"), start=1):
        here = f"{path}:{number}"
        if line.startswith("# sent_id = "):
            current = sentences[line[len("# sent_id = "):]] = UnerSentence([], [], here)
        elif not line:
            current = None
        elif not line.startswith("#"):
            cols = line.split("\t")
            if current is None or len(cols) != 5 or not _UNER_TAG.fullmatch(cols[2]):
                raise data_error(here, f"row {line!r}; expected 5 tab-separated columns with tag O, B-X or I-X "
                                       f"(X in {', '.join(UNER_LABELS)}) after a '# sent_id' line")
            current.forms.append(cols[1])
            current.tags.append(cols[2])
    return sentences


def read_documents(roots: dict[str, Path], split: str) -> list[Document]:
    """The documents of one split, in split-list order, with their UD and skeleton sentences.

    Args:
        roots: repository roots by :data:`REPOS` key.
        split: "train", "dev" or "test".
    """
    documents = []
    for name in read_split_list(roots["propbank"] / SPLIT_LIST.format(split=split)):
        genre, base = name.split("/", 1)[0], name.rsplit("/", 1)[1]
        ud_id, ud, text = read_ud_document(roots["ud"] / UD_SOURCES / genre / f"{base}.conllu")
        skeleton_path = roots["propbank"] / SKELETONS / f"{name}.gold_skel"
        skeleton = read_skeleton(skeleton_path, DOC_PREFIX + name) if skeleton_path.is_file() else None
        documents.append(Document(name, split, ud_id, ud, skeleton, text))
    return documents


def check_ud_release(roots: dict[str, Path], split: str, documents: list[Document]) -> None:
    """The UD source files of ``documents``, concatenated in order, must be the released
    ``en_ewt-ud-<split>.conllu``; DataError at the first line of the release that differs."""
    release = roots["ud"] / UD_RELEASE.format(split=split)
    released = "\n".join(read_lines(release, "released UD CoNLL-U file"))
    joined = "".join(document.ud_text for document in documents)
    if released != joined:
        at = next((k for k, (a, b) in enumerate(zip(released, joined)) if a != b), min(len(released), len(joined)))
        line = released.count("\n", 0, at) + 1
        raise data_error(f"{release}:{line}", f"differs from the {split} documents' UD source files "
                                              f"({UD_SOURCES}/<genre>/<NAME>.xml.conllu) concatenated in split-list "
                                              "order; expected the same text")


# ---------------------------------------------------------------- alignment

NO_SKELETON = "document_has_no_propbank_skeleton"
NO_UD = "no_ud_sentence"
MISMATCH = "token_count_mismatch"
SPLIT = "ud_split_sentence"
MERGED = "ud_merged_sentences"
LOW_AGREEMENT = "low_pos_agreement"
REASONS = (NO_SKELETON, NO_UD, MISMATCH, SPLIT, MERGED, LOW_AGREEMENT)
"""Why a document or a skeleton sentence is left out (NO_SKELETON: a whole document)."""
MAX_GROUP = 3  # a UD split or merge spans at most this many sentences
MIN_GROUP_AGREEMENT = 0.5  # POS agreement that confirms a split or merge
MIN_PAIR_AGREEMENT = 0.5  # a pair of equal word counts is rejected below this POS agreement ...
MIN_CHECKED_WORDS = 4  # ... when it has at least this many words (short ones agree by chance or not)


@dataclass
class Pair:
    """An accepted skeleton-UD sentence pair with its named-entity column.

    Args:
        skeleton: the skeleton sentence (POS, parse bits, SRL).
        ud: the UD sentence (words, UD tree); same word count.
        ne: the NE column (``(PERSON*``, ``*)``, ``(ORG)``, ``*``), one cell per word.
        has_ner: whether UNER annotates the sentence (False: ``ne`` is all ``*``).
    """

    skeleton: SkeletonSentence
    ud: UdSentence
    ne: list[str] = field(default_factory=list)
    has_ner: bool = False


@dataclass
class Drop:
    """A skeleton sentence left out, and why.

    Args:
        split: its split.
        reason: one of :data:`REASONS`.
        document: the document's split-list name.
        skeleton: the skeleton sentence.
        ud: the UD sentence(s) it was compared with (none for ``no_ud_sentence``).
    """

    split: str
    reason: str
    document: str
    skeleton: SkeletonSentence
    ud: list[UdSentence]


def align(document: Document) -> tuple[list[Pair], list[Drop]]:
    """Pair the skeleton sentences of ``document`` with its UD sentences (module docstring)."""
    skeleton, ud = document.skeleton, document.ud
    pairs, drops = [], []
    i = j = 0
    while i < len(skeleton):
        reason, di, dj = _step(skeleton, ud, i, j)
        if reason is None:
            pairs.append(Pair(skeleton[i], ud[j]))
        for k in range(di) if reason else ():
            drops.append(Drop(document.split, reason, document.name, skeleton[i + k], ud[j:j + dj]))
        i, j = i + di, j + dj
    return pairs, drops


def _step(skeleton: list[SkeletonSentence], ud: list[UdSentence], i: int, j: int) -> tuple[str | None, int, int]:
    """What to do with skeleton sentence i and UD sentence j: (drop reason or None to pair them,
    skeleton sentences used, UD sentences used)."""
    if j >= len(ud):
        return NO_UD, 1, 0
    if skeleton[i].size == ud[j].size:
        low = skeleton[i].size >= MIN_CHECKED_WORDS and agreement(skeleton[i].pos, ud[j].pos) < MIN_PAIR_AGREEMENT
        return (LOW_AGREEMENT if low else None), 1, 1
    if len(skeleton) - i != len(ud) - j:  # the two sides differ in sentence count from here on
        k = _group(skeleton[i], ud[j:j + MAX_GROUP])
        if k:
            return SPLIT, 1, k
        k = _group(ud[j], skeleton[i:i + MAX_GROUP])
        if k:
            return MERGED, k, 1
        if len(skeleton) - i > len(ud) - j and skeleton[i + 1].size == ud[j].size:
            return NO_UD, 1, 0
    return MISMATCH, 1, 1


def _group(whole, parts: list) -> int:
    """How many (2..MAX_GROUP) of ``parts`` (consecutive sentences of the other side) make up
    ``whole``: word counts add up and POS agree on at least MIN_GROUP_AGREEMENT; 0 when none."""
    for k in range(2, len(parts) + 1):
        if sum(part.size for part in parts[:k]) == whole.size:
            tags = [tag for part in parts[:k] for tag in part.pos]
            return k if agreement(whole.pos, tags) >= MIN_GROUP_AGREEMENT else 0
    return 0


def agreement(tags: list[str], others: list[str]) -> float:
    """The share of positions where two equally long tag lists agree."""
    return sum(a == b for a, b in zip(tags, others)) / len(tags)


# ---------------------------------------------------------------- named entities


@dataclass
class FormDifference:
    """A token whose UNER form differs from the UD form (UNER was annotated on an older UD)."""

    split: str
    sent_id: str
    uner: str
    ud: str
    in_entity: bool


def attach_ner(pair: Pair, uner: dict[str, UnerSentence] | None, split: str,
               differences: list[FormDifference]) -> int:
    """Fill ``pair.ne`` from the UNER sentence of the pair's ``sent_id``; return the I- tags repaired.

    Args:
        pair: the sentence pair.
        uner: UNER sentences by sent_id, None for a split UNER does not annotate (all ``*``).
        split: the split, for ``differences``.
        differences: where tokens whose UNER and UD forms differ are appended.
    """
    found = uner.get(pair.ud.sent_id) if uner is not None else None
    if found is None or len(found.tags) != pair.ud.size:
        pair.ne, pair.has_ner = ["*"] * pair.ud.size, False
        return 0
    pair.ne, repairs = ne_column(found.tags)
    pair.has_ner = True
    for form, ud_form, tag in zip(found.forms, pair.ud.forms, found.tags):
        if form != ud_form:
            differences.append(FormDifference(split, pair.ud.sent_id, form, ud_form, tag != "O"))
    return repairs


def ne_column(tags: list[str]) -> tuple[list[str], int]:
    """The CoNLL-2012 NE column of BIO ``tags`` (labels renamed by :data:`UNER_LABELS`) and how
    many ``I-`` tags continued no entity (each starts one: the repair)."""
    cells = ["*"] * len(tags)
    repairs = 0
    for start, end, label in bio_to_spans(tags):
        repairs += tags[start].startswith("I-")
        name = UNER_LABELS[label]
        if end - start == 1:
            cells[start] = f"({name})"
        else:
            cells[start], cells[end - 1] = f"({name}*", "*)"
    return cells, repairs


# ---------------------------------------------------------------- writing


def gold_conll_rows(document: Document, pair: Pair) -> list[str]:
    """The CoNLL-2012 rows of one pair, columns right-aligned within the sentence."""
    rows = [[document.doc_id, "0", str(i), word, *cols[SKEL_POS:SKEL_COLUMNS], "-", "-", ne,
             *cols[SKEL_COLUMNS:], "-"]
            for i, (cols, word, ne) in enumerate(zip(pair.skeleton.rows, pair.ud.forms, pair.ne))]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    return [" ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]


def conllu_lines(document: Document, pair: Pair, first: bool) -> list[str]:
    """The CoNLL-U lines of one pair: UD's comments (``# newdoc id`` on the document's ``first``
    written sentence) plus ``# propbank_doc`` / ``# propbank_sent_index``, then UD's token lines."""
    head = [f"# newdoc id = {document.ud_id}"] if first else []
    return head + pair.ud.comments + [f"# propbank_doc = {document.doc_id}",
                                      f"# propbank_sent_index = {pair.skeleton.index}"] + pair.ud.lines


def document_texts(document: Document, pairs: list[Pair]) -> tuple[str, str]:
    """The gold_conll and the CoNLL-U text of one document's written pairs (each ends with a
    line end; CoNLL-U sentences are separated by a blank line, documents need one between them)."""
    gold = [f"#begin document ({document.doc_id}); part 000"]
    conllu = []
    for k, pair in enumerate(pairs):
        gold += gold_conll_rows(document, pair) + [""]
        conllu += ([""] if k else []) + conllu_lines(document, pair, k == 0)
    gold.append("#end document")
    return "\n".join(gold) + "\n", "\n".join(conllu) + "\n"


# ---------------------------------------------------------------- counts and the summary


@dataclass
class SplitCounts:
    """The numbers of one split (the README's "Counts" table).

    Args:
        listed: documents in the split list.
        missing: split-list names of the listed documents without a PropBank skeleton (left out).
        missing_ud_sentences: UD sentences in those documents.
        documents: documents written (those with at least one sentence written).
        skeleton_sentences: sentences in the skeletons (documents with a skeleton).
        ud_sentences: UD sentences of the same documents.
        sentences: sentences written.
        tokens: words written.
        predicates: predicates (SRL columns) written.
        arguments: SRL spans other than ``V`` written (``C-``/``R-`` pieces included).
        mwt_ranges: CoNLL-U multi-word-token range lines written.
        empty_nodes: CoNLL-U empty nodes (enhanced UD) written.
        ner_sentences: written sentences with a UNER annotation.
        ner_file: the UNER file the split's entities come from; "" where UNER has none (no entities).
        entities: written entities by label (PERSON, ORG, LOC).
        pos_agreeing: written words whose skeleton POS equals the UD XPOS.
        edited: ``EDITED`` constituents (disfluencies) written.
    """

    listed: int = 0
    missing: list[str] = field(default_factory=list)
    missing_ud_sentences: int = 0
    documents: int = 0
    skeleton_sentences: int = 0
    ud_sentences: int = 0
    sentences: int = 0
    tokens: int = 0
    predicates: int = 0
    arguments: int = 0
    mwt_ranges: int = 0
    empty_nodes: int = 0
    ner_sentences: int = 0
    ner_file: str = ""
    entities: Counter = field(default_factory=Counter)
    pos_agreeing: int = 0
    edited: int = 0

    @property
    def missing_documents(self) -> int:
        return len(self.missing)

    @property
    def dropped(self) -> int:
        """Skeleton sentences left out of documents that have a skeleton."""
        return self.skeleton_sentences - self.sentences

    @property
    def entity_count(self) -> int:
        return sum(self.entities.values())

    def add(self, pair: Pair) -> None:
        """Count one written pair."""
        rows = pair.skeleton.rows
        ids = [line.split("\t", 1)[0] for line in pair.ud.lines]
        self.sentences += 1
        self.tokens += len(rows)
        self.predicates += len(rows[0]) - SKEL_COLUMNS
        self.arguments += sum(cell.startswith("(") and not cell.startswith("(V*")
                              for row in rows for cell in row[SKEL_COLUMNS:])
        self.mwt_ranges += sum("-" in i for i in ids)
        self.empty_nodes += sum("." in i for i in ids)
        self.ner_sentences += pair.has_ner
        self.entities.update(cell.strip("(*)") for cell in pair.ne if cell.startswith("("))
        self.pos_agreeing += sum(a == b for a, b in zip(pair.skeleton.pos, pair.ud.pos))
        self.edited += sum(row[SKEL_PARSE].count("(EDITED") for row in rows)


@dataclass
class UnerMismatch:
    """A UNER sentence whose token count differs from its UD sentence's word count (not used)."""

    split: str
    sent_id: str
    uner: int
    ud: int
    written: bool


def _summed(name: str, doc: str) -> property:
    """A read-only property: the :class:`SplitCounts` field ``name`` summed over the splits."""
    return property(lambda summary: summary.total(name), doc=doc)


@dataclass
class BuildSummary:
    """What :func:`build_corpus` built; the README's numbers come from here.

    Args:
        counts: per split, its :class:`SplitCounts`.
        drops: the skeleton sentences left out, in split and document order.
        repairs: UNER ``I-`` tags that continued no entity (each starts one).
        form_differences: tokens of written sentences whose UNER form differs from the UD form.
        uner_mismatches: UNER sentences of the listed documents whose token count differs from
            the UD word count (their NER is not used).
        histogram: POS agreement of the written pairs of at least MIN_CHECKED_WORDS words:
            10% bin (0 = 0-10%, ..., 9 = 90-100%) -> sentences.
        confusions: (skeleton POS, UD XPOS) -> written words where the two differ.
        validation: per split, the checks run on the written files (:class:`Validation`).
        files: name -> size in bytes of each written file but README.md.
    """

    counts: dict[str, SplitCounts] = field(default_factory=dict)
    drops: list[Drop] = field(default_factory=list)
    repairs: int = 0
    form_differences: list[FormDifference] = field(default_factory=list)
    uner_mismatches: list[UnerMismatch] = field(default_factory=list)
    histogram: Counter = field(default_factory=Counter)
    confusions: Counter = field(default_factory=Counter)
    validation: dict = field(default_factory=dict)
    files: dict[str, int] = field(default_factory=dict)

    def total(self, name: str) -> int:
        """The sum over splits of the :class:`SplitCounts` field ``name`` (e.g. "sentences")."""
        return sum(getattr(counts, name) for counts in self.counts.values())

    sentences = _summed("sentences", "Sentences written, all splits.")
    documents = _summed("documents", "Documents written, all splits.")
    tokens = _summed("tokens", "Words written, all splits.")
    predicates = _summed("predicates", "Predicates (SRL columns) written, all splits.")
    entities = _summed("entity_count", "Entities written, all splits.")

    def dropped(self, reason: str, split: str) -> int:
        """Sentences dropped for ``reason`` in ``split`` (documents for NO_SKELETON)."""
        if reason == NO_SKELETON:
            return len(self.counts[split].missing)
        return sum(drop.reason == reason and drop.split == split for drop in self.drops)

    @property
    def failures(self) -> int:
        """Failed checks on the written files, over all splits."""
        return sum(validation.failures for validation in self.validation.values())

    def note_agreement(self, pair: Pair) -> None:
        """Add a written pair to the POS agreement histogram and the confusions."""
        tags, others = pair.skeleton.pos, pair.ud.pos
        if len(tags) >= MIN_CHECKED_WORDS:
            self.histogram[min(10 * sum(a == b for a, b in zip(tags, others)) // len(tags), 9)] += 1
        self.confusions.update((a, b) for a, b in zip(tags, others) if a != b)

    def lines(self) -> list[str]:
        """A short report for the command line."""
        lines = [f"{self.documents} documents, {self.sentences} sentences, {self.tokens} tokens, "
                 f"{self.predicates} predicates, {self.entities} entities"]
        for split, counts in self.counts.items():
            lines.append(f"  {split}: {counts.documents} documents, {counts.sentences} sentences, {counts.tokens} "
                         f"tokens, {counts.predicates} predicates, {counts.entity_count} entities")
        for reason in REASONS:
            per_split = {split: self.dropped(reason, split) for split in self.counts}
            if any(per_split.values()):
                what = "documents" if reason == NO_SKELETON else "sentences"
                lines.append(f"  {reason} ({what}): " + ", ".join(f"{s} {n}" for s, n in per_split.items()))
        lines.append(f"  I- tags repaired: {self.repairs}; failed checks on the written files: {self.failures}")
        return lines + self.ner_note()

    def ner_note(self) -> list[str]:
        """Why a split has 0 entities when UNER, the NER source, has no file for it, and (for train) how
        NER trains on this corpus instead; [] when every split without entities had a UNER file."""
        lacking = [s for s, c in self.counts.items() if not c.ner_file and not c.entity_count]
        having = [s for s, c in self.counts.items() if c.ner_file]
        if not lacking:
            return []
        lines = [(f"  0 entities in {', '.join(lacking)}: the NER layer comes from Universal NER "
                  f"({REPOS['uner'].github}), which has no {'/'.join(lacking)} split, only "
                  f"{', '.join(having) or 'none'} ({README}, Caveats)")]
        if "train" in lacking and having:
            other = "dev" if "dev" in having else having[0]
            lines.append(f"  NER trains on {other}: data.splits.train={other} for NER alone; with other tasks, "
                         f'data.task_splits={{"ner":{{"train":"{other}"}}}} (as docs/ewt-study.sh\'s mtl5)')
        return lines


# ---------------------------------------------------------------- checks on the written files


@dataclass
class Validation:
    """The checks run on one split's written files (the README's "Validation" table).

    Args:
        format_problems: ``#begin``/``#end document`` markers and blank lines out of place.
        documents: ``#begin document`` lines.
        gold_sentences, conllu_sentences: sentences in the two files.
        same_words: sentences whose gold_conll words equal the CoNLL-U integer-id forms.
        trees, bad_trees: sentences whose parse bits do / do not form one tree over the words.
        srl_columns, bad_srl_columns: SRL columns that are / are not balanced, non-nested, with
            exactly one ``V`` span covering the predicate (or a ``C-V`` span covering it).
        multiword_v: SRL columns whose V span is several words.
        c_v: SRL columns whose predicate token lies in a ``C-V`` span.
        frameset_mismatches: sentences whose number of framesets differs from their SRL columns.
        ne_columns, bad_ne_columns: NE columns that are / are not balanced and non-nested.
        ud_trees, bad_ud_trees: UD trees with / without one root, heads in range and no cycle.
    """

    format_problems: int = 0
    documents: int = 0
    gold_sentences: int = 0
    conllu_sentences: int = 0
    same_words: int = 0
    trees: int = 0
    bad_trees: int = 0
    srl_columns: int = 0
    bad_srl_columns: int = 0
    multiword_v: int = 0
    c_v: int = 0
    frameset_mismatches: int = 0
    ne_columns: int = 0
    bad_ne_columns: int = 0
    ud_trees: int = 0
    bad_ud_trees: int = 0

    @property
    def failures(self) -> int:
        return (self.format_problems + abs(self.gold_sentences - self.conllu_sentences)
                + max(self.gold_sentences, self.conllu_sentences) - self.same_words + self.bad_trees
                + self.bad_srl_columns + self.frameset_mismatches + self.bad_ne_columns + self.bad_ud_trees)


def validate(gold_path: Path, conllu_path: Path) -> Validation:
    """Run the checks of :class:`Validation` on a written gold_conll file and its CoNLL-U file."""
    validation = Validation()
    gold = _gold_blocks(gold_path, validation)
    conllu = _conllu_blocks(conllu_path)
    validation.gold_sentences, validation.conllu_sentences = len(gold), len(conllu)
    for rows, (forms, heads) in zip(gold, conllu):
        validation.same_words += [cols[WORD] for _, cols in rows] == forms
    for rows in gold:
        _check_gold_sentence(gold_path, rows, validation)
    for _, heads in conllu:
        good = _is_tree(heads)
        validation.ud_trees += good
        validation.bad_ud_trees += not good
    return validation


def _gold_blocks(path: Path, validation: Validation) -> list[list[tuple[int, list[str]]]]:
    """The sentences of a gold_conll file as (line, columns) rows; counts documents and format
    problems (markers out of place, a sentence not ended by a blank line, a stray blank line)."""
    lines = read_lines(path, "CoNLL-2012 file")
    blocks, rows, inside, previous = [], [], False, None
    for number, line in enumerate(lines[:-1] if lines[-1:] == [""] else lines, start=1):
        if line.startswith("#begin document"):
            validation.documents += 1
            validation.format_problems += inside or bool(rows)
            inside = True
        elif line.startswith("#end document"):
            validation.format_problems += not inside or bool(rows) or previous != ""
            inside = False
        elif line.strip():
            validation.format_problems += not inside and not rows
            rows.append((number, line.split()))
        else:
            validation.format_problems += not rows
            if rows:
                blocks.append(rows)
            rows = []
        previous = line
    validation.format_problems += inside or bool(rows)
    return blocks


def _check_gold_sentence(path: Path, rows: list[tuple[int, list[str]]], validation: Validation) -> None:
    """Check the parse bits, the SRL columns and the NE column of one written sentence."""
    where = [f"{path}:{number}" for number, _ in rows]
    columns = [cols for _, cols in rows]
    words = [cols[WORD] for cols in columns]
    try:
        tree = parse_bits_to_tree(words, [cols[POS] for cols in columns],
                                  [cols[PARSE] for cols in columns], where)
        good = len(tree.leaves()) == len(words)
    except DataError:
        good = False
    validation.trees += good
    validation.bad_trees += not good
    predicates = [i for i, cols in enumerate(columns) if cols[FRAMESET] != "-"]
    width = len(columns[0])
    validation.frameset_mismatches += width - MIN_COLUMNS != len(predicates) or any(
        len(cols) != width for cols in columns)
    for k, predicate in enumerate(predicates[:max(width - MIN_COLUMNS, 0)]):
        _check_srl_column([cols[FIRST_SRL + k] for cols in columns], predicate, where, validation)
    good = _spans([cols[NE] for cols in columns], where) is not None
    validation.ne_columns += good
    validation.bad_ne_columns += not good


def _check_srl_column(column: list[str], predicate: int, where: list[str], validation: Validation) -> None:
    """Check one SRL column of the predicate at word index ``predicate``."""
    spans = _spans(column, where) or []
    verbs = [(start, end) for start, end, label in spans if label == "V"]
    in_c_v = any(label == "C-V" and start <= predicate < end for start, end, label in spans)
    good = len(verbs) == 1 and (verbs[0][0] <= predicate < verbs[0][1] or in_c_v)
    validation.srl_columns += good
    validation.bad_srl_columns += not good
    validation.multiword_v += good and verbs[0][1] - verbs[0][0] > 1
    validation.c_v += good and not verbs[0][0] <= predicate < verbs[0][1]


def _spans(column: list[str], where: list[str]):
    """The spans of a bracket column, or None when it is not balanced and non-nested."""
    try:
        return brackets_to_spans(column, where)
    except DataError:
        return None


def _conllu_blocks(path: Path) -> list[tuple[list[str], list[str]]]:
    """(forms, heads) of the integer-id lines of each sentence of a CoNLL-U file."""
    blocks, forms, heads = [], [], []
    for line in read_lines(path, "CoNLL-U file") + [""]:
        if not line:
            if forms:
                blocks.append((forms, heads))
            forms, heads = [], []
        elif not line.startswith("#"):
            cols = line.split("\t")
            if cols[0].isdigit():
                forms.append(cols[1])
                heads.append(cols[6] if len(cols) > 6 else "")
    return blocks


def _is_tree(heads: list[str]) -> bool:
    """Whether HEAD values (strings, 1-based, 0 = root) form one tree: one root, heads in
    range, every word reaching the root."""
    if not all(head.isdigit() and int(head) <= len(heads) for head in heads):
        return False
    parents = [int(head) for head in heads]
    return parents.count(0) == 1 and all(_reaches_root(word, parents) for word in range(1, len(parents) + 1))


# ---------------------------------------------------------------- README.md
# Fixed prose is kept as templates ({name} fields filled from the build); tables and lists are
# generated. Built from the pinned sources, the text is that of ../shared/data/ewt/README.md.

README_INTRO = """\
# English Web Treebank with five annotation layers (POS, constituency, SRL, NER, UD)

Every sentence here carries, token-aligned 1:1:

* **POS** (original Penn Treebank tags of the EWT treebank) and **constituency** parse bits,
  **SRL** (unified PropBank) -- from the PropBank EWT skeleton files;
* **words** and **Universal Dependencies** (basic + enhanced) -- from UD_English-EWT;
* **named entities** PERSON/ORG/LOC -- from Universal NER (dev and test only).

Built by a standard-library Python 3 script (not shipped here) that reads the three source \
repositories below at the commits given; the build is deterministic given those commits.
"""

FILE_CONTENTS = {"gold_conll": "CoNLL-2012 `*_conll` format (columns below)",
                 "conllu": "the same sentences, same order, as CoNLL-U from UD"}

SOURCE_ROWS = {
    "propbank": ("POS, parse bits, predicate lemma + frameset, SRL; split lists",
                 "`data/google/ewt/**/*.gold_skel`, `docs/evaluation/ewt.{train,dev,test}.txt`"),
    "ud": ("words, UD trees (CoNLL-U)",
           "`not-to-release/sources/<genre>/<NAME>.xml.conllu` (one file per document; identical to the released "
           "`en_ewt-ud-{dev,test}.conllu`, checked)"),
    "uner": ("named entities", "`en_ewt-ud-{dev,test}.iob2`"),
}
"""Per repository: the layers it gives and the files used (the README's sources table)."""

README_LICENCE = """\
All three are licensed CC BY-SA 4.0, so this derived corpus is too: attribute the three projects \
(PropBank: Palmer et al. / the propbank-release repository; UD English EWT: Silveira et al. 2014 and \
the UD_English-EWT contributors; Universal NER: Mayhew et al., NAACL 2024) and share derivatives under \
the same licence. The underlying texts are the LDC2012T13 English Web Treebank source material (see the \
UD README for its copyright notes). The UD snapshot is the development state of {ud_date} (changelog up \
to {ud_version}); UNER was annotated over UD commit `{uner_base}`.
"""

README_LAYOUTS = """\
## `en_ewt.*.gold_conll` layout

Documents are wrapped in `#begin document (DOCID); part 000` / `#end document`; sentences are separated \
by a blank line (one blank line also precedes `#end document`). Columns are separated by one or more \
spaces (columns are right-aligned per sentence for readability) -- split on whitespace. No word contains \
whitespace; nothing is escaped.

| # | column | content |
|---|---|---|
| 1 | document id | PropBank skeleton id, e.g. `google/ewt/answers/00/20070404104007AAY1Chs_ans.xml` |
| 2 | part number | always `0` |
| 3 | word index | 0-based, within the sentence |
| 4 | word | UD word form (FORM of the integer-id lines of the UD sentence) -- brackets are `(`/`)`, not \
`-LRB-`/`-RRB-`; UD spelling/tokenisation |
| 5 | POS | Penn Treebank tag from the skeleton (may differ from UD XPOS, see caveats) |
| 6 | parse bit | constituency tree fragment from the skeleton (`*` = the leaf); root label `TOP`; no \
traces/empty elements |
| 7 | predicate lemma | skeleton column 7 (frame-file lemma, e.g. `liken` for `like.01`), `-` elsewhere |
| 8 | predicate frameset | unified PropBank roleset, e.g. `get.01`, `make.LV`; `-` elsewhere |
| 9 | word sense | always `-` |
| 10 | speaker | always `-` |
| 11 | named entities | `(PERSON*` ... `*)`, `(ORG)`, `*` -- from UNER (PER->PERSON, ORG->ORG, LOC->LOC); all \
`*` in train (not annotated) |
| 12 .. 11+N | SRL | one column per predicate (N = number of rows with a frameset, same order), CoNLL-2005 \
bracket style: `(ARG0*`, `*`, `*)`, `(V*)`, `(C-V*)`, `(R-ARG1*)`, `(ARGM-LOC*` ... |
| last | coreference | always `-` |

So a sentence with N predicates has 12 + N columns; rows without predicates have 12.

## `en_ewt.*.conllu` layout

Standard CoNLL-U (10 columns, UD {ud_version}-era annotation incl. enhanced DEPS and MISC), the i-th \
sentence being the i-th sentence of the matching `.gold_conll` file. Comments per sentence: `# newdoc id` \
(first sentence of each document), `# sent_id` (UD id), `# text` (UD), `# propbank_doc` (= gold_conll \
column 1) and `# propbank_sent_index` (0-based sentence index in the PropBank skeleton, i.e. in the \
original EWT `.tree` file). Token lines are copied verbatim, **including multi-word-token range lines \
(`1-2`) and enhanced empty nodes (`8.1`)**; the integer-id word lines correspond 1:1, in order, to the \
gold_conll rows (word i <-> row i-1).
"""

REASON_TEXTS = {
    NO_SKELETON: "document listed in the split but has no `.gold_skel` in propbank-release (no parse/SRL "
                 "available): whole document left out",
    NO_UD: "skeleton sentence has no UD counterpart (document has one sentence more in the treebank than in UD)",
    MISMATCH: "skeleton and UD sentence have different word counts (UD retokenised the sentence since the PTB "
              "trees, see list)",
    SPLIT: "UD split one treebank sentence into several (skeleton sentence dropped, alignment resumes after it)",
    MERGED: "UD merged several treebank sentences into one (those skeleton sentences dropped, alignment resumes "
            "after them)",
    LOW_AGREEMENT: f"skeleton POS and UD XPOS agree on fewer than {MIN_PAIR_AGREEMENT:.0%} of the words of a "
                   f"sentence of at least {MIN_CHECKED_WORDS} words (probably not the same sentence)",
}

README_ALIGNMENT = """\
## How the layers were aligned

* Documents are taken in the order of `docs/evaluation/ewt.<split>.txt` (same order as UD's \
`not-to-release/file-lists/files.<split>`).
* Within a document, skeleton sentence k is paired with the k-th UD sentence and accepted only if the \
word counts (UD integer-id lines; MWT range lines and empty nodes skipped) are equal. Only when a \
document has a different number of sentences on the two sides is a UD split/merge detected (word counts \
of 2-{max_group} consecutive sentences add up, POS agreement >= {group_agreement:.0%}); the affected \
skeleton sentence(s) are dropped and pairing resumes after them ({group_cases}). No retokenisation is \
attempted: the mismatches are heterogeneous (@-mentions, possessive `s`, hyphenated words, `$$`, phone \
numbers, ...), so those sentences are dropped.
* Sanity check on every accepted pair: the skeleton POS agrees with the UD XPOS on {agreement} of tokens \
overall ({agreeing} / {tokens}); per sentence of >= {min_words} words the agreement histogram is \
{histogram}. {rejected}
* NER is looked up by UD `sent_id` in UNER and used when its token count equals the UD word count \
({qualify}). {forms}; I- tags without a preceding B- repaired: {repairs}.
"""

VALIDATION_ROWS = (
    ("gold_conll format problems (begin/end document, blank lines)", "format_problems"),
    ("documents", "documents"),
    ("sentences (gold_conll = conllu)", "gold_sentences"),
    ("sentences whose gold_conll words == conllu words", "same_words"),
    ("parse bits form one well-formed tree with #leaves == #words", "trees"),
    ("... failing", "bad_trees"),
    ("SRL columns: balanced, non-nested, exactly one V span covering the predicate token", "srl_columns"),
    ("... failing", "bad_srl_columns"),
    ("&nbsp;&nbsp;of which V span is multi-word (verb + particle, e.g. `bust_up.04`)", "multiword_v"),
    ("&nbsp;&nbsp;of which frameset token is in a `(C-V*)` span (hyphen-split word: `flip - flop`)", "c_v"),
    ("sentences where #framesets != #SRL columns", "frameset_mismatches"),
    ("NE columns balanced and non-nested", "ne_columns"),
    ("... failing", "bad_ne_columns"),
    ("UD trees: one root, heads in range, acyclic", "ud_trees"),
    ("... failing", "bad_ud_trees"),
)
"""(row label, :class:`Validation` field) of the README's validation table."""

README_CAVEATS = """\
## Caveats

* **NER only in dev and test.** UNER's train file is not in the snapshot, so column 11 is `*` throughout \
train: that means *not annotated*, not *no entity*. Do not train NER on train as negatives. UNER has only \
PER/ORG/LOC (no GPE, DATE, ... as in OntoNotes), mapped to PERSON/ORG/LOC.
* **dev/test are subsets of UD dev/test**: {missing} have no PropBank skeleton and are absent, plus the \
dropped sentences; UD scores on these files are not directly comparable with scores on the full UD dev/test.
* **Disfluencies are kept**: like propbank-release, this corpus keeps `EDITED` material ({edited} EDITED \
constituents: {edited_per_split}), whereas the usual conll-formatted-ontonotes-5.0 release removes it.
* **Unified PropBank frames** (frame files release 3.1): verbal, nominal and adjectival predicates share \
rolesets (`hope.01` for the noun *hope*), light verbs are `*.LV` with `ARGM-LVB`/`ARGM-PRR`, auxiliaries \
(`have.01`, `be.03`, `do.01`) are annotated. SRL scores are not comparable with CoNLL-2012 numbers. The \
propbank-release repository itself flags the release as work in progress.
* **Two POS inventories**: column 5 is the original PTB tag from the EWT treebank; the CoNLL-U XPOS is \
UD's revised tag. They disagree on {disagreement} of tokens (e.g. {confusions}).
* **Words come from UD** (current spelling/tokenisation); the constituency leaves are therefore UD forms: \
`(` `)` rather than `-LRB-` `-RRB-` (the POS column keeps `-LRB-`/`-RRB-`), and no PTB escaping (`/.`, \
`/-`) is applied.
* Column 8 holds the full roleset id (`get.01`, as in propbank-release's own gold_conll conversion), \
whereas the OntoNotes 5.0 CoNLL-2012 files hold only the sense number (`01`) there.
* Word sense, speaker and coreference columns are placeholders (`-`); the part number is always 0; the \
original sentence index is only in the CoNLL-U comment `# propbank_sent_index`.
* Parse bits have no traces or empty elements (the skeletons hold surface tokens only); SRL spans are \
exactly as in the skeleton (including `R-` reference and `C-` continuation arguments).
* CoNLL-U files contain MWT range lines and empty nodes: use a reader that skips them (e.g. the `conllu` \
package, or filter on integer ids) to keep the 1:1 alignment with gold_conll.
"""


def render_readme(summary: BuildSummary, notes: dict[str, str], example: tuple[list[str], list[str]]) -> str:
    """The corpus' README.md.

    Args:
        summary: the build's numbers, validation included.
        notes: facts about the sources (:func:`upstream_notes`).
        example: the gold_conll rows and CoNLL-U lines of the example sentence.
    """
    sections = [README_INTRO, _files_section(summary), _sources_section(notes), README_LAYOUTS.format(**notes),
                _counts_section(summary), _missing_section(summary), _alignment_section(summary),
                _validation_section(summary), _caveats_section(summary), _example_section(*example)]
    return "\n".join(sections)


def _table(header: list[str], rows: list[list]) -> str:
    """A Markdown table, each line ended by a line end."""
    lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "".join(line + "\n" for line in lines)


def _size(size: int) -> str:
    """A file size as the README gives it: ``32.1 MiB``, ``19.7 KiB``."""
    return f"{size / 2 ** 20:.1f} MiB" if size >= 2 ** 20 else f"{size / 2 ** 10:.1f} KiB"


def data_files(split: str) -> tuple[str, str]:
    """The gold_conll and CoNLL-U file names of ``split``."""
    return f"en_ewt.{split}.gold_conll", f"en_ewt.{split}.conllu"


def _files_section(summary: BuildSummary) -> str:
    """The files table (sizes of the written files)."""
    rows = [[f"`{name}`", FILE_CONTENTS[name.rsplit(".", 1)[1]], _size(summary.files[name])]
            for split in SPLITS for name in data_files(split)]
    rows += [[f"`{repo.licence_out}`", f"licence text copied from the {repo.key} repository",
              _size(summary.files[repo.licence_out])] for repo in REPOS.values()]
    return "## Files\n\n" + _table(["file", "content", "size"], rows)


def _sources_section(notes: dict[str, str]) -> str:
    """The sources table and the licence paragraph."""
    rows = [[SOURCE_ROWS[key][0], f"[{repo.github}]({repo.url})", f"`{repo.commit}`", SOURCE_ROWS[key][1],
             f"CC BY-SA 4.0 (`{repo.licence_out}`)"] for key, repo in REPOS.items()]
    table = _table(["layer(s)", "repository", "commit", "files used", "licence"], rows)
    return f"## Sources and licence\n\n{table}\n{README_LICENCE.format(**notes)}"


COUNT_ROWS = (
    ("documents in the UD/PropBank split list", "listed"),
    ("documents without a PropBank skeleton (left out)", "missing_documents"),
    ("&nbsp;&nbsp;UD sentences in those left-out documents", "missing_ud_sentences"),
    ("documents written", "documents"),
    ("sentences in the PropBank skeletons (documents with a skeleton)", "skeleton_sentences"),
    ("sentences in UD for the same documents", "ud_sentences"),
    ("**sentences written**", "sentences"),
    ("sentences dropped (see below)", "dropped"),
    ("**tokens (words)**", "tokens"),
    ("**predicates** (SRL columns)", "predicates"),
    ("SRL arguments (non-V spans, incl. C-/R- pieces)", "arguments"),
    ("CoNLL-U multi-word-token range lines", "mwt_ranges"),
    ("CoNLL-U empty nodes (enhanced UD)", "empty_nodes"),
    ("sentences with NER annotation", "ner_sentences"),
    ("**entities**", "entity_count"),
)
"""(row label, :class:`SplitCounts` field) of the README's counts table; one row per entity label follows."""


def _counts_section(summary: BuildSummary) -> str:
    """The counts table and the sentence drop rate."""
    rows = [[label] + [getattr(summary.counts[split], name) for split in SPLITS] + [summary.total(name)]
            for label, name in COUNT_ROWS]
    rows += [[f"&nbsp;&nbsp;{label}"] + [summary.counts[split].entities[label] for split in SPLITS]
             + [sum(summary.counts[split].entities[label] for split in SPLITS)] for label in UNER_LABELS.values()]
    skeleton, dropped = summary.total("skeleton_sentences"), summary.total("dropped")
    return (f"## Counts\n\n{_table(['', *SPLITS, 'total'], rows)}\nSentence drop rate (among documents that have a "
            f"PropBank skeleton): {dropped} / {skeleton} = {dropped / max(skeleton, 1):.2%}.\n")


def _missing_section(summary: BuildSummary) -> str:
    """The reasons table, the dropped sentences and the documents left out."""
    reasons = [reason for reason in REASONS if any(summary.dropped(reason, split) for split in SPLITS)]
    table = _table(["reason", *SPLITS], [[f"`{reason}`: {REASON_TEXTS[reason]}"]
                                        + [summary.dropped(reason, split) for split in SPLITS] for reason in reasons])
    drops = "".join(f"* {_drop_line(drop)}\n" for drop in summary.drops) or "(none)\n"
    missing = ", ".join(f"{split} `{name}`" for split in SPLITS for name in summary.counts[split].missing)
    return (f"### Why sentences and documents are missing\n\n{table}\nDropped sentences (skeleton sentence index "
            f"is 0-based; UD side shown as sent_id, word count, words):\n\n{drops}\n"
            f"Documents without PropBank skeleton: {missing or '(none)'}.\n")


def _drop_line(drop: Drop) -> str:
    """One item of the README's list of dropped sentences."""
    skeleton = drop.skeleton
    ud = "; ".join(f"`{s.sent_id}` ({s.size}): {' '.join(s.forms)}" for s in drop.ud) or "(none)"
    return (f"{drop.split}, `{drop.reason}`: {drop.document}#{skeleton.index} ({skeleton.size} words, "
            f"POS `{' '.join(skeleton.pos)}`) <-> {ud}")


NUMBER_WORDS = {1: "one", 2: "two", 3: "three"}


def _alignment_section(summary: BuildSummary) -> str:
    """How the layers were aligned, with the build's numbers."""
    cases = list(dict.fromkeys((d.split, d.document) for d in summary.drops if d.reason in (SPLIT, MERGED)))
    group_cases = (f"{len(cases)} case{'s' * (len(cases) != 1)}, " + ", ".join(f"{s} `{d}`" for s, d in cases)
                   if cases else "no case")
    agreeing, tokens = summary.total("pos_agreeing"), summary.tokens
    histogram = ", ".join(f"{10 * b}-{10 * b + 10}%: {n}" for b, n in sorted(summary.histogram.items()) if n)
    rejected = sum(summary.dropped(LOW_AGREEMENT, split) for split in SPLITS)
    return README_ALIGNMENT.format(
        max_group=MAX_GROUP, group_agreement=MIN_GROUP_AGREEMENT, group_cases=group_cases,
        agreement=f"{agreeing / max(tokens, 1):.2%}", agreeing=agreeing, tokens=tokens, min_words=MIN_CHECKED_WORDS,
        histogram=histogram or "empty",
        rejected=(f"{rejected} pair(s) rejected for low agreement (`{LOW_AGREEMENT}`)." if rejected
                  else "No pair was rejected for low agreement."),
        qualify=_ner_qualify(summary), forms=_ner_forms(summary.form_differences), repairs=summary.repairs)


def _ner_qualify(summary: BuildSummary) -> str:
    """Which written sentences got NER, and what became of the UNER sentences whose count differs."""
    splits = "/".join(NER_SPLITS)
    unqualified = sum(summary.counts[split].sentences - summary.counts[split].ner_sentences for split in NER_SPLITS)
    first = (f"all written {splits} sentences qualify" if not unqualified else
             f"{unqualified} written {splits} sentence(s) do not qualify: column 11 is `*` throughout there")
    mismatches = summary.uner_mismatches
    written = sum(m.written for m in mismatches)
    if not mismatches:
        second = "no UNER sentence's count differs"
    elif not written:
        n = len(mismatches)
        second = (f"the {n} UNER sentence{'s' * (n != 1)} whose count differs {'are' if n != 1 else 'is'} "
                  "among the dropped ones")
    else:
        second = f"{len(mismatches)} UNER sentence(s) have another count, {written} of them written"
    return f"{first}; {second}"


def _ner_forms(differences: list[FormDifference], shown: int = 6) -> str:
    """Where UNER forms differ from the current UD forms (the NER is used all the same)."""
    if not differences:
        return "The UNER form equals the current UD form in every token"
    pairs = ", ".join(f"`{d.ud}`/`{d.uner}`" for d in differences[:shown])
    pairs += ", ..." if len(differences) > shown else ""
    sentences = Counter(split for split, _ in dict.fromkeys((d.split, d.sent_id) for d in differences))
    where = " and ".join(f"{NUMBER_WORDS.get(n, n)} {split} sentence{'s' * (n != 1)}"
                         for split, n in sentences.items())
    inside = sum(d.in_entity for d in differences)
    entities = f"{inside} of them inside entities" if inside else "outside entities"
    return (f"In {len(differences)} token(s) the UNER form differs from the current UD form ({pairs} in {where}, "
            f"{entities})")


def _validation_section(summary: BuildSummary) -> str:
    """The table of checks run on the written files."""
    def cell(validation: Validation, name: str):
        if name == "gold_sentences" and validation.gold_sentences != validation.conllu_sentences:
            return f"{validation.gold_sentences} != {validation.conllu_sentences}"
        return getattr(validation, name)

    table = _table(["check", *SPLITS], [[label] + [cell(summary.validation[split], name) for split in SPLITS]
                                       for label, name in VALIDATION_ROWS])
    failures = summary.failures
    result = "**all checks passed** (0 failures)" if not failures else f"**checks failed** ({failures} failures)"
    return f"## Validation (run on the written files)\n\n{table}\nResult: {result}.\n"


def _caveats_section(summary: BuildSummary) -> str:
    """The caveats, with the build's numbers."""
    counts = summary.counts
    missing = [(split, len(counts[split].missing)) for split in SPLITS if counts[split].missing]
    genres = Counter(name.split("/", 1)[0] for split in SPLITS for name in counts[split].missing)
    agreeing, tokens = summary.total("pos_agreeing"), summary.tokens
    return README_CAVEATS.format(
        missing=(" and ".join(f"{n} {split}" for split, n in missing) + f" documents ({_genres(genres)})"
                 if missing else "no documents"),
        edited=summary.total("edited"), edited_per_split=", ".join(f"{s} {counts[s].edited}" for s in SPLITS),
        disagreement=f"{(tokens - agreeing) / max(tokens, 1):.2%}",
        confusions=", ".join(f"{a} vs {b}" for (a, b), _ in summary.confusions.most_common(3)))


def _genres(genres: Counter) -> str:
    """The genres of the documents left out, in a few words (``all reviews but one``)."""
    genre, count = genres.most_common(1)[0]
    others = sum(genres.values()) - count
    if others > 1:
        return f"{count} {genre}, {others} other"
    return f"all {genre}" + (" but one" if others else "")


def _example_section(gold_rows: list[str], conllu: list[str]) -> str:
    """The example: one sentence as gold_conll rows and as CoNLL-U."""
    gold, ud = "\n".join(gold_rows), "\n".join(conllu)
    return f"## Example ({EXAMPLE_SPLIT})\n\n```\n{gold}\n```\n\n```\n{ud}\n```\n"


EXAMPLE_SPLIT = "dev"
EXAMPLE_MAX_WORDS = 20
EXAMPLE_MIN_PREDICATES = 3


def choose_example(written: list[tuple[Document, Pair]]) -> tuple[list[str], list[str]]:
    """The README's example: the gold_conll rows and the UD lines (comments and token lines) of
    the first pair that shows most layers at a glance: at most EXAMPLE_MAX_WORDS words, an entity,
    a multi-word-token range line and at least EXAMPLE_MIN_PREDICATES predicates (else the first;
    nothing when the split has no sentence)."""
    def shows_much(pair: Pair) -> bool:
        return (pair.ud.size <= EXAMPLE_MAX_WORDS and any(cell != "*" for cell in pair.ne)
                and any("-" in line.split("\t", 1)[0] for line in pair.ud.lines)
                and len(pair.skeleton.rows[0]) - SKEL_COLUMNS >= EXAMPLE_MIN_PREDICATES)

    if not written:
        return [], []
    document, pair = next((item for item in written if shows_much(item[1])), written[0])
    return gold_conll_rows(document, pair), pair.ud.comments + pair.ud.lines


def upstream_notes(roots: dict[str, Path]) -> dict[str, str]:
    """Facts about the sources the README states: the UD snapshot's date and latest changelog
    version (from UD's README.md) and the UD commit UNER was annotated over (from UNER's)."""
    version = _first_match(roots["ud"] / README, r"^\*\*\d{4}-\d\d-\d\d (v[\d.]+)\*\*",
                           "a changelog heading such as '**2025-05-15 v2.16**'")
    base = _first_match(roots["uner"] / README, r"reference commit.*?`([0-9a-f]{40})`",
                        "the UD reference commit in backquotes")
    return {"ud_date": UD_SNAPSHOT_DATE, "ud_version": version, "uner_base": base[:8]}


def _first_match(path: Path, pattern: str, expected: str) -> str:
    """Group 1 of the first line of ``path`` that matches ``pattern``; DataError when none does."""
    for line in read_lines(path, "README"):
        match = re.search(pattern, line)
        if match:
            return match.group(1)
    raise data_error(f"{path}:1", f"no line matches {pattern!r}; expected {expected}")


# ---------------------------------------------------------------- the build


def build_corpus(roots: dict[str, Path], out: Path, log: Callable[[str], None] = print) -> BuildSummary:
    """Build the five-layer EWT corpus from its three source repositories.

    Args:
        roots: the root folder of each repository by :data:`REPOS` key ("propbank", "ud",
            "uner"), laid out as the repository (a git clone, or
            ``../shared/data/ewt-sources/<folder>``).
        out: an existing empty folder; the six data files, the three licence files and README.md
            are written there (the caller makes the result appear atomically).
        log: where the progress lines go (default: print).

    Returns:
        the :class:`BuildSummary`. Raises DataError, naming file and line, for a missing or
        malformed source file.
    """
    missing = [key for key in REPOS if key not in roots]
    if missing:
        raise ValueError(f"roots lacks {', '.join(missing)}; expected a folder for each of {', '.join(REPOS)}")
    roots = {key: Path(roots[key]) for key in REPOS}
    out = Path(out)
    if not out.is_dir():
        raise NotADirectoryError(f"{out}: no such folder; expected an existing empty folder for the corpus")
    summary = BuildSummary()
    notes = upstream_notes(roots)
    example = None
    for split in SPLITS:
        written = build_split(roots, split, out, summary)
        counts = summary.counts[split]
        log(f"{split}: {counts.documents} documents, {counts.sentences} sentences, {counts.tokens} tokens")
        if split == EXAMPLE_SPLIT:
            example = choose_example(written)
    for repo in REPOS.values():
        data = _read_bytes(roots[repo.key] / repo.licence, "licence file")
        (out / repo.licence_out).write_bytes(data)
        summary.files[repo.licence_out] = len(data)
    summary.validation = {split: validate(*(out / name for name in data_files(split))) for split in SPLITS}
    _write(out / README, render_readme(summary, notes, example))
    log(f"checks on the written files: {summary.failures} failures")
    return summary


def build_split(roots: dict[str, Path], split: str, out: Path, summary: BuildSummary) -> list[tuple[Document, Pair]]:
    """Align, write and count one split; return its written (document, pair)s in order.

    Args:
        roots: repository roots by :data:`REPOS` key.
        split: "train", "dev" or "test".
        out: the output folder.
        summary: where the split's counts, drops and NER facts go.
    """
    documents = read_documents(roots, split)
    uner = None
    if split in NER_SPLITS:
        check_ud_release(roots, split, documents)
        uner = read_uner(roots["uner"] / UNER_FILE.format(split=split))
    ner_file = UNER_FILE.format(split=split) if uner is not None else ""
    counts = summary.counts[split] = SplitCounts(listed=len(documents), ner_file=ner_file)
    gold, conllu, written = [], [], []
    for document in documents:
        pairs = _align_document(document, uner, counts, summary)
        if pairs:
            texts = document_texts(document, pairs)
            gold.append(texts[0])
            conllu.append(texts[1])
            written += [(document, pair) for pair in pairs]
    summary.uner_mismatches += uner_mismatches(split, documents, uner, {pair.ud.sent_id for _, pair in written})
    for name, text in zip(data_files(split), ("".join(gold), "\n".join(conllu))):
        summary.files[name] = _write(out / name, text)
    return written


def _align_document(document: Document, uner: dict[str, UnerSentence] | None, counts: SplitCounts,
                    summary: BuildSummary) -> list[Pair]:
    """Align one document, attach its NER and count it; return its pairs (none without a skeleton)."""
    if document.skeleton is None:
        counts.missing.append(document.name)
        counts.missing_ud_sentences += len(document.ud)
        return []
    pairs, drops = align(document)
    summary.drops += drops
    counts.skeleton_sentences += len(document.skeleton)
    counts.ud_sentences += len(document.ud)
    counts.documents += bool(pairs)
    for pair in pairs:
        summary.repairs += attach_ner(pair, uner, document.split, summary.form_differences)
        counts.add(pair)
        summary.note_agreement(pair)
    return pairs


def uner_mismatches(split: str, documents: list[Document], uner: dict[str, UnerSentence] | None,
                    written: set[str]) -> list[UnerMismatch]:
    """The UNER sentences of ``documents`` whose token count differs from the UD word count.

    Args:
        split: the split.
        documents: its documents (all listed ones, with a skeleton or not).
        uner: its UNER sentences by sent_id (None: no UNER for the split).
        written: the sent_ids of the written sentences.
    """
    found = []
    for sentence in (s for document in documents for s in document.ud) if uner else ():
        other = uner.get(sentence.sent_id)
        if other is not None and len(other.tags) != sentence.size:
            found.append(UnerMismatch(split, sentence.sent_id, len(other.tags), sentence.size,
                                      sentence.sent_id in written))
    return found


def _read_bytes(path: Path, expected: str) -> bytes:
    """The bytes of ``path``; MissingDataError naming it when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise MissingDataError(f"{path}:1: no such file; expected a {expected}") from None


def _write(path: Path, text: str) -> int:
    """Write ``text`` as UTF-8 with ``\\n`` line ends; return the size in bytes."""
    data = text.encode("utf-8")
    path.write_bytes(data)
    return len(data)
