"""The mutations of the reader fuzzing (the ways real files break) and the property every reader must
keep; used by tests/test_fuzz_readers.py and tests/test_conllu.py. See test_fuzz_readers.py's docstring."""
import pickle
import re
from pathlib import Path

from hypothesis import HealthCheck, event, note
from hypothesis import strategies as st

from mtl_heads.data.errors import DataError
from mtl_heads.data.sentence import Sentence

FIXTURES = Path(__file__).parent / "fixtures"
CONLL = (FIXTURES / "ewt_excerpt.gold_conll").read_bytes()
CONLLU = (FIXTURES / "ewt_excerpt.conllu").read_bytes()

PER_KIND_EXAMPLES = 60
MIXED_EXAMPLES = 300
FUZZ = {"deadline": None, "derandomize": True, "database": None,
         "suppress_health_check": [HealthCheck.too_slow]}

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


def _edit_line(draw, data: bytes, sep, edit) -> bytes:
    """``data`` with one random line split into cells, ``edit(cells)`` (changing the list in place), and
    joined again."""
    lines = _lines(data)
    i = draw(st.integers(0, len(lines) - 1))
    cells = _split(lines[i], sep)
    edit(cells)
    lines[i] = (sep or b" ").join(cells)
    return b"\n".join(lines)


def drop_column(draw, data, sep):
    def edit(cells):
        if cells:
            del cells[draw(st.integers(0, len(cells) - 1))]
    return _edit_line(draw, data, sep, edit)


def extra_column(draw, data, sep):
    return _edit_line(draw, data, sep,
                      lambda cells: cells.insert(draw(st.integers(0, len(cells))), draw(st.sampled_from(CELLS))))


def replace_cell(draw, data, sep):
    def edit(cells):
        if cells:
            cells[draw(st.integers(0, len(cells) - 1))] = draw(st.sampled_from(CELLS) | st.binary(max_size=3))
    return _edit_line(draw, data, sep, edit)


def _set_cell(draw, data, sep, columns: list[int], value) -> bytes:
    """``data`` with the cell in one of ``columns`` of a random line set to ``value(cell)``."""
    def edit(cells):
        column = draw(st.sampled_from(columns))
        if column < len(cells):
            cells[column] = value(cells[column])
    return _edit_line(draw, data, sep, edit)


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
