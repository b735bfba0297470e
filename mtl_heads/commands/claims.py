"""``python -m mtl_heads claims FOLDERS... [out=FILE] [doc=FILE] [format=markdown|json]``: He & Choi's
claims checked on a study's run folders and probe reports, one line each with its numbers.

``FOLDERS`` are run folders or folders holding runs and probe reports at any depth (a study folder
such as ``docs/ewt-study``), or experiment names looked up under ``root=`` (default ``runs``). What each claim compares and which test it uses:
:mod:`mtl_heads.study`. Prints the claims; ``out=`` writes them as markdown (default
``claims.md`` in the first folder); ``doc=`` also puts them into a markdown file between the lines
``<!-- claims:begin -->`` and ``<!-- claims:end -->``, so that a hand-written document carries numbers
that cannot drift from the runs. ``format=json`` prints the claims as JSON instead, every test with
its fields, statistic and p-values (schema: :mod:`mtl_heads.study.render`), and writes it
only where ``out=`` says. ``since=FILE`` (such a JSON, of an earlier round) adds under each verdict what
changed since it, called ``since_name=`` (default: ``the claims in FILE``): the verdict then and now, and
each test whose significance changed, its Holm p and value then and now. ``rules=`` names the round of rules
the verdicts follow (:data:`mtl_heads.study.RULE_SETS`): ``round2`` (default; ``docs/ewt-study/rules.md``) or
``round3`` (``docs/ewt-study/rules-round3.md``). ``since=`` may be given several times (each with its
``since_name=``, in the same order): each verdict then says what changed since each. ``block=NAME`` puts
the claims between ``<!-- claims:NAME:begin -->`` and ``<!-- claims:NAME:end -->`` of ``doc=`` instead (a
document with several claims blocks, one per round).
"""
from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.files import atomic_write_text
from mtl_heads.folders import RUNS
from mtl_heads.records.runs import spec_folder
from mtl_heads.study import (ROUND2, check_claims, claims_json, claims_markdown, read_since, read_study, rules_named,
                             splice)

ARGUMENTS = Arguments(config_file("claims"), positional="folders", many=True,
                      flags={"--out": "out", "--doc": "doc", "--root": "root"}, repeat=frozenset({"since", "since_name"}))
FORMATS = ("markdown", "json")


def claims(cfg: DictConfig) -> None:
    """Check, print and write the claims as ``cfg`` (configs/claims.yaml) says; bad input is a ConfigError."""
    folders = [str(f) for f in cfg.folders]
    if not folders:
        raise ConfigError("config key 'folders': give a study folder, e.g. python -m mtl_heads claims docs/ewt-study")
    form = str(cfg.get("format") or "markdown")
    if form not in FORMATS:
        raise ConfigError(f"config key 'format': {form!r} is not one of {', '.join(FORMATS)}")
    if form == "json" and cfg.doc:
        raise ConfigError("config key 'doc': it splices the markdown into a document; with format=json give out= "
                          "(or nothing: the JSON is printed)")
    if form == "json" and cfg.get("since"):
        raise ConfigError("config key 'since': it compares in the markdown; format=json writes this study's claims "
                          "alone")
    rules = rules_named(cfg.get("rules"))
    files, names = _listed(cfg.get("since")), _listed(cfg.get("since_name"))
    if len(names) > len(files):
        raise ConfigError(f"config key 'since_name': {len(names)} names for {len(files)} since= files (one a file, "
                          "in the same order)")
    since = [read_since(f, n) for f, n in itertools.zip_longest(files, names[:len(files)])]
    block = str(cfg.get("block") or "") or None
    if block and not re.fullmatch(r"[\w.-]+", block):
        raise ConfigError(f"config key 'block': {block!r}: a name of letters, digits, '.', '_' or '-'")
    shown = {"root": Path(cfg.root) != RUNS, "rules": rules is not ROUND2, "block": bool(block)}  # named when not default
    named = [f"since={shlex.quote(f)}" for f in files] + [f"since_name={shlex.quote(n)}" for n in names] \
        + [f"{key}={shlex.quote(str(cfg[key]))}" for key, given in shown.items() if given]
    command_line = "python -m mtl_heads claims " + " ".join(map(shlex.quote, folders)) + "".join(f" {n}" for n in named)
    try:
        study = read_study(folders, cfg.root, rules)
        checked = check_claims(study)
        if form == "json":
            text = claims_json(study, checked, command_line)
            if cfg.out:
                atomic_write_text(Path(cfg.out), text + "\n")
                print(f"wrote {cfg.out}")
            else:
                print(text)
            return
        text = claims_markdown(study, checked, command_line, since)
        doc = Path(cfg.doc) if cfg.doc else None
        spliced = splice(doc.read_text(), text, str(doc), block) if doc else None
    except OSError as err:
        raise ConfigError(str(err)) from None
    out = Path(cfg.out) if cfg.out else spec_folder(folders[0], cfg.root) / "claims.md"
    atomic_write_text(out, text)
    if doc:
        atomic_write_text(doc, spliced)
    print(text)
    print(f"wrote {out}" + (f" and the claims block{f' {block!r}' if block else ''} of {doc}" if doc else ""))


def _listed(value) -> list[str]:
    """A repeatable key's value as a list of strings: none, one, or every occurrence (``since=A since=B``)."""
    if value is None or value == "":
        return []
    return [str(v) for v in value] if isinstance(value, (list, tuple, ListConfig)) else [str(value)]


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input."""
    return command(claims, __doc__, argv, args=ARGUMENTS)
