"""Read the three sources of the five-layer EWT corpus and align them sentence by sentence.

The corpus pairs, sentence by sentence, a PropBank EWT skeleton (POS, parse bits, SRL; the word
column holds ``[WORD]`` placeholders) with the UD_English-EWT source file of the same document
(words, UD trees) and, in dev and test, the Universal NER sentence of the same UD ``sent_id``
(PER/ORG/LOC). This module knows the three repositories (:data:`REPOS`, at the pinned commits),
reads their files, aligns them (:func:`align`, :func:`attach_ner`) and formats one written
document (:func:`document_texts`); :mod:`mtl_heads.data.ewt_build` runs the build.

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

Standard library plus the data layer's own helpers (errors, BIO spans): it sits on the data
floor and imports nothing above ``mtl_heads/data``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from mtl_heads.data.errors import data_error, read_lines
from mtl_heads.data.trees import bio_to_spans

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


def data_files(split: str) -> tuple[str, str]:
    """The gold_conll and CoNLL-U file names of ``split``."""
    return f"en_ewt.{split}.gold_conll", f"en_ewt.{split}.conllu"

