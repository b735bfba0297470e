"""The README.md of the five-layer EWT corpus: its fixed prose (templates whose ``{name}`` fields
the build fills) and the tables, lists and example generated from a :class:`BuildSummary`
(:func:`render_readme`); :func:`choose_example` picks the example sentence and
:func:`upstream_notes` reads the facts about the sources it states. Built from the pinned sources,
the text is that of ../shared/data/ewt/README.md but for the one count ``tests/test_ewt_build.py``
names.

Standard library plus the data layer's own helpers: it sits on the data floor.
"""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

from mtl_heads.data.errors import data_error, read_lines
from mtl_heads.data.ewt_align import (LOW_AGREEMENT, MAX_GROUP, MERGED, MIN_CHECKED_WORDS, MIN_GROUP_AGREEMENT,
                                      MIN_PAIR_AGREEMENT, MISMATCH, NER_SPLITS, NO_SKELETON, NO_UD, README,
                                      REASONS, REPOS, SKEL_COLUMNS, SPLIT, SPLITS, UD_SNAPSHOT_DATE, UNER_LABELS,
                                      Document, Drop, FormDifference, Pair, data_files, gold_conll_rows)
from mtl_heads.data.ewt_summary import BuildSummary, Validation


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
           ("`not-to-release/sources/<genre>/<NAME>.xml.conllu` (one file per document; identical to the released "
            "`en_ewt-ud-{dev,test}.conllu`, checked)")),
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
