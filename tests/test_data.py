"""Tests of the data layer: readers, writer, trees, CoNLL-U, Hugging Face conversion, demo corpus."""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import nltk
import pytest

from mtl_heads.data.conll2012 import read_conll2012, write_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.demo import MAX_WORDS, MIN_WORDS, ensure_demo_corpus, generate_demo
from mtl_heads.data.errors import DataError
from mtl_heads.data.hf import load_hf_conll2012, sentences_from_hf
from mtl_heads.data.sentence import LAYERS, Sentence
from mtl_heads.data.trees import (
    bio_to_spans,
    brackets_to_spans,
    parse_bits_to_tree,
    spans_to_brackets,
    tree_to_parse_bits,
)

FIXTURES = Path(__file__).parent / "fixtures"
EWT_EXCERPT = FIXTURES / "ewt_excerpt.gold_conll"
EWT_EXCERPT_CONLLU = FIXTURES / "ewt_excerpt.conllu"


# ---------------------------------------------------------------- the EWT excerpt


@pytest.fixture(scope="module")
def excerpt() -> list[Sentence]:
    return read_conll2012(EWT_EXCERPT)


def test_excerpt_words_pos_and_source(excerpt):
    assert len(excerpt) == 8
    first = excerpt[0]
    assert first.words == ["From", "the", "AP", "comes", "this", "story", ":"]
    assert first.pos == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]
    assert first.source == f"{EWT_EXCERPT}:2"
    assert excerpt[5].source == f"{EWT_EXCERPT}:95"
    assert excerpt[5].words == ["Retired"]


def test_excerpt_tree(excerpt):
    tree = excerpt[0].tree
    assert tree.label() == "TOP"
    assert tree[0].label() == "SINV"
    assert [child.label() for child in tree[0]] == ["PP", "VP", "NP", ":"]
    assert tree.leaves() == excerpt[0].words
    for sentence in excerpt:
        assert [tag for _, tag in sentence.tree.pos()] == sentence.pos
    # (TOP(S(NP* ... 'two individuals' is the NP right after 'nominated'
    assert excerpt[1].tree[0][2][1] == nltk.Tree.fromstring("(NP (CD two) (NNS individuals))")


def test_excerpt_entities(excerpt):
    assert excerpt[0].entities == [(2, 3, "ORG")]
    assert excerpt[1].entities == [(1, 2, "PERSON"), (16, 17, "LOC")]
    assert excerpt[2].entities == [(0, 1, "PERSON"), (2, 5, "PERSON"), (15, 23, "ORG"), (25, 28, "PERSON")]
    assert excerpt[3].entities == []  # '***': annotated, no entity


def test_excerpt_srl(excerpt):
    assert excerpt[0].predicates == [3]
    assert excerpt[0].arguments == [[(0, 3, "ARG2"), (3, 4, "V"), (4, 6, "ARG1")]]
    second = excerpt[1]
    assert second.predicates == [4, 8]
    assert second.arguments[0] == [(0, 2, "ARG0"), (2, 4, "ARGM-TMP"), (4, 5, "V"), (5, 7, "ARG1"), (7, 18, "ARG2")]
    assert second.arguments[1] == [(5, 7, "ARG0"), (8, 9, "V"), (9, 18, "ARG1")]
    assert excerpt[3].predicates == [] and excerpt[3].arguments == []  # 12 columns, no predicate
    assert excerpt[5].arguments == [[(0, 1, "V")]]


def test_excerpt_round_trip(excerpt, tmp_path):
    path = write_conll2012(excerpt, tmp_path / "out.gold_conll", doc_id="excerpt")
    assert read_conll2012(path) == excerpt
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_attach_conllu(tmp_path):
    sentences = read_conll2012(EWT_EXCERPT)
    attach_conllu(sentences, read_conllu(EWT_EXCERPT_CONLLU), EWT_EXCERPT_CONLLU)
    assert sentences[0].heads == [3, 3, 4, 0, 6, 4, 4]
    assert sentences[0].rels == ["case", "det", "obl", "root", "det", "nsubj", "punct"]
    assert sentences[1].heads[:5] == [2, 5, 4, 5, 0]
    assert all(s.has("deps") for s in sentences)
    path = write_conll2012(sentences, tmp_path / "x.gold_conll")  # deps are not part of the format
    assert all(not s.has("deps") for s in read_conll2012(path))


def test_read_conllu_skips_ranges_and_empty_nodes():
    sentences = read_conllu(EWT_EXCERPT_CONLLU, pos="xpos")
    assert len(sentences) == 8
    assert sentences[0].pos == ["IN", "DT", "NNP", "VBZ", "DT", "NN", ":"]
    assert sentences[0].source == f"{EWT_EXCERPT_CONLLU}:6"
    assert sentences[0].tree is None and not sentences[0].has("srl")


def test_sentence_has():
    sentence = Sentence(words=["a"], pos=["DT"], entities=[])
    assert [sentence.has(layer) for layer in LAYERS] == [True, True, False, True, False, False]
    with pytest.raises(ValueError):
        sentence.has("coref")


def test_folder_reads_every_conll_file_sorted(tmp_path, excerpt):
    write_conll2012(excerpt[:2], tmp_path / "b" / "x.v4_gold_conll")
    write_conll2012(excerpt[2:], tmp_path / "a.gold_conll")
    (tmp_path / "notes.txt").write_text("not a corpus file")
    assert read_conll2012(tmp_path) == excerpt[2:] + excerpt[:2]


# ---------------------------------------------------------------- trees and spans


def test_parse_bits_round_trip():
    bits = ["(TOP(S(NP*", "*)", "(VP*", "(NP*))", "*))"]
    words = ["The", "dog", "saw", "it", "."]
    pos = ["DT", "NN", "VBD", "PRP", "."]
    tree = parse_bits_to_tree(words, pos, bits, [f"f:{i}" for i in range(5)])
    assert tree == nltk.Tree.fromstring("(TOP (S (NP (DT The) (NN dog)) (VP (VBD saw) (NP (PRP it))) (. .)))")
    assert tree_to_parse_bits(tree) == bits


def test_bracket_spans_round_trip():
    column = ["(ARG0*", "*)", "(V*)", "*", "(ORG)"]
    spans = brackets_to_spans(column, [f"f:{i}" for i in range(5)])
    assert spans == [(0, 2, "ARG0"), (2, 3, "V"), (4, 5, "ORG")]
    assert brackets_to_spans(spans_to_brackets(spans, 5), ["f:1"] * 5) == spans


def test_bio_to_spans():
    assert bio_to_spans(["B-ARG0", "I-ARG0", "B-V", "O", "I-LOC", "B-X", "B-X"]) == [
        (0, 2, "ARG0"), (2, 3, "V"), (4, 5, "LOC"), (5, 6, "X"), (6, 7, "X")]


# ---------------------------------------------------------------- bad CoNLL-2012 input

GOOD_ROWS = [
    "d 0 0 John NNP (TOP(S(NP*) - - - - (PERSON) (ARG0*) -",
    "d 0 1 runs VBZ (VP*) run run.01 - - * (V*) -",
    "d 0 2 . . *)) - - - - * * -",
]


def _conll_file(tmp_path: Path, rows: list[str]) -> Path:
    """A one-sentence file; row i is on line i + 2."""
    path = tmp_path / "bad.gold_conll"
    path.write_text("#begin document (d); part 000\n" + "\n".join(rows) + "\n\n#end document\n")
    return path


def _with_cell(row: int, column: int, value: str) -> list[str]:
    """GOOD_ROWS with one cell replaced (column 0-based; None deletes it)."""
    rows = [r.split() for r in GOOD_ROWS]
    if value is None:
        del rows[row][column]
    else:
        rows[row][column] = value
    return [" ".join(r) for r in rows]


def test_good_rows_read(tmp_path):
    (sentence,) = read_conll2012(_conll_file(tmp_path, GOOD_ROWS))
    assert sentence.entities == [(0, 1, "PERSON")]
    assert sentence.arguments == [[(0, 1, "ARG0"), (1, 2, "V")]]


@pytest.mark.parametrize("rows, line, words", [
    (_with_cell(1, 11, None), 3, "columns"),                        # wrong column count
    (_with_cell(0, 7, "x.01"), 2, "predicates"),                    # 2 predicates, 1 SRL column
    ([" ".join(r.split()[:10]) for r in GOOD_ROWS], 2, "at least"),  # too few columns
    (_with_cell(2, 2, "5"), 4, "word index"),                       # index not consecutive
    (_with_cell(1, 2, "one"), 3, "word index"),
    (_with_cell(2, 5, "*)"), 2, "never closed"),                    # unbalanced parse: TOP unclosed
    (_with_cell(2, 5, "*)))"), 4, "closes no open"),                # unbalanced parse: extra ')'
    (_with_cell(1, 5, "(VP*)))")[:2] + ["d 0 2 . . * - - - - * * -"], 4, "outside the parse tree"),
    (_with_cell(1, 5, "(VP**"), 3, "malformed parse bit"),
    (_with_cell(0, 10, "(PERSON*"), 2, "never closed"),             # unbalanced NE
    (_with_cell(2, 10, "*)"), 4, "never opened"),                   # NE close without open
    (_with_cell(0, 10, "(PERSON"), 2, "malformed bracket"),         # malformed NE cell
    (_with_cell(2, 11, "(ARGM-TMP*"), 4, "never closed"),            # unbalanced SRL
    (_with_cell(1, 11, "(C-V*)"), 3, "no '(V*' span"),              # SRL without V
    (_with_cell(2, 11, "(ARG1(ARG2*)"), 4, "malformed bracket"),    # crossing / malformed
])
def test_bad_conll2012_names_file_and_line(tmp_path, rows, line, words):
    path = _conll_file(tmp_path, rows)
    with pytest.raises(DataError) as error:
        read_conll2012(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message, message


def test_nested_ne_names_inner_line(tmp_path):
    rows = _with_cell(0, 10, "(PERSON*")
    rows = _with_cell_in(rows, 1, 10, "(ORG*)")
    rows = _with_cell_in(rows, 2, 10, "*)")
    path = _conll_file(tmp_path, rows)
    with pytest.raises(DataError, match=rf"^{path}:3: .*inside '\(PERSON'"):
        read_conll2012(path)


def _with_cell_in(rows: list[str], row: int, column: int, value: str) -> list[str]:
    """``rows`` with one cell replaced."""
    cells = [r.split() for r in rows]
    cells[row][column] = value
    return [" ".join(c) for c in cells]


def test_empty_and_missing_files(tmp_path):
    empty = tmp_path / "empty.gold_conll"
    empty.write_text("#begin document (d); part 000\n#end document\n")
    with pytest.raises(DataError, match=rf"^{empty}:1: no sentences"):
        read_conll2012(empty)
    missing = tmp_path / "missing.gold_conll"
    with pytest.raises(FileNotFoundError, match=rf"^{missing}:1: "):
        read_conll2012(missing)
    folder = tmp_path / "no_conll"
    folder.mkdir()
    (folder / "notes.txt").write_text("no corpus here")
    with pytest.raises(DataError, match=rf"^{folder}:1: .*_conll"):
        read_conll2012(folder)


# ---------------------------------------------------------------- bad bytes and document markers


def _conll_bytes(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bytes.gold_conll"
    path.write_bytes(data)
    return path


BEGIN, END, BODY = b"#begin document (d); part 000\n", b"#end document\n", "\n".join(GOOD_ROWS).encode() + b"\n"


@pytest.mark.parametrize("bad, byte, offset, shown", [
    (b"ru\xffns", 9, 92, "0xff, invalid start byte"),           # a byte no UTF-8 text holds
    (b"r\xc3ns", 8, 91, "0xc3, invalid continuation byte"),     # a cut-off two-byte character
])
def test_invalid_utf8_names_line_and_byte(tmp_path, bad, byte, offset, shown):
    path = _conll_bytes(tmp_path, BEGIN + BODY.replace(b"runs", bad) + b"\n" + END)
    with pytest.raises(DataError) as error:
        read_conll2012(path)
    assert str(error.value) == (f"{path}:3: invalid UTF-8 at byte {byte} of the line (file offset {offset}: {shown}): "
                                "expected a UTF-8 text file")


def test_invalid_utf8_in_conllu_and_utf16(tmp_path):
    path = tmp_path / "latin1.conllu"
    path.write_bytes(("# sent_id = 1\n" + "\n".join(GOOD_CONLLU[1:]) + "\n").encode().replace(b"John\tPROPN", b"Jo\xe9n\tPROPN"))
    with pytest.raises(DataError, match=rf"^{path}:2: invalid UTF-8 at byte 10 of the line \(file offset 23: 0xe9, "):
        read_conllu(path)
    utf16 = _conll_bytes(tmp_path, (BEGIN + BODY + END).decode().encode("utf-16"))
    with pytest.raises(DataError, match=rf"^{utf16}:1: invalid UTF-8 at byte 1 .*UTF-16 byte-order mark"):
        read_conll2012(utf16)


def test_nul_byte(tmp_path):
    path = _conll_bytes(tmp_path, BEGIN + BODY.replace(b"runs", b"ru\0ns") + b"\n" + END)
    with pytest.raises(DataError, match=rf"^{path}:3: NUL byte at byte 9 of the line \(file offset 92\)"):
        read_conll2012(path)


def test_bom_and_crlf_read_like_the_plain_file(tmp_path, excerpt):
    data = EWT_EXCERPT.read_bytes().replace(b"\n", b"\r\n")
    assert read_conll2012(_conll_bytes(tmp_path, b"\xef\xbb\xbf" + data)) == excerpt
    conllu = tmp_path / "crlf.conllu"
    conllu.write_bytes(b"\xef\xbb\xbf" + EWT_EXCERPT_CONLLU.read_bytes().replace(b"\n", b"\r\n"))
    assert read_conllu(conllu) == read_conllu(EWT_EXCERPT_CONLLU)


def test_truncated_document(tmp_path):
    path = _conll_bytes(tmp_path, BEGIN + BODY + b"\n" + END + BEGIN + BODY[:40])  # cut inside a row
    with pytest.raises(DataError) as error:
        read_conll2012(path)
    assert str(error.value) == (f"{path}:7: document begun here is never closed: the file ends at line 8 without "
                                "its '#end document'; the file looks truncated")


@pytest.mark.parametrize("data, line, words", [
    (BODY + b"\n" + END, 5, "'#end document' closes no document"),
    (BEGIN + BODY + END + END, 6, "closes no document (the last document ended at line 5)"),
    (BEGIN + BODY + b"\n" + BEGIN + BODY + END, 6, "inside the document begun at line 1"),
    (BEGIN + BODY + END + b"\n" + BODY, 7, "row outside any document"),
    (BODY + b"\n" + BEGIN + BODY + END, 5, "after the row at line 1, which lies outside any document"),
])
def test_bad_document_markers(tmp_path, data, line, words):
    path = _conll_bytes(tmp_path, data)
    with pytest.raises(DataError) as error:
        read_conll2012(path)
    assert str(error.value).startswith(f"{path}:{line}: "), str(error.value)
    assert words in str(error.value)


def test_file_without_document_markers(tmp_path):
    (sentence,) = read_conll2012(_conll_bytes(tmp_path, BODY + b"\n\n# a comment\n"))
    assert sentence.words == ["John", "runs", "."] and sentence.source == f"{tmp_path / 'bytes.gold_conll'}:1"


def test_too_deep_parse_tree(tmp_path):
    # found by tests/test_fuzz_readers.py: read fine, then RecursionError in nltk, pickle, head rules
    deep = b"(X" * 1000 + b"(VP*)" + b")" * 1000
    path = _conll_bytes(tmp_path, BEGIN + BODY.replace(b"(VP*)", deep) + b"\n" + END)
    with pytest.raises(DataError, match=rf"^{path}:3: parse bit '\(X\(X.*more than 200 deep"):
        read_conll2012(path)


# ---------------------------------------------------------------- bad CoNLL-U input

GOOD_CONLLU = [
    "# sent_id = 1",
    "1\tJohn\tJohn\tPROPN\tNNP\t_\t2\tnsubj\t_\t_",
    "2\truns\trun\tVERB\tVBZ\t_\t0\troot\t_\t_",
    "3\t.\t.\tPUNCT\t.\t_\t2\tpunct\t_\t_",
]


def _conllu_file(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "bad.conllu"
    path.write_text("\n".join(lines) + "\n\n")
    return path


def _conllu_with(line: int, column: int, value: str) -> list[str]:
    """GOOD_CONLLU with one cell of (1-based) ``line`` replaced (None deletes it)."""
    lines = [row.split("\t") for row in GOOD_CONLLU]
    if value is None:
        del lines[line - 1][column]
    else:
        lines[line - 1][column] = value
    return ["\t".join(row) for row in lines]


def test_good_conllu_with_range_and_empty_node(tmp_path):
    lines = GOOD_CONLLU[:1] + ["1-2\tJohnruns\t_\t_\t_\t_\t_\t_\t_\t_"] + GOOD_CONLLU[1:] + [
        "3.1\tgoes\tgo\tVERB\t_\t_\t_\t_\t2:conj\t_"]
    (sentence,) = read_conllu(_conllu_file(tmp_path, lines), pos="xpos")
    assert sentence.words == ["John", "runs", "."]
    assert sentence.heads == [2, 0, 2] and sentence.rels == ["nsubj", "root", "punct"]
    assert sentence.pos == ["NNP", "VBZ", "."]
    with pytest.raises(DataError, match=r":2: XPOS is missing"):
        read_conllu(_conllu_file(tmp_path, _conllu_with(2, 4, "_")), pos="xpos")


@pytest.mark.parametrize("lines, line, words", [
    (_conllu_with(3, 9, None), 3, "columns"),
    (_conllu_with(2, 0, "x"), 2, "not an integer"),
    (_conllu_with(3, 6, "y"), 3, "not an integer"),
    (_conllu_with(3, 0, "3"), 3, "expected 2"),
    (_conllu_with(4, 6, "7"), 4, "out of range"),
    (_conllu_with(4, 6, "-1"), 4, "out of range"),
    (_conllu_with(2, 6, "0"), 2, "2 roots"),
    (_conllu_with(3, 6, "1"), 2, "0 roots"),
    (_conllu_with(2, 6, "3")[:3] + ["3\t.\t.\tPUNCT\t.\t_\t1\tpunct\t_\t_"], 2, "cycle"),
])
def test_bad_conllu_names_file_and_line(tmp_path, lines, line, words):
    path = _conllu_file(tmp_path, lines)
    with pytest.raises(DataError) as error:
        read_conllu(path)
    message = str(error.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert words in message, message


def test_conllu_number_too_long_for_int(tmp_path):
    # found by tests/test_fuzz_readers.py: int() refuses over 4300 digits (ValueError)
    path = _conllu_file(tmp_path, _conllu_with(3, 6, "9" * 5000))
    with pytest.raises(DataError, match=rf"^{path}:3: head '9999.*\.\.\.' has 5000 characters; expected a word number"):
        read_conllu(path)


def test_empty_conllu(tmp_path):
    path = _conllu_file(tmp_path, ["# only a comment"])
    with pytest.raises(DataError, match=rf"^{path}:1: no sentences"):
        read_conllu(path)


def test_attach_conllu_mismatches():
    conllu = read_conllu(EWT_EXCERPT_CONLLU)
    sentences = read_conll2012(EWT_EXCERPT)
    with pytest.raises(DataError, match=rf"^{EWT_EXCERPT_CONLLU}:\d+: .*CoNLL-U ends before .*{EWT_EXCERPT}:102"):
        attach_conllu(sentences, conllu[:-1], EWT_EXCERPT_CONLLU)
    shifted = conllu[:1] + conllu[2:]
    line = conllu[2].source.rsplit(":", 1)[1]
    with pytest.raises(DataError, match=rf"^{EWT_EXCERPT_CONLLU}:{line}: .*differ.*{EWT_EXCERPT}:10"):
        attach_conllu(sentences, shifted, EWT_EXCERPT_CONLLU)
    assert not any(s.has("deps") for s in sentences)  # nothing changed on failure


# ---------------------------------------------------------------- Hugging Face rows

POS_NAMES = ["XX", "``", "$", "''", ",", "-LRB-", "-RRB-", ".", ":", "ADD", "AFX", "CC", "CD", "DT", "EX",
             "FW", "HYPH", "IN", "JJ", "JJR", "JJS", "LS", "MD", "NFP", "NN", "NNP", "NNPS", "NNS", "PDT",
             "POS", "PRP", "PRP$", "RB", "RBR", "RBS", "RP", "SYM", "TO", "UH", "VB", "VBD", "VBG", "VBN",
             "VBP", "VBZ", "WDT", "WP", "WP$", "WRB"]
NE_NAMES = ["O"] + [f"{p}-{t}" for t in ["PERSON", "NORP", "FAC", "ORG", "GPE", "LOC", "PRODUCT", "DATE"]
                    for p in "BI"]


def _hf_dataset():
    """A two-document dataset with the conll2012_ontonotesv5 feature layout."""
    import datasets

    features = datasets.Features({
        "document_id": datasets.Value("string"),
        "sentences": [{
            "part_id": datasets.Value("int32"),
            "words": datasets.Sequence(datasets.Value("string")),
            "pos_tags": datasets.Sequence(datasets.ClassLabel(names=POS_NAMES)),
            "parse_tree": datasets.Value("string"),
            "predicate_lemmas": datasets.Sequence(datasets.Value("string")),
            "predicate_framenet_ids": datasets.Sequence(datasets.Value("string")),
            "word_senses": datasets.Sequence(datasets.Value("float32")),
            "speaker": datasets.Value("string"),
            "named_entities": datasets.Sequence(datasets.ClassLabel(names=NE_NAMES)),
            "srl_frames": [{"verb": datasets.Value("string"), "frames": datasets.Sequence(datasets.Value("string"))}],
            "coref_spans": datasets.Sequence(datasets.Sequence(datasets.Value("int32"), length=3)),
        }],
    })

    def sentence(words, pos, tree, ne, frames):
        n = len(words)
        return {"part_id": 0, "words": words, "pos_tags": [POS_NAMES.index(t) for t in pos], "parse_tree": tree,
                "predicate_lemmas": [None] * n, "predicate_framenet_ids": [None] * n, "word_senses": [None] * n,
                "speaker": "-", "named_entities": [NE_NAMES.index(t) for t in ne],
                "srl_frames": [{"verb": v, "frames": f} for v, f in frames], "coref_spans": []}

    first = sentence(
        ["John", "Smith", "saw", "Mary", "in", "Paris", "."], ["NNP", "NNP", "VBD", "NNP", "IN", "NNP", "."],
        "(TOP(S(NP (NNP John) (NNP Smith))(VP (VBD saw) (NP (NNP Mary)) (PP (IN in) (NP (NNP Paris))))(. .)))",
        ["B-PERSON", "I-PERSON", "O", "B-PERSON", "O", "B-GPE", "O"],
        [("see", ["B-ARG0", "I-ARG0", "B-V", "B-ARG1", "B-ARGM-LOC", "I-ARGM-LOC", "O"])])
    brackets = sentence(["(", "Hi", ")"], ["-LRB-", "UH", "-RRB-"],
                        "(TOP(FRAG (-LRB- -LRB-) (INTJ (UH Hi)) (-RRB- -RRB-) ))", ["O", "O", "O"], [])
    said = sentence(["They", "said", "he", "left", "."], ["PRP", "VBD", "PRP", "VBD", "."], None,
                    ["O"] * 5, [("leave", ["O", "O", "B-ARG0", "B-V", "O"]),
                                ("say", ["B-ARG0", "B-V", "B-ARG1", "I-ARG1", "O"])])
    rows = {"document_id": ["nw/test/00/doc_0001", "bc/test/00/doc_0002"], "sentences": [[first, brackets], [said]]}
    return datasets.Dataset.from_dict(rows, features=features)


def test_sentences_from_hf(tmp_path):
    sentences = sentences_from_hf(_hf_dataset())
    assert len(sentences) == 3
    first, brackets, said = sentences
    assert first.pos == ["NNP", "NNP", "VBD", "NNP", "IN", "NNP", "."]
    assert first.tree[0][1].label() == "VP" and first.tree.leaves() == first.words
    assert first.entities == [(0, 2, "PERSON"), (3, 4, "PERSON"), (5, 6, "GPE")]
    assert first.predicates == [2]
    assert first.arguments == [[(0, 2, "ARG0"), (2, 3, "V"), (3, 4, "ARG1"), (4, 6, "ARGM-LOC")]]
    assert first.source == "nw/test/00/doc_0001:1"
    assert brackets.tree.leaves() == ["(", "Hi", ")"]  # HF writes -LRB- leaves; words win
    assert said.tree is None and said.entities == []
    assert said.predicates == [1, 3]  # sorted by word index, like CoNLL-2012 columns
    assert said.arguments[0] == [(0, 1, "ARG0"), (1, 2, "V"), (2, 4, "ARG1")]
    path = write_conll2012(sentences, tmp_path / "hf.gold_conll")
    assert read_conll2012(path) == sentences


class _Rows(list):
    """A plain-Python stand-in for a ``datasets.Dataset`` (rows and the features layout)."""

    features = {"sentences": [{"pos_tags": SimpleNamespace(feature=SimpleNamespace(names=POS_NAMES)),
                               "named_entities": SimpleNamespace(feature=SimpleNamespace(names=NE_NAMES))}]}


def _hf_row(**changes) -> _Rows:
    sentence = {"words": ["John", "saw", "Mary"], "pos_tags": [POS_NAMES.index(t) for t in ("NNP", "VBD", "NNP")],
                "parse_tree": "(TOP(S(NP (NNP John))(VP (VBD saw) (NP (NNP Mary)))))", "named_entities": [1, 0, 1],
                "srl_frames": [{"verb": "see", "frames": ["B-ARG0", "B-V", "B-ARG1"]}]}
    return _Rows([{"document_id": "nw/doc", "sentences": [sentence, {**sentence, **changes}]}])


def test_hf_stand_in_reads():
    assert [s.words for s in sentences_from_hf(_hf_row())] == [["John", "saw", "Mary"]] * 2


@pytest.mark.parametrize("changes, words", [
    ({"pos_tags": [24, 40, 99]}, "pos_tags[2] is 99; expected a label index in 0..48"),  # was IndexError
    ({"pos_tags": [24, 40]}, "pos_tags has 2 tags; expected one per word (3)"),     # was IndexError in _tree
    ({"named_entities": [1, -1, 0]}, "named_entities[1] is -1"),                      # was the last label, silently
    ({"parse_tree": "(TOP" + "(X" * 300 + " w" + ")" * 301}, "more than 200 deep"),
])
def test_bad_hf_rows(changes, words):
    with pytest.raises(DataError) as error:
        sentences_from_hf(_hf_row(**changes))
    assert str(error.value).startswith("nw/doc:2: ") and words in str(error.value), str(error.value)


def test_load_hf_uses_only_the_local_cache(tmp_path):
    before = {key: os.environ.get(key) for key in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE")}
    with pytest.raises(DataError, match="not in the local Hugging Face cache"):
        load_hf_conll2012("english_v4", "validation", cache_dir=str(tmp_path / "hf"))
    assert {key: os.environ.get(key) for key in before} == before


# ---------------------------------------------------------------- demo corpus


@pytest.fixture(scope="module")
def demo() -> list[Sentence]:
    return generate_demo(300, seed=7)


def test_demo_is_deterministic(demo):
    assert generate_demo(300, seed=7) == demo
    assert generate_demo(300, seed=8) != demo


def test_demo_layers_and_shapes(demo):
    for sentence in demo:
        assert all(sentence.has(layer) for layer in ("words", "pos", "tree", "entities", "srl"))
        assert MIN_WORDS <= len(sentence.words) <= MAX_WORDS
        assert sentence.tree.leaves() == sentence.words
        assert [tag for _, tag in sentence.tree.pos()] == sentence.pos
        assert sentence.predicates == sorted(sentence.predicates) and sentence.predicates
        for predicate, spans in zip(sentence.predicates, sentence.arguments):
            assert (predicate, predicate + 1, "V") in spans
            assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # sorted, non-overlapping
    assert sum(len(s.predicates) > 1 for s in demo) > 50
    assert {label for s in demo for _, _, label in s.entities} == {"PERSON", "ORG", "LOC", "GPE"}
    roles = {role for s in demo for spans in s.arguments for _, _, role in spans}
    assert {"ARG0", "ARG1", "V", "ARGM-LOC", "ARGM-TMP", "ARGM-MOD"} <= roles


def test_demo_round_trip(demo, tmp_path):
    path = write_conll2012(demo, tmp_path / "demo.gold_conll")
    assert read_conll2012(path) == demo


def test_ensure_demo_corpus(tmp_path):
    sizes = {"train": 40, "dev": 10, "test": 10}
    paths = ensure_demo_corpus(tmp_path / "a", seed=3, sizes=sizes)
    assert {split: len(read_conll2012(path)) for split, path in paths.items()} == sizes
    stamps = {split: path.stat().st_mtime_ns for split, path in paths.items()}
    assert ensure_demo_corpus(tmp_path / "a", seed=3, sizes=sizes) == paths
    assert {split: path.stat().st_mtime_ns for split, path in paths.items()} == stamps  # not rewritten
    other = ensure_demo_corpus(tmp_path / "b", seed=3, sizes=sizes)
    assert all(other[s].read_bytes() == paths[s].read_bytes() for s in sizes)
    assert paths["train"].read_bytes() != paths["dev"].read_bytes()  # splits use different seeds
    paths["dev"].write_text("tampered")
    ensure_demo_corpus(tmp_path / "a", seed=3, sizes=sizes)
    assert paths["dev"].read_bytes() == other["dev"].read_bytes()
    changed = ensure_demo_corpus(tmp_path / "a", seed=4, sizes=sizes)
    assert changed["dev"].read_bytes() != other["dev"].read_bytes()


def test_default_demo_sizes_and_hash_seed_independence(tmp_path):
    paths = ensure_demo_corpus(tmp_path / "here")
    assert {split: len(read_conll2012(p)) for split, p in paths.items()} == {"train": 1200, "dev": 200, "test": 200}
    code = f"from mtl_heads.data.demo import ensure_demo_corpus; ensure_demo_corpus({str(tmp_path / 'there')!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONHASHSEED": "12345"})
    for split, path in paths.items():
        assert (tmp_path / "there" / path.name).read_bytes() == path.read_bytes()


# ---------------------------------------------------------------- the whole EWT dev split


@pytest.mark.integration
def test_ewt_dev_counts(ewt):
    gold, conllu = ewt / "en_ewt.dev.gold_conll", ewt / "en_ewt.dev.conllu"
    if not gold.is_file() or not conllu.is_file():
        pytest.skip(f"{ewt} not present")
    sentences = read_conll2012(gold)
    attach_conllu(sentences, read_conllu(conllu), conllu)
    assert len(sentences) == 1968
    assert sum(len(s.words) for s in sentences) == 24892
    assert sum(len(s.predicates) for s in sentences) == 4963
    assert sum(len(s.entities) for s in sentences) == 957
    assert all(s.has(layer) for s in sentences for layer in LAYERS)


def test_sentences_per_role_are_a_count_or_a_range(tmp_path, monkeypatch):
    """data.sentences keeps, per role, the first N sentences of its split or [start, end) of it (a role
    named there ignores max_sentences); one split can feed two roles in disjoint slices."""
    from mtl_heads.config import ConfigError, load_config
    from mtl_heads.data.corpus import load_corpus

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path))
    whole = load_corpus(load_config([]).data)
    cfg = load_config(["data.splits={train: dev, dev: dev, test: test}", "data.max_sentences=7",
                       "data.max_eval_sentences=9", "data.sentences={train: 100, dev: [100, 150]}"])
    cuts = {}
    corpus = load_corpus(cfg.data, cuts=cuts)
    assert [s.words for s in corpus["train"]] == [s.words for s in whole["dev"][:100]]
    assert [s.words for s in corpus["dev"]] == [s.words for s in whole["dev"][100:150]]
    assert [s.words for s in corpus["test"]] == [s.words for s in whole["test"][:9]]  # max_eval_sentences still
    assert cuts == {"train": {"kept": 100, "of": 200, "start": 0, "by": "data.sentences.train"},
                    "dev": {"kept": 50, "of": 200, "start": 100, "by": "data.sentences.dev"},
                    "test": {"kept": 9, "of": 200, "start": 0, "by": "data.max_eval_sentences=9"}}
    for bad in ("{train: 0}", "{train: [5, 2]}", "{dev: [1, 2, 3]}", "{test: x}"):
        with pytest.raises(ConfigError, match="config key 'data.sentences'"):
            load_config([f"data.sentences={bad}"])


def test_max_sentences_cuts_train_alone_and_max_eval_sentences_dev_and_test(tmp_path, monkeypatch):
    """data.max_sentences limits the training split only, so that a quick run is scored on the whole
    dev and test splits; data.max_eval_sentences cuts those, and load_corpus reports each cut."""
    from mtl_heads.config import ConfigError, load_config
    from mtl_heads.data.corpus import cut_note, load_corpus

    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path))
    sizes = "data.demo_sizes={train: 30, dev: 12, test: 10}"
    whole = load_corpus(load_config([sizes]).data)
    cuts = {}
    train_only = load_corpus(load_config([sizes, "data.max_sentences=5"]).data, cuts=cuts)
    assert [len(train_only[r]) for r in ("train", "dev", "test")] == [5, 12, 10]
    assert cuts == {"train": {"kept": 5, "of": 30, "start": 0, "by": "data.max_sentences=5"}}
    cuts = {}
    both = load_corpus(load_config([sizes, "data.max_sentences=5", "data.max_eval_sentences=11"]).data, cuts=cuts)
    assert [len(both[r]) for r in ("train", "dev", "test")] == [5, 11, 10]
    assert [s.words for s in both["dev"]] == [s.words for s in whole["dev"][:11]]
    assert set(cuts) == {"train", "dev"}  # test holds 10 sentences: nothing of it is cut
    assert cut_note(cuts["dev"]) == "the first 11 of its 12 sentences (data.max_eval_sentences=11)"
    assert cut_note({"kept": 50, "of": 200, "start": 100, "by": "data.sentences.dev"}) == \
        "sentences 100-149 of its 200 (data.sentences.dev)"
    with pytest.raises(ConfigError, match="config key 'data.max_eval_sentences': expected an integer >= 1"):
        load_config(["data.max_eval_sentences=0"])
