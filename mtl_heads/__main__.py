"""``python -m mtl_heads <command> [PATHS...] [key=value ...]`` (or ``mtl-heads``): run one command;
``python -m mtl_heads -h`` lists them, ``python -m mtl_heads <command> -h`` explains one."""
from __future__ import annotations

import importlib
import sys

from mtl_heads.commands import COMMANDS


def usage() -> str:
    width = max(len(name) for name in COMMANDS) + 2
    lines = [f"  {name:<{width}}{text}" for name, (_, text) in COMMANDS.items()]
    return ("usage: python -m mtl_heads <command> [PATHS...] [key=value ...]   (or: mtl-heads <command> ...)\n\n"
            "Commands:\n" + "\n".join(lines) + "\n\n"
            "python -m mtl_heads <command> -h: the command's keys, their defaults and examples.")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"error: unknown command {name!r}; the commands: {', '.join(COMMANDS)} (python -m mtl_heads -h)",
              file=sys.stderr)
        return 2
    return importlib.import_module(COMMANDS[name][0]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
