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

import pickle
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from mtl_heads.data.conll2012 import read_conll2012
from mtl_heads.data.conllu import attach_conllu, read_conllu
from mtl_heads.data.errors import DataError
from mtl_heads.data.hf import sentences_from_hf
from mtl_heads.data.sentence import Sentence

FIXTURES = Path(__file__).parent / "fixtures"
CONLL = (FIXTURES / "ewt_excerpt.gold_conll").read_bytes()
CONLLU = (FIXTURES / "ewt_excerpt.conllu").read_bytes()

PER_KIND_EXAMPLES = 60
MIXED_EXAMPLES = 300
FUZZ = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow])

# cells that look like the format: bracket cells, parse bits, ids, placeholders
CELLS = [b"*", b"-", b"_", b"0", b"1", b"-1", b"x", b"(V*)", b"(ARG0*", b"*)", b"(PERSON)", b"(NP*",
         b"*))", b"(TOP(S*", b"(", b")", b"((*", b"*(", b"(*)", b"(X*)", b"come.03", b"1-2", b"8.1"]
PARSE_COLUMN = 5  # CoNLL-2012 parse bits (CoNLL-U: FEATS)
NUMBER_COLUMNS = [0, 2, 6]  # CoNLL-U ID and HEAD, CoNLL-2012 word index


# ---------------------------------------------------------------- mutations of a file's bytes


def _lines(data: bytes) -> list[bytes]:
    return data.split(b"\n")


def _split(line: bytes, sep: bytes | None) -> list[bytes]:
    return line.split(sep) if sep else line.split()


def _position(draw, data: bytes, end: bool = True) -> int:
    return draw(st.integers(0, len(data) if end else max(len(data) - 1, 0)))


def truncate(draw, data, sep):
    return data[: _position(draw, data)]


def drop_column(draw, data, sep):
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    cells = _split(lines[i], sep)
    if cells:
        del cells[draw(st.integers(0, len(cells) - 1))]
    lines[i] = (sep or b" ").join(cells)
    return b"\n".join(lines)


def extra_column(draw, data, sep):
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    cells = _split(lines[i], sep)
    cells.insert(draw(st.integers(0, len(cells))), draw(st.sampled_from(CELLS)))
    lines[i] = (sep or b" ").join(cells)
    return b"\n".join(lines)


def replace_cell(draw, data, sep):
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    cells = _split(lines[i], sep)
    if cells:
        cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(CELLS) | st.binary(max_size=3))
    lines[i] = (sep or b" ").join(cells)
    return b"\n".join(lines)


def _set_cell(draw, data, sep, columns: list[int], value) -> bytes:
    """``data`` with the cell in one of ``columns`` of a random line set to ``value(cell)``."""
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    cells, column = _split(lines[i], sep), draw(st.sampled_from(columns))
    if column < len(cells):
        cells[column] = value(cells[column])
    lines[i] = (sep or b" ").join(cells)
    return b"\n".join(lines)


def deepen(draw, data, sep):
    """Wrap a parse bit in 1000 more levels, still balanced: a tree too deep to walk recursively."""
    return _set_cell(draw, data, sep, [PARSE_COLUMN], lambda cell: b"(X" * 1000 + cell + b")" * 1000)


def long_number(draw, data, sep):
    """An id / head / word index of 4400 digits: int() refuses more than 4300."""
    return _set_cell(draw, data, sep, NUMBER_COLUMNS, lambda cell: b"9" * 4400)


def insert_bytes(draw, data, sep):
    at = _position(draw, data)
    return data[:at] + draw(st.binary(min_size=1, max_size=4)) + data[at:]


def replace_bytes(draw, data, sep):
    at = _position(draw, data, end=False)
    new = draw(st.binary(min_size=1, max_size=4))
    return data[:at] + new + data[at + len(new):]


def shuffle_lines(draw, data, sep):
    return b"\n".join(draw(st.permutations(_lines(data))))


def swap_lines(draw, data, sep):
    lines = _lines(data)
    i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
    lines[i], lines[j] = lines[j], lines[i]
    return b"\n".join(lines)


def remove_bracket(draw, data, sep):
    brackets = [m.start() for m in re.finditer(rb"[()]", data)]
    if not brackets:
        return data
    at = brackets[draw(st.integers(0, len(brackets) - 1))]
    return data[:at] + data[at + 1:]


def insert_bracket(draw, data, sep):
    at = _position(draw, data)
    return data[:at] + draw(st.sampled_from([b"(", b")", b"(X", b"*"])) + data[at:]


def duplicate_line(draw, data, sep):
    lines = _lines(data)
    line = lines[draw(st.integers(0, len(lines) - 1))]
    lines.insert(draw(st.integers(0, len(lines))), line)
    return b"\n".join(lines)


def delete_lines(draw, data, sep):
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    del lines[i: i + draw(st.integers(1, 3))]
    return b"\n".join(lines)


MUTATIONS = {f.__name__: f for f in (truncate, drop_column, extra_column, replace_cell, deepen, long_number,
                                     insert_bytes, replace_bytes, shuffle_lines, swap_lines, remove_bracket,
                                     insert_bracket, duplicate_line, delete_lines)}
KINDS = sorted(MUTATIONS) + ["crlf_bom"]  # crlf_bom: \r\n line ends and a UTF-8 BOM, plus one mutation


@st.composite
def mutated(draw, data: bytes, sep: bytes | None, kinds: list[str], at_most: int = 1) -> bytes:
    """``data`` after 1..``at_most`` mutations drawn from ``kinds`` (``sep``: column separator,
    None for runs of whitespace)."""
    for kind in draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=at_most)):
        note(f"mutation: {kind}")
        if kind == "crlf_bom":
            data = b"\xef\xbb\xbf" + data.replace(b"\n", b"\r\n")
            kind = draw(st.sampled_from(sorted(MUTATIONS)))
            note(f"mutation: {kind}")
        data = MUTATIONS[kind](draw, data, sep)
    return data


# ---------------------------------------------------------------- the property


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _line_count(data: bytes) -> int:
    """Lines as an editor counts them (``\\n``, ``\\r\\n`` or ``\\r`` ends a line)."""
    return max(1, len(re.split(rb"\r\n|\r|\n", data)))


def check(read, files: dict[Path, bytes]):
    """Write ``files``, then ``read()`` must give a list of Sentences or a DataError whose message
    starts with "path:line: " for one of the files and a line inside it."""
    for path, data in files.items():
        path.write_bytes(data)
    try:
        sentences = read()
    except DataError as error:
        message = str(error)
        spots = {path: re.match(rf"{re.escape(str(path))}:(\d+): \S", message) for path in files}
        named = [(path, int(m.group(1))) for path, m in spots.items() if m]
        assert named, f"message does not start with 'path:line: ': {message}"
        path, line = named[0]
        assert 1 <= line <= _line_count(files[path]), f"line {line} outside the file: {message}"
        what = re.sub(r"'[^']*'|\d+", "_", message[len(f"{path}:{line}: "):])
        event("DataError: " + " ".join(what.split()[:4]))  # see pytest --hypothesis-show-statistics
        return
    assert isinstance(sentences, list) and all(isinstance(s, Sentence) for s in sentences)
    for s in sentences:  # and what it returns is usable
        assert s.words and (s.pos is None or len(s.pos) == len(s.words))
        assert s.tree is None or s.tree.leaves() == s.words  # walks the tree recursively
        assert all(0 <= a < b <= len(s.words) for a, b, _ in s.entities or [])
        assert s.heads is None or (len(s.heads) == len(s.rels) == len(s.words))
    assert pickle.loads(pickle.dumps(sentences)) == sentences  # as DataLoader workers get them
    event("read")


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
