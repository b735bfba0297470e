"""Build the five-layer EWT corpus (``../shared/data/ewt``) from its three public sources.

:func:`build_corpus` reads the three repositories (:data:`~mtl_heads.data.ewt_align.REPOS`, at the
pinned commits), aligns them sentence by sentence (:mod:`mtl_heads.data.ewt_align`, whose docstring
gives the rules), writes ``en_ewt.{train,dev,test}.{gold_conll,conllu}``, the three licence files
and a README.md (:mod:`mtl_heads.data.ewt_readme`) that gives the counts, the dropped sentences,
the checks run on the written files and the caveats; it returns a
:class:`~mtl_heads.data.ewt_summary.BuildSummary` of the same numbers
(:mod:`mtl_heads.data.ewt_summary`). Built from the pinned sources (``../shared/data/ewt-sources``)
every file is byte-identical to ``../shared/data/ewt`` but for one count in README.md that the
published text has wrong (``tests/test_ewt_build.py`` says which). ``python -m mtl_heads ewt``
(:mod:`mtl_heads.commands.ewt`) is its command line.

Standard library plus the data layer's own helpers: it sits on the data floor and imports nothing
above ``mtl_heads/data``.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from mtl_heads.data.errors import MissingDataError
from mtl_heads.data.ewt_align import (NER_SPLITS, README, REPOS, SPLITS, UNER_FILE, Document, Pair, UnerSentence,
                                      align, attach_ner, check_ud_release, data_files, document_texts,
                                      read_documents, read_uner, source_files)
from mtl_heads.data.ewt_readme import EXAMPLE_SPLIT, choose_example, render_readme, upstream_notes
from mtl_heads.data.ewt_summary import BuildSummary, SplitCounts, UnerMismatch, validate

__all__ = ["REPOS", "BuildSummary", "build_corpus", "build_split", "source_files", "uner_mismatches"]


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
