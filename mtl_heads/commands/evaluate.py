"""``python -m mtl_heads evaluate [RUN] [key=value ...]``: score a trained model on any corpus, or a prediction file
against a gold file, with the metrics training reports.

Examples::

    python -m mtl_heads evaluate runs/<run>                            # the run's own test split
    python -m mtl_heads evaluate runs/<run> data=ewt split=dev         # another corpus or split
    python -m mtl_heads evaluate runs/<run>/removal split=test         # the model with its heads removed
    python -m mtl_heads evaluate pred=out.conll gold=test.gold_conll tasks=pos,ner,dep,con,srl

See ``configs/evaluate.yaml`` for every key; ``data.*`` keys are those of ``configs/train.yaml``.
"""
from __future__ import annotations

import sys
from pathlib import Path

from mtl_heads.cli import command
from mtl_heads.config import CONFIG_DIR, ConfigError, load_config
from mtl_heads.files import write_json


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``(evaluate overrides, data overrides)``; a first argument without ``=`` is ``model=``."""
    if argv and "=" not in argv[0]:
        argv = [f"model={argv[0]}", *argv[1:]]
    data = [a for a in argv if a.split("=", 1)[0] == "data" or a.startswith("data.")]
    return [a for a in argv if a not in data], data


def run(argv: list[str], log=print) -> dict:
    """Evaluate as ``argv`` says; returns what was printed as JSON (``scores`` per task)."""
    own, data_overrides = split_argv(argv)
    cfg = load_config(own, base=CONFIG_DIR / "evaluate.yaml")
    data = load_config(data_overrides).data if data_overrides else None
    if cfg.pred or cfg.gold:
        if not (cfg.pred and cfg.gold) or cfg.model:
            raise ConfigError("config keys 'pred' and 'gold': give both files (and no model), or a model without them")
        if data_overrides:
            raise ConfigError("config key 'data': not used when scoring files (pred= and gold=); drop it")
        from mtl_heads.analysis.evaluation import score_files

        result = score_files(cfg.pred, cfg.gold, list(cfg.tasks), cfg.pred_format, cfg.gold_format, cfg.conllu_pos)
        what = f"{cfg.pred} against {cfg.gold}"
    elif cfg.model:
        from mtl_heads.analysis.evaluation import Passes, evaluate_trained

        passes = Passes(cfg.device, cfg.precision, cfg.batch_size, cfg.progress)
        result = evaluate_trained(cfg.model, data, cfg.split, list(cfg.tasks) or None, passes, log)
        what = f"{cfg.model} on the {cfg.split} split"
    else:
        raise ConfigError("config key 'model': give a trained run folder (python -m mtl_heads evaluate runs/<run>) "
                          "or two files (pred=<file> gold=<file> tasks=...)")
    from mtl_heads.analysis.evaluation import format_metrics
    from mtl_heads.data.corpus import cut_note

    if "eval_cut" in result:
        what += f", {cut_note(result['eval_cut'])}"
    log(f"scores of {what}:")
    for task, scores in result["scores"].items():
        missed = result.get("unpredicted", {}).get(task)
        log(f"  {task} ({result['sentences'][task]} sentences"
            + (f", {missed} without a prediction, scored as missed" if missed else "") + "): "
            + (format_metrics(scores) if scores else "no sentence carries this layer"))
    if cfg.out:
        out = Path(cfg.out)
        if not out.parent.is_dir():
            raise ConfigError(f"config key 'out': folder {out.parent} does not exist")
        write_json(out, result)
        log(f"wrote {out}")
    return result


def main(argv: list[str] | None = None) -> int:
    return command(run, __doc__, argv, config=CONFIG_DIR / "evaluate.yaml")


if __name__ == "__main__":
    sys.exit(main())
