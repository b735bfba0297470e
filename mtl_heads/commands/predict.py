"""``python -m mtl_heads predict RUN input=FILE out=FILE [key=value ...]``: annotate new text with a
trained model.

Examples::

    python -m mtl_heads predict runs/<run> input=notes.txt out=notes.conll            # raw text, every task
    python -m mtl_heads predict runs/<run> input=notes.txt out=notes.conllu tasks=pos,dep
    python -m mtl_heads predict runs/<run>/removal input=test.conllu out=test.ptb     # heads removed, trees
    python -m mtl_heads predict runs/<run> input=tok.txt input.tokenized=true out=tok.jsonl device=cuda

RUN is a run folder or a removal folder (``runs/<run>/removal``). The input format follows the
input's name (``.conllu``, ``*_conll``/``.conll``, ``.jsonl``; anything else is text, one sentence
per line, blank lines skipped) or ``input.format=``; the output format follows the output's name
(``*_conll``/``.conll``, ``.conllu``, ``.ptb``/``.trees``, ``.jsonl``) or ``format=``. One sentence
comes out per sentence in, in input order; sentences over the encoder limit are written with
empty layers (``long_policy=skip``) and counted. The command ends with the number of sentences,
those skipped as too long, the throughput and the output path. Bad input (a missing, unreadable,
non-UTF-8 or empty file, a malformed line, a task the run was not trained on, an output folder
that does not exist) is one ``error:`` line naming ``path:line`` or the config key, exit 2.

Every key is in ``configs/predict.yaml``; the Python API is :class:`mtl_heads.analysis.inference.Predictor`.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config, load_saved_config


def parse_args(argv: list[str]) -> list[str]:
    """``key=value`` overrides: a first argument without ``=`` is ``run=``; ``input=F`` is
    ``input.path=F``."""
    overrides = []
    for i, item in enumerate(argv):
        if "=" not in item:
            if i == 0:
                overrides.append(f"run={item}")
                continue
            raise ConfigError(f"argument {item!r}: expected key=value (the run folder comes first, e.g. "
                              "python -m mtl_heads predict runs/<run> input=in.txt out=out.conll)")
        key, value = item.split("=", 1)
        overrides.append(f"input.path={value}" if key.strip() == "input" else item)
    return overrides


def with_tasks(overrides: list[str]) -> list[str]:
    """``overrides`` plus ``tasks=<the run's tasks>`` when no ``tasks=`` is given (``tasks: []`` in
    predict.yaml means "every task of the run"; the config's task rule wants them named)."""
    if any(o.split("=", 1)[0].strip() == "tasks" for o in overrides):
        return overrides
    runs = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0].strip() == "run"]
    if not runs or not runs[-1]:
        raise ConfigError("config key 'run': give the model, e.g. python -m mtl_heads predict runs/<run> "
                          "input=in.txt out=out.conll")
    saved = Path(runs[-1]) / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"config key 'run': {runs[-1]} is not a run folder or a removal folder (no config.yaml); "
                          "train one with `python -m mtl_heads.train`")
    return overrides + [f"tasks={','.join(load_saved_config(saved).tasks)}"]


def check_paths(cfg) -> tuple[Path, Path]:
    """The input and output paths, checked before any work."""
    if not cfg.input.path:
        raise ConfigError("config key 'input.path': give the sentences to annotate, e.g. input=notes.txt")
    if not cfg.out:
        raise ConfigError("config key 'out': give the output file, e.g. out=notes.conll")
    source, out = Path(cfg.input.path), Path(cfg.out)
    if out.is_dir():
        raise ConfigError(f"config key 'out': {out} is a folder; expected a file name, e.g. {out / 'predicted.conll'}")
    if not out.parent.is_dir():
        raise ConfigError(f"config key 'out': the folder {out.parent} does not exist; create it first")
    if source.exists() and out.exists() and out.resolve() == source.resolve():
        raise ConfigError(f"config key 'out': {out} is the input file; write the predictions elsewhere")
    return source, out


def run(argv: list[str]) -> int:
    """Check the command line and predict; bad input is a ConfigError or DataError."""
    if not argv:
        raise ConfigError("config key 'run': give the model, e.g. python -m mtl_heads predict runs/<run> "
                          "input=in.txt out=out.conll")
    return predict(load_config(with_tasks(parse_args(argv)), base=CONFIG_DIR / "predict.yaml"))


def main(argv: list[str] | None = None) -> int:
    return command(run, __doc__, argv, interrupted="interrupted; nothing was written", config=CONFIG_DIR / "predict.yaml")


def predict(cfg) -> int:
    """Read, predict, write, report (``cfg``: a loaded predict.yaml config)."""
    from mtl_heads.data import formats

    source, out = check_paths(cfg)
    out_format = formats.output_format(out, cfg.format)
    tasks = list(cfg.tasks)
    if out_format == "ptb" and "con" not in tasks:
        raise ConfigError(f"config key 'format': ptb writes constituency trees, and the tasks predicted "
                          f"({', '.join(tasks)}) do not include con")
    sentences = formats.read(source, formats.input_format(source, cfg.input.format), tokenized=cfg.input.tokenized)

    from mtl_heads.analysis.inference import (
        Predictor,  # torch and transformers from here on
    )

    predictor = Predictor.load(cfg.run, device=cfg.device, tasks=tasks, precision=cfg.precision,
                               long_policy=cfg.long_policy)
    written = formats.LAYERS_WRITTEN[out_format]
    left_out = [t for t, task in predictor.task_objects.items() if not set(task.needs) <= set(written)]
    if left_out:
        print(f"note: {out_format} has no place for {', '.join(left_out)}: not written (jsonl keeps every layer)",
              file=sys.stderr)
    predicted, stats = predictor.predict_sentences(sentences, batch_size=cfg.batch_size, progress=cfg.progress)
    formats.write(predicted, out, out_format, pos_column=predictor.pos_column)
    print(f"predicted {', '.join(predictor.tasks)} with {cfg.run} on {predictor.device}")
    print("\n".join(stats.lines()))
    print(f"wrote {out} ({out_format}, {len(predicted)} sentences)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
