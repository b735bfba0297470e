"""``python -m mtl_heads.claims FOLDERS... [--out FILE] [--doc FILE]``: He & Choi's claims checked on a
study's run folders and probe reports, one line each with its numbers.

``FOLDERS`` are run folders or folders holding runs and probe reports at any depth (a study folder
such as ``docs/ewt-study``). What each claim compares and which test it uses:
:mod:`mtl_heads.reports.claims`. Prints the claims; ``--out`` writes them as markdown (default
``claims.md`` in the first folder); ``--doc`` also puts them into a markdown file between the lines
``<!-- claims:begin -->`` and ``<!-- claims:end -->``, so that a hand-written document carries numbers
that cannot drift from the runs.
"""
from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from mtl_heads.config import ConfigError
from mtl_heads.files import atomic_write_text
from mtl_heads.reports.claims import check_claims, claims_markdown, read_study, splice


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mtl_heads.claims", description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="run folders, or folders of runs and probe reports")
    parser.add_argument("--out", help="markdown file to write (default claims.md in the first folder)")
    parser.add_argument("--doc", help="markdown file whose claims:begin / claims:end block is replaced")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns 0, or 2 with a message for bad input."""
    args = parse_args(argv)
    command = "python -m mtl_heads.claims " + " ".join(map(shlex.quote, args.folders))
    try:
        study = read_study(args.folders)
        text = claims_markdown(study, check_claims(study), command)
        doc = Path(args.doc) if args.doc else None
        spliced = splice(doc.read_text(), text, str(doc)) if doc else None
    except (ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    out = Path(args.out) if args.out else Path(args.folders[0]) / "claims.md"
    atomic_write_text(out, text)
    if doc:
        atomic_write_text(doc, spliced)
    print(text)
    print(f"wrote {out}" + (f" and the claims block of {doc}" if doc else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
