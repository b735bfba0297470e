"""What every command (``python -m mtl_heads <command>``, :mod:`mtl_heads.commands`) shares.

- One argument style: ``key=value`` (nested keys with dots), paths as positional arguments
  (:class:`Arguments` says which key they fill); the old ``--flag value`` forms of a command are
  aliases of its keys.
- One ``-h``: the command's docstring as plain text, then every key with its default and meaning,
  read from the command's ``configs/<name>.yaml`` (:func:`usage`).
- Bad input (a config key or value, a file) is one line ``error: ...`` on stderr and exit code 2,
  never a traceback; Ctrl-C is exit code 130 with a hint (:func:`command`).
"""
from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from mtl_heads.config import CONFIG_DIR, ConfigError, load_config
from mtl_heads.data.errors import DataError

WIDTH = 100


@dataclass(frozen=True)
class Arguments:
    """How a command's arguments become its config.

    Args:
        config: the command's keys and defaults (``configs/<name>.yaml``).
        positional: the key filled by the arguments without ``=`` (None: there are none).
        many: the positional key takes several arguments (a list), else one.
        flags: old ``--flag`` -> key (``--out`` -> ``out``); ``--flag value`` and ``--flag=value``.
        switches: flags that take no value and set their key to true (``--plot``).
        repeat: keys whose every occurrence is one list item (``test=A,B test=C,D``).
        greedy: flags that take every following argument up to the next flag or ``key=value``
            (``--probes A B``), joined with commas.
        example: a command line shown when an argument is misplaced.
    """

    config: Path
    positional: str | None = None
    many: bool = False
    flags: dict[str, str] = field(default_factory=dict)
    switches: frozenset[str] = frozenset()
    repeat: frozenset[str] = frozenset()
    greedy: frozenset[str] = frozenset()
    example: str = ""

    def aliases(self) -> dict[str, str]:
        """Old flag -> what it stands for (``--plot`` -> ``plot=true``, ``--out X`` -> ``out=X``), for ``-h``."""
        return {flag: f"{key}=true" if flag in self.switches else f"{key}=..." for flag, key in self.flags.items()}


def overrides(argv: list[str], args: Arguments) -> list[str | tuple[str, object]]:
    """``argv`` as ``load_config`` overrides: ``key=value`` strings, and ``(key, list)`` pairs for
    the positional and repeated keys."""
    items: list = []
    positional: list[str] = []
    repeated: dict[str, list[str]] = {}

    def add(key: str, value: str) -> None:
        if key in args.repeat:
            repeated.setdefault(key, []).append(value)
        else:
            items.append(f"{key}={value}")

    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg.startswith("--") and len(arg) > 2:
            flag, eq, value = arg.partition("=")
            if flag not in args.flags:
                known = ", ".join(f"{f} ({k}=)" for f, k in args.flags.items())
                raise ConfigError(f"argument {flag}: unknown option; give key=value"
                                  + (f" (old options: {known})" if known else ""))
            key = args.flags[flag]
            if flag in args.switches:
                add(key, value if eq else "true")
                continue
            if eq:
                add(key, value)
                continue
            values = []
            while i < len(argv) and not argv[i].startswith("--") and (flag in args.greedy or not values) \
                    and not (values and "=" in argv[i]):
                values.append(argv[i])
                i += 1
            if not values:
                raise ConfigError(f"argument {flag}: expected a value ({key}=...)")
            add(key, ",".join(values))
        elif "=" in arg and not arg.startswith("="):
            key, value = arg.split("=", 1)
            add(key.strip(), value)
        else:
            positional.append(arg)
    if positional:
        if args.positional is None or (not args.many and len(positional) > 1):
            bad = positional[0 if args.positional is None else 1]
            raise ConfigError(f"argument {bad!r}: expected key=value" + (f", e.g. {args.example}" if args.example else ""))
        items.insert(0, (args.positional, positional if args.many else positional[0]))
    items.extend((key, values) for key, values in repeated.items())
    return items


def load(argv: list[str], args: Arguments) -> DictConfig:
    """The command's config: its yaml's defaults with ``argv`` applied, checked."""
    return load_config(overrides(argv, args), base=args.config)


# --- -h -------------------------------------------------------------------------------------------
def plain(doc: str) -> str:
    """``doc`` without reST markup: ````x```` and ``:mod:`x``` are x, ``Examples::`` ends with one colon."""
    text = re.sub(r":(?:mod|func|class|meth|data|attr):`~?([^`]+)`", r"\1", doc)
    text = re.sub(r"``([^`]+)``", r"\1", text)
    text = re.sub(r"`([^`\s][^`]*)`", r"\1", text)
    return re.sub(r"::$", ":", text, flags=re.M).strip("\n")


KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w-]*):(?:\s+([^#]*?))?\s*(?:#\s?(.*))?$")


def yaml_keys(path: Path) -> list[tuple[str, str, str]]:
    """``(dotted key, default as written, comment)`` for every key of a config file, in file order;
    a section (a key with keys below it) is listed with its comment and the default None."""
    keys: list[list[str]] = []
    sections: list[tuple[int, str]] = []  # (indent, name) of the open sections
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            if keys and line.startswith(" "):  # a comment continued under its key
                keys[-1][2] += " " + stripped.lstrip("# ").strip()
            continue
        match = KEY_LINE.match(line)
        if not match:
            continue
        indent, name, value, comment = len(match[1]), match[2], (match[3] or "").strip(), match[4] or ""
        while sections and sections[-1][0] >= indent:
            sections.pop()
        dotted = ".".join([s for _, s in sections] + [name])
        if not value:
            sections.append((indent, name))
        keys.append([dotted, value if value else None, comment.strip()])  # None: a section
    return [tuple(k) for k in keys]


def shown(default) -> str:
    """A default as ``-h`` prints it: true/false, empty, none, a,b,c."""
    if isinstance(default, bool):
        return str(default).lower()
    text = str(default).strip()
    if text in ("", '""', "''", "[]"):
        return "empty"
    if text in ("null", "None", "~"):
        return "none"
    if text.startswith("[") and text.endswith("]"):
        return ",".join(part.strip() for part in text[1:-1].split(","))
    return text


def usage(doc: str, keys: list[tuple[str, object, str]], aliases: dict[str, str] | None = None) -> str:
    """The ``-h`` text: the docstring as plain text, then every key ``[default]`` and its meaning,
    then the old options each key replaces."""
    out = plain(doc) + "\n\nKeys (default in brackets; key=value, nested keys with dots):\n\n" + usage_keys(keys)
    if aliases:
        out += "\n\n" + textwrap.fill("Old options, still accepted: " + ", ".join(
            f"{flag} = {key}" for flag, key in aliases.items()), WIDTH, subsequent_indent="  ")
    return out


def usage_keys(keys: list[tuple[str, object, str]]) -> str:
    """The key lines of :func:`usage`."""
    width = max([9] + [len(k) + 1 for k, _, _ in keys])
    lines = []
    for key, default, text in keys:
        head = f"  {key + ':':<{width}}  " if default is None else f"  {key:<{width}} [{shown(default)}]  "
        lines.append(textwrap.fill(plain(text), WIDTH, initial_indent=head, subsequent_indent=" " * (width + 6))
                     if text else head.rstrip())
    return "\n".join(lines)


def config_usage(doc: str, config: Path, aliases: dict[str, str] | None = None) -> str:
    """:func:`usage` with the keys of a config file."""
    return usage(doc, yaml_keys(config), aliases)


# --- running ----------------------------------------------------------------------------------------
def command(body: Callable, doc: str, argv: list[str] | None = None, interrupted: str = "interrupted",
            args: Arguments | None = None, config: Path | None = None, help_text: str | None = None) -> int:
    """Run a command; returns the exit code.

    Args:
        body: does the work, given the config (with ``args``) or ``argv`` (without); raises
            ConfigError / DataError for bad input (exit 2). What it returns is the exit code when it is an
            int (``reproduce``: 1 when the run did not reproduce), else ignored (exit 0).
        doc: the command's docstring (``-h``).
        argv: the arguments (default: ``sys.argv[1:]``).
        interrupted: printed on Ctrl-C (e.g. how to resume).
        args: how ``argv`` maps to the command's config (``body`` then gets the loaded config).
        config: the config file whose keys ``-h`` lists when ``body`` parses ``argv`` itself.
        help_text: the whole ``-h`` text, when the keys are not in a config file.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("-h", "--help"):
        if help_text is None:
            config = args.config if args is not None else config
            help_text = config_usage(doc, config, args.aliases() if args else None) if config else plain(doc)
        print(help_text)
        return 0
    try:
        result = body(load(argv, args) if args is not None else argv)
    except (ConfigError, DataError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(interrupted, file=sys.stderr)
        return 130
    return result if isinstance(result, int) and not isinstance(result, bool) else 0


def config_file(name: str) -> Path:
    """``configs/<name>.yaml``."""
    return CONFIG_DIR / f"{name}.yaml"
