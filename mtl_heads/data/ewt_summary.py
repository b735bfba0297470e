"""What an EWT corpus build counted and checked: per split its :class:`SplitCounts`, the
build's :class:`BuildSummary` (which the README's numbers come from), and the checks run on the
written files (:class:`Validation`, :func:`validate`).

Standard library plus the data layer's own helpers: it sits on the data floor.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from mtl_heads.data.conll2012 import FIRST_SRL, FRAMESET, MIN_COLUMNS, NE, PARSE, POS, WORD
from mtl_heads.data.conllu import _reaches_root
from mtl_heads.data.errors import DataError, read_lines
from mtl_heads.data.ewt_align import (MIN_CHECKED_WORDS, NO_SKELETON, README, REASONS, REPOS, SKEL_COLUMNS,
                                      SKEL_PARSE, Drop, FormDifference, Pair)
from mtl_heads.data.trees import brackets_to_spans, parse_bits_to_tree


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
        lines = [(f"{self.documents} documents, {self.sentences} sentences, {self.tokens} tokens, "
                  f"{self.predicates} predicates, {self.entities} entities")]
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
