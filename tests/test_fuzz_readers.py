"""Property-based fuzzing of the data readers: whatever the bytes, a reader returns sentences or
raises :class:`DataError` naming "path:line: " -- never another exception, never a hang.

Inputs are the test fixtures (``tests/fixtures/ewt_excerpt.gold_conll``, 109 lines, and
``ewt_excerpt.conllu``, 139 lines) mutated the ways real files break (``KINDS``): truncation at a
byte, dropped / extra / replaced columns on a line, random bytes inserted or overwritten, all lines
shuffled or two lines swapped, ``(`` / ``)`` removed or inserted (parse bits, NE and SRL columns
hold most of them), lines duplicated or deleted, a parse bit wrapped 1000 levels deep, a number of
4400 digits, and ``\r\n`` line ends with a UTF-8 BOM before one more mutation. They feed

* ``read_conll2012`` and ``read_conllu``: one test per mutation kind (one mutation each) and one
  mixed test (1-4 mutations of any kind);
* the CoNLL-2012 + CoNLL-U pair read together through ``attach_conllu``, as ``data.format=ewt``
  does (``mtl_heads.data.corpus._ewt``), either file or both mutated (0-2 mutations each);
* the Hugging Face converter ``sentences_from_hf`` with a plain-Python stand-in for a
  ``datasets.Dataset`` (rows plus the ``features`` layout it reads label names from), whose
  sentence dicts get words / tags added, deleted, replaced (ints out of the label range, -1
  included) or shuffled, parse_tree strings mutated or nested too deep, SRL frames added, deleted
  or garbled. Keys and value types are not mutated: a real Dataset's features fix them.

Sentences a reader does return must be usable: layers as long as the words, the tree's leaves the
words, spans inside the sentence, and a pickle round trip (as DataLoader workers get them).

Examples (``@settings(derandomize=True, database=None)``, so every run tries the same inputs):
PER_KIND_EXAMPLES = 60 per mutation kind and reader (15 kinds x 2 readers), MIXED_EXAMPLES = 300
for each mixed test, the pair and the HF converter: 15 * 2 * 60 + 4 * 300 = 3000 examples.
Measured on the 2-core development machine: 9 s of CPU, 8-16 s wall-clock depending on load
(``python -m pytest tests/test_fuzz_readers.py``). ``--hypothesis-show-statistics`` lists which
errors the mutations met.
"""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.errors import DataError
from mtl_heads.data.hf import sentences_from_hf
from mtl_heads.data.sentence import Sentence

from fuzzing import CONLL, CONLLU, FIXTURES, FUZZ, KINDS, MIXED_EXAMPLES, PER_KIND_EXAMPLES, check, mutated

@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _read_ewt(conll: Path, conllu: Path) -> list[Sentence]:
    """What ``data.format=ewt`` does with a split (``mtl_heads.data.corpus._ewt``)."""
    sentences = read_conll2012(conll)
    attach_conllu(sentences, read_conllu(conllu), conllu)
    return sentences


def test_fixtures_read_cleanly(folder):
    assert len(_read_ewt(FIXTURES / "ewt_excerpt.gold_conll", FIXTURES / "ewt_excerpt.conllu")) == 8


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=PER_KIND_EXAMPLES, **FUZZ)
@given(data=st.data())
def test_conll2012_mutation(folder, kind, data):
    path = folder / "fuzz.gold_conll"
    check(lambda: read_conll2012(path), {path: data.draw(mutated(CONLL, None, [kind]))})


@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=PER_KIND_EXAMPLES, **FUZZ)
@given(data=st.data())
def test_conllu_mutation(folder, kind, data):
    path = folder / "fuzz.conllu"
    check(lambda: read_conllu(path), {path: data.draw(mutated(CONLLU, b"\t", [kind]))})


@settings(max_examples=MIXED_EXAMPLES, **FUZZ)
@given(content=mutated(CONLL, None, KINDS, at_most=4))
def test_conll2012_mixed(folder, content):
    path = folder / "mixed.gold_conll"
    check(lambda: read_conll2012(path), {path: content})


@settings(max_examples=MIXED_EXAMPLES, **FUZZ)
@given(content=mutated(CONLLU, b"\t", KINDS, at_most=4))
def test_conllu_mixed(folder, content):
    path = folder / "mixed.conllu"
    check(lambda: read_conllu(path), {path: content})


@settings(max_examples=MIXED_EXAMPLES, **FUZZ)
@given(conll=st.just(CONLL) | mutated(CONLL, None, KINDS, at_most=2),
       conllu=st.just(CONLLU) | mutated(CONLLU, b"\t", KINDS, at_most=2))
def test_ewt_pair(folder, conll, conllu):
    paths = folder / "en_ewt.dev.gold_conll", folder / "en_ewt.dev.conllu"
    check(lambda: _read_ewt(*paths), dict(zip(paths, (conll, conllu))))


# ---------------------------------------------------------------- the Hugging Face converter

POS = ["XX", "-LRB-", "-RRB-", ".", "DT", "IN", "NNP", "VBD", "UH", "PRP"]
NE = ["O", "B-PERSON", "I-PERSON", "B-GPE", "I-GPE"]
BIO = ["O", "B-V", "I-V", "B-ARG0", "I-ARG0", "B-ARG1", "I-ARG1", "I-", "B-", "-", ""]


class Rows(list):
    """A stand-in for a ``datasets.Dataset``: its rows, and the ``features`` layout that
    ``sentences_from_hf`` reads the ClassLabel names from."""

    features = {"sentences": [{"pos_tags": SimpleNamespace(feature=SimpleNamespace(names=POS)),
                               "named_entities": SimpleNamespace(feature=SimpleNamespace(names=NE))}]}


def _hf_sentence(words, pos, tree, ne, frames):
    return {"words": words, "pos_tags": [POS.index(p) for p in pos], "parse_tree": tree,
            "named_entities": [NE.index(t) for t in ne], "srl_frames": [{"verb": v, "frames": f} for v, f in frames]}


HF_SENTENCES = [
    _hf_sentence(["John", "saw", "Mary", "in", "Paris", "."], ["NNP", "VBD", "NNP", "IN", "NNP", "."],
                 "(TOP(S(NP (NNP John))(VP (VBD saw) (NP (NNP Mary)) (PP (IN in) (NP (NNP Paris))))(. .)))",
                 ["B-PERSON", "O", "B-PERSON", "O", "B-GPE", "O"],
                 [("see", ["B-ARG0", "B-V", "B-ARG1", "B-ARGM-LOC", "I-ARGM-LOC", "O"])]),
    _hf_sentence(["(", "Hi", ")"], ["-LRB-", "UH", "-RRB-"],
                 "(TOP(FRAG (-LRB- -LRB-) (INTJ (UH Hi)) (-RRB- -RRB-) ))", ["O", "O", "O"], []),
]


def _edit_list(draw, values: list, new) -> list:
    """``values`` with one element deleted, inserted, replaced, or all shuffled."""
    values = list(values)
    edit = draw(st.sampled_from(["delete", "insert", "replace", "shuffle"]))
    if edit == "delete" and values:
        del values[draw(st.integers(0, len(values) - 1))]
    elif edit == "insert":
        values.insert(draw(st.integers(0, len(values))), draw(new))
    elif edit == "replace" and values:
        values[draw(st.integers(0, len(values) - 1))] = draw(new)
    else:
        values = draw(st.permutations(values))
    return values


def _edit_tree(draw, text: str | None) -> str | None:
    text = text or ""
    edit = draw(st.sampled_from(["none", "empty", "delete", "insert", "truncate", "deep"]))
    if edit in ("none", "empty"):
        return None if edit == "none" else ""
    if edit == "deep":
        return "(TOP" + "(X" * draw(st.integers(150, 400)) + " w" + ")" * draw(st.integers(150, 401))
    at = draw(st.integers(0, len(text)))
    if edit == "delete":
        return text[:at] + text[at + 1:]
    if edit == "insert":
        return text[:at] + draw(st.sampled_from(["(", ")", " ", "x", "(X ", "()", "\0"])) + text[at:]
    return text[:at]


@st.composite
def hf_rows(draw) -> Rows:
    sentences = [{**s, "srl_frames": [dict(f) for f in s["srl_frames"]]} for s in HF_SENTENCES]
    for _ in range(draw(st.integers(1, 3))):
        s = draw(st.sampled_from(sentences))
        field = draw(st.sampled_from(["words", "pos_tags", "named_entities", "parse_tree", "srl_frames", "frames"]))
        note(f"edit {field} of {s['words']}")
        if field == "words":
            s["words"] = _edit_list(draw, s["words"], st.sampled_from(["x", "", "(", "a b"]))
        elif field in ("pos_tags", "named_entities"):
            s[field] = _edit_list(draw, s[field], st.integers(-2, 12))
        elif field == "parse_tree":
            s["parse_tree"] = _edit_tree(draw, s["parse_tree"])
        elif field == "srl_frames":
            frame = st.builds(lambda tags: {"verb": "v", "frames": tags}, st.lists(st.sampled_from(BIO), max_size=7))
            s["srl_frames"] = _edit_list(draw, s["srl_frames"], frame)
        elif s["srl_frames"]:
            frame = draw(st.sampled_from(s["srl_frames"]))
            frame["frames"] = _edit_list(draw, frame["frames"], st.sampled_from(BIO))
    return Rows([{"document_id": "nw/00/doc1", "sentences": sentences}])


def test_hf_stand_in_reads_cleanly():
    assert [s.words for s in sentences_from_hf(Rows([{"document_id": "d", "sentences": HF_SENTENCES}]))] == [
        ["John", "saw", "Mary", "in", "Paris", "."], ["(", "Hi", ")"]]


@settings(max_examples=MIXED_EXAMPLES, **FUZZ)
@given(rows=hf_rows())
def test_hf_rows(rows):
    try:
        sentences = sentences_from_hf(rows)
    except DataError as error:
        assert re.match(r"nw/00/doc1:[12]: \S", str(error)), str(error)
        return
    assert all(isinstance(s, Sentence) for s in sentences)
    for s in sentences:  # what it returns is consistent
        assert len(s.pos) == len(s.words)
        assert s.tree is None or s.tree.leaves() == s.words
        assert all(0 <= a < b <= len(s.words) for a, b, _ in s.entities)
