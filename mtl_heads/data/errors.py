"""The one error type of the data layer.

Every message of a :class:`DataError` starts with ``"{path}:{line}: "`` (1-based line of the
offending line; line 1 for an empty or missing file), then says what is wrong and what was
expected, so that an editor can jump to the spot.
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
