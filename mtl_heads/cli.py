"""What every ``python -m mtl_heads.<command>`` in the ``key=value`` style shares: ``-h`` prints
the command's docstring; bad input (a config key or value, a file) is one line ``error: ...`` on
stderr and exit code 2, never a traceback; Ctrl-C is exit code 130 with a hint."""
from __future__ import annotations

import sys
from typing import Callable

from mtl_heads.config import ConfigError
from mtl_heads.data.errors import DataError


def command(body: Callable[[list[str]], object], doc: str, argv: list[str] | None = None,
            interrupted: str = "interrupted") -> int:
    """Run ``body(argv)`` as a command; returns the exit code.

    Args:
        body: does the work; raises ConfigError / DataError for bad input.
        doc: printed for ``-h`` / ``--help``.
        argv: the arguments (default: ``sys.argv[1:]``).
        interrupted: printed on Ctrl-C (e.g. how to resume).
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(doc)
        return 0
    try:
        body(argv)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    return 0
