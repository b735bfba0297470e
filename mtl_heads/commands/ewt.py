"""``python -m mtl_heads ewt [out=data/ewt] [sources=<folder>] [key=value ...]``: build the
five-layer EWT corpus that ``data=ewt`` reads.

The corpus (CoNLL-2012 files with POS, trees, SRL and named entities, and aligned CoNLL-U files
with UD trees) is built from three public CC BY-SA 4.0 repositories at pinned commits:
propbank/propbank-release, UniversalDependencies/UD_English-EWT and UniversalNER/UNER_English-EWT
(``mtl_heads.data.ewt_build``). Examples::

    python -m mtl_heads ewt                                               # download, build data/ewt
    python -m mtl_heads ewt sources=../shared/data/ewt-sources            # offline, from local files
    python -m mtl_heads ewt sources=tests/fixtures/ewt-sources check=false # offline in a clone: a small real corpus
    python -m mtl_heads ewt out=/data/ewt sources=~/clones check=false force=true

The last builds a small real corpus (67 sentences of 6 documents) from the excerpts of the three sources
that the tests use: enough to run the whole pipeline on real text offline, not to measure anything.
Without ``sources=``, the repositories' archives are downloaded from GitHub over HTTPS into
``$MTL_HEADS_CACHE/ewt-sources`` (default ``~/.cache/mtl_heads``) and reused from there. Every
repository's files are checked against a pinned content digest (``mtl_heads.data.ewt_sources``).
The corpus is built into a temporary folder beside ``out`` and renamed to ``out`` only when the
build succeeded, so a failed or interrupted build leaves no half-written corpus. The command ends
with the build's summary and the time taken; a split with 0 entities because Universal NER has no
file for it (train) is explained there, with the overrides NER trains by (``BuildSummary.ner_note``).
Bad input (an unknown key, a missing or non-matching sources folder, a non-empty ``out``, no
network) is one ``error:`` line naming the key, file or URL, exit 2. ``data=ewt`` then finds
``data/ewt`` (``mtl_heads.config.EWT_FOLDERS``).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from mtl_heads.cli import command, usage
from mtl_heads.config import ConfigError, set_key
from mtl_heads.data.corpus import cache_dir
from mtl_heads.data.ewt_build import build_corpus
from mtl_heads.data.ewt_sources import download_sources, folder_sources

KEYS = {  # key: (default, what it means): the command's whole configuration, and its -h text
    "out": ("data/ewt", ("the corpus folder written (its parent folders are created); where data=ewt looks "
                         "first")),
    "sources": ("", ("a folder holding propbank-release/, UD_English-EWT/ and UNER_English-EWT/: "
                     "../shared/data/ewt-sources or git clones (tests/fixtures/ewt-sources with check=false: a small "
                     "real corpus); empty: download the pinned commits' archives")),
    "check": (True, ("a sources folder whose files differ from the pinned commits' is an error; false: "
                     "a warning, and the build goes on (a newer clone, on purpose)")),
    "force": (False, "replace a non-empty out (only once the new corpus is built)"),
    "progress": (True, "a progress bar per download (on a terminal; a few plain lines in a log)"),
}


def parse_args(argv: list[str]):
    """The configuration: :data:`KEYS`' defaults with ``key=value`` overrides, types checked."""
    cfg = OmegaConf.create({key: default for key, (default, _) in KEYS.items()})
    for item in argv:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"argument {item!r}: expected key=value, e.g. out=data/ewt or sources=<folder>")
        key, value = item.split("=", 1)
        set_key(cfg, key.strip(), value)
    if not cfg.out:
        raise ConfigError("config key 'out': give the corpus folder, e.g. out=data/ewt")
    return cfg


def check_out(out: Path, force: bool) -> None:
    """Refuse an ``out`` that is a file, or a non-empty folder without ``force``, before any work."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"config key 'out': {out} is a file; expected a folder for the corpus")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ConfigError(f"config key 'out': {out} is not empty; force=true replaces it once the new corpus "
                          "is built, or choose another folder")


def build_into(out: Path, roots: dict[str, Path], log=print):
    """Build the corpus from ``roots`` into a temporary folder beside ``out``, then put it in
    ``out``'s place (an old ``out`` is removed only then); the build's summary."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".building", dir=out.parent))
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o777 & ~mask)  # mkdtemp's folder is private; the corpus is not
    try:
        summary = build_corpus(roots, tmp, log=log)
        if not out.exists():
            os.replace(tmp, out)
            return summary
        old = out.with_name(f"{tmp.name}.old")  # force=true, or an empty folder
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except BaseException:
            os.replace(old, out)
            raise
        shutil.rmtree(old)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return summary


def run(argv: list[str], log=print):
    """Build as ``argv`` says; returns the build's summary."""
    cfg = parse_args(argv)
    out = Path(cfg.out).expanduser()
    check_out(out, cfg.force)
    started = time.monotonic()
    if cfg.sources:
        folder = Path(cfg.sources).expanduser()
        if not folder.is_dir():
            raise ConfigError(f"config key 'sources': {folder} is not a folder; expected one holding "
                              "propbank-release, UD_English-EWT and UNER_English-EWT (e.g. ../shared/data/ewt-sources)")
        roots = folder_sources(folder, check=cfg.check, warn=lambda line: print(line, file=sys.stderr))
    else:
        roots = download_sources(cache_dir() / "ewt-sources", progress=cfg.progress, log=log)
    summary = build_into(out, roots, log)
    for line in summary.lines():
        log(line)
    log(f"built {out} in {time.monotonic() - started:.1f} s (data=ewt reads it from there"
        + ("" if Path(cfg.out) == Path("data/ewt") else f" with data.path={out}") + ")")
    return summary


def main(argv: list[str] | None = None) -> int:
    keys = [(key, default, text) for key, (default, text) in KEYS.items()]
    return command(run, __doc__, argv, interrupted="interrupted; nothing was written to out", help_text=usage(__doc__, keys))


if __name__ == "__main__":
    sys.exit(main())
