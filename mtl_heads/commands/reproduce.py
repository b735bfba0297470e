"""``python -m mtl_heads reproduce RUN [--keep] [out=FOLDER]``: train a run's record again and say whether it
reproduced.

The run folder's ``config.yaml`` is trained again, under the threads and pinned kernels its record names
(``reproducible=true``: :mod:`mtl_heads.reproducible`; an older record: its recorded thread count and CPU
capability), in a temporary folder. Prints ``reproduced: weights identical`` (the SHA-256 of the weights,
``weights_sha256`` in ``metrics.json``, is the same) and exits 0, or prints how the new run differs (the
digest, each score, the heads kept, the dev curve, labels and gates; then where the machines differ) and
exits 1. A record that names no weights digest (trained before digests were kept) is compared on what it
has, and says so. ``--keep`` (``keep=true``) keeps the new weights: copied into the run folder when it
reproduced and the folder has none (the study commits records without weights), else left in ``out``.
The work is done by :mod:`mtl_heads.analysis.reproduction`.

Examples::

    python -m mtl_heads reproduce runs/pos-ner-20261129-101500
    python -m mtl_heads reproduce docs/ewt-study/pos/seed4 --keep
"""
from __future__ import annotations

import sys

from omegaconf import DictConfig

from mtl_heads.cli import Arguments, command, config_file
from mtl_heads.config import ConfigError
from mtl_heads.folders import check_record
from mtl_heads.reproducible import pin_record

ARGUMENTS = Arguments(config_file("reproduce"), positional="run", flags={"--keep": "keep", "--out": "out"},
                      switches=frozenset({"--keep"}), example="python -m mtl_heads reproduce runs/<run> --keep")


def reproduce(cfg: DictConfig) -> int:
    """Train ``cfg.run`` again and print the verdict; returns the exit code (0 reproduced, 1 not)."""
    if not cfg.run:
        raise ConfigError("config key 'run': give a finished run folder, e.g. python -m mtl_heads reproduce runs/<run>")
    record = check_record(cfg.run, key="run")
    pin_record(record)  # before torch is imported: the threads and kernels the record was trained under
    from mtl_heads.analysis.reproduction import reproduce as train_again

    result = train_again(record, cfg.out, keep=cfg.keep, progress=cfg.progress)
    print("\n".join(result.lines()))
    return 0 if result.reproduced else 1


def main(argv: list[str] | None = None) -> int:
    return command(reproduce, __doc__, argv, args=ARGUMENTS,
                   interrupted="interrupted (with out=FOLDER, the same command resumes the run there)")


if __name__ == "__main__":
    sys.exit(main())
