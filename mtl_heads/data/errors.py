"""The one error type of the data layer, and the text-file reading its readers share.

Every message of a :class:`DataError` starts with ``"{path}:{line}: "`` (1-based line of the
offending line; line 1 for an empty or missing file), then says what is wrong and what was
expected, so that an editor can jump to the spot. A reader meets no other exception on bad input.
"""


class DataError(ValueError):
    """Bad input data: a malformed, inconsistent or missing corpus file."""


class MissingDataError(DataError, FileNotFoundError):
    """A corpus path that does not exist (also catchable as ``FileNotFoundError``)."""


def data_error(where: str, what: str) -> DataError:
    """Build a :class:`DataError` for the spot ``where`` ("path:line") saying ``what``."""
    return DataError(f"{where}: {what}")


def line_of(where: str) -> int:
    """The line number of a "path:line" string (1 when it has none)."""
    tail = where.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else 1


UTF8_BOM = b"\xef\xbb\xbf"
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def read_lines(path, expected: str) -> list[str]:
    """The lines of the text file ``path`` (line i + 1 of the file is item i), for the readers.

    Decoding is where a wrong file shows first, so every problem here is a :class:`DataError`
    naming the line: invalid UTF-8 and NUL bytes give the 1-based line, the 1-based byte within
    that line and the 0-based byte offset in the file. A UTF-8 byte-order mark is skipped. Line
    ends are ``\\n``, ``\\r\\n`` or ``\\r`` (as Python's universal newlines, so line numbers match
    an editor's); the ends are not part of the lines.

    Args:
        path: the file.
        expected: what the file should be, for messages (e.g. "CoNLL-U file").
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise MissingDataError(f"{path}:1: no such file; expected a {expected}") from None
    except OSError as error:
        raise DataError(f"{path}:1: cannot read the file ({type(error).__name__}: {error.strerror or error}); "
                        f"expected a readable {expected}") from None
    start = len(UTF8_BOM) if data.startswith(UTF8_BOM) else 0
    try:
        text = data[start:].decode("utf-8") if start else data.decode("utf-8")
    except UnicodeDecodeError as error:
        offset = start + error.start
        hint = " (the file starts with a UTF-16 byte-order mark)" if data.startswith(_UTF16_BOMS) else ""
        bad = data[offset:start + error.end]
        raise DataError(f"{_spot(path, data, offset)}: invalid UTF-8 at byte {_column(data, offset)} of the line "
                        f"(file offset {offset}: {' '.join(f'0x{b:02x}' for b in bad)}, {error.reason}): "
                        f"expected a UTF-8 text file{hint}") from None
    nul = data.find(b"\0")
    if nul >= 0:
        raise DataError(f"{_spot(path, data, nul)}: NUL byte at byte {_column(data, nul)} of the line "
                        f"(file offset {nul}): expected a UTF-8 text file, not a binary (or UTF-16) one")
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text.split("\n")


def _spot(path, data: bytes, offset: int) -> str:
    """``path:line`` of the byte at ``offset`` (lines end at ``\\n``, ``\\r\\n`` or ``\\r``)."""
    before = data[:offset]
    line = before.count(b"\n") + before.count(b"\r") - before.count(b"\r\n") + 1
    return f"{path}:{line}"


def _column(data: bytes, offset: int) -> int:
    """1-based byte position of ``offset`` within its line."""
    return offset - max(data.rfind(b"\n", 0, offset), data.rfind(b"\r", 0, offset))
