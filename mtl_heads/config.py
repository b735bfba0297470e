"""Configuration: YAML files in ``configs/`` loaded with OmegaConf, plus ``key=value`` overrides.

Every key that can be set is in ``configs/train.yaml`` with its default and a comment. An override
naming a key that is not there, or giving a value of the wrong type, raises :class:`ConfigError`
naming the key (and the valid keys at that level). Values are then range-checked against
:data:`RULES` (counts >= 1, rates > 0, fractions in [0, 1), choices from their list): the one place
that says which values a key accepts. Task and probe options are checked by their own modules.

This module imports no torch, transformers or wandb, so that a mistyped command fails at once.
"""
from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from typing import Any, Callable

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
PRESET_GROUPS = ("data", "encoder", "prune")
PRECISIONS = ("auto", "fp32", "bf16")  # `precision`: see mtl_heads.model.precision  # `data=ewt` loads configs/data/ewt.yaml into `data`
# Where `data.format=ewt` finds its corpus when `data.path` is not given (configs/data/ewt.yaml leaves
# it null): the first of these folders holding en_ewt.*.gold_conll, each relative to the working
# folder, else to the project folder (as every data path): the builder's default output, then the copy
# beside the repository. The folder is stored as written, so the config.yaml of every run of a setting
# on one machine says the same (`compare` pools runs whose configs are equal).
EWT_FOLDERS = ("data/ewt", "../shared/data/ewt")
PRUNE_MODES = ("none", "dynamic", "static")  # prune.mode: unpruned, gates with the model, gates on a trained run
EWT_BUILD = "python -m mtl_heads ewt out=data/ewt"  # builds data/ewt from the three public repositories


POS = ("auto", "upos", "xpos")  # data.pos: auto = upos for conllu, xpos (PTB tags) for the other formats
UD_FORMATS = ("conllu", "ewt")  # formats whose files hold UPOS and UD relations


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key."""


def load_config(overrides: list | None = None, base: str | Path = CONFIG_DIR / "train.yaml") -> DictConfig:
    """Load ``base`` and apply command-line ``overrides`` (``["tasks=pos,ner", "train.epochs=2"]``, or
    ``(key, value)`` pairs whose value is taken as is); the result is checked with :func:`validate`."""
    cfg = OmegaConf.load(base)
    for item in overrides or []:
        key, value = item if isinstance(item, tuple) else _split(item)  # a (key, value) pair: value as is
        if (key in PRESET_GROUPS and isinstance(cfg.get(key), DictConfig) and isinstance(value, str)
                and _is_preset_name(value)):
            _apply_preset(cfg, key, value)
        else:
            set_key(cfg, key, value)
    if isinstance(cfg.get("data"), DictConfig):
        locate_ewt(cfg.data)
    validate(cfg, Path(base).name)
    if OmegaConf.select(cfg, "train.phases", default=None) is not None:  # recorded whole: each phase's rates, as numbers
        cfg.train.phases = train_phases(cfg.train)
    return cfg


def load_saved_config(path: str | Path) -> DictConfig:
    """A run folder's ``config.yaml`` (someone else's, perhaps): YAML read safely, a broken file
    named with its line, values checked with :func:`validate`."""
    path = Path(path)
    try:
        cfg = OmegaConf.load(path)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{line}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    except (UnicodeDecodeError, OSError) as err:
        raise ConfigError(f"{path}: cannot be read as a YAML config ({err})") from None
    if not isinstance(cfg, DictConfig):
        raise ConfigError(f"{path}: expected a YAML mapping of config keys, got a list")
    try:
        validate(cfg)
    except ConfigError as err:
        raise ConfigError(f"{path}: {err}") from None
    for task, key, old in SAVED_BEFORE:
        if task in (cfg.get("tasks") or []) and OmegaConf.select(cfg, key) is None:
            OmegaConf.update(cfg, key, old, merge=True)
    if isinstance(cfg.get("data"), DictConfig) and "max_sentences" in cfg.data and "max_eval_sentences" not in cfg.data:
        # saved before data.max_eval_sentences: max_sentences cut dev and test too
        cfg.data.max_eval_sentences = cfg.data.max_sentences
    return cfg


# Keys added after runs were saved without them: (task, key, the value meaning what those runs did).
# Read by every consumer of a saved config (load_run, init=), so old runs rebuild the model they trained.
SAVED_BEFORE = [
    ("srl", "task.srl.span_ratio", "off"),  # before candidate-span pruning existed: every span scored
]


def pos_column(data) -> str:
    """The POS column ``data.pos`` asks for, ``auto`` resolved: ``upos`` or ``xpos`` (CoNLL-U's
    XPOS; for the CoNLL-2012-based formats, their PTB tags in column 5)."""
    value = data.get("pos", "auto")  # absent from run folders saved before the key existed
    if value not in POS:
        raise ConfigError(f"config key 'data.pos': expected one of {', '.join(POS)}, got {value!r}")
    if value == "auto":
        return "upos" if data.format == "conllu" else "xpos"
    if value == "upos" and data.format not in UD_FORMATS:
        raise ConfigError(f"config key 'data.pos': upos needs CoNLL-U files (data.format=conllu, or ewt whose aligned "
                          f".conllu has them), not data.format={data.format}; use xpos (its PTB tags) or auto")
    return value


def find_path(value: str) -> Path | None:
    """A path from the config: as given (relative to the working folder), else relative to the
    project folder; None when neither exists."""
    for candidate in (Path(value).expanduser(), CONFIG_DIR.parent / value):
        if candidate.exists():
            return candidate
    return None


def locate_ewt(data: DictConfig) -> None:
    """Set ``data.path`` of ``data.format=ewt`` when it is not given: the first of
    :data:`EWT_FOLDERS` that holds the corpus. None holding it leaves it null, and reading the
    corpus then says how to build it (``mtl_heads.data.corpus``)."""
    if data.get("format") != "ewt" or data.get("path"):
        return
    for folder in EWT_FOLDERS:
        found = find_path(folder)
        if found is not None and any(found.glob("en_ewt.*.gold_conll")):
            data.path = folder
            return


def _split(item: str) -> tuple[str, str]:
    if "=" not in item or item.startswith("="):
        raise ConfigError(f"override {item!r}: expected key=value (e.g. tasks=pos,ner or train.epochs=2)")
    key, value = item.split("=", 1)
    return key.strip(), value


def _is_preset_name(value: str) -> bool:
    return bool(value) and "/" not in value and "{" not in value


def _apply_preset(cfg: DictConfig, group: str, name: str) -> None:
    path = CONFIG_DIR / group / f"{name}.yaml"
    if not path.exists():
        if group == "encoder":  # `encoder=bert-base-cased` is short for encoder.name=...
            set_key(cfg, "encoder.name", name)
            return
        known = sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml"))
        raise ConfigError(f"{group}={name}: no preset {path}; known presets: {', '.join(known)}")
    preset = OmegaConf.load(path)
    for key, value in preset.items():
        set_key(cfg, f"{group}.{key}", OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value)


def set_key(cfg: DictConfig, key: str, value: Any) -> None:
    """Set dotted ``key`` to ``value`` (a string from the command line is parsed as YAML), checking
    that the key exists and that the type matches the default's."""
    parts = key.split(".")
    node = cfg
    for depth, part in enumerate(parts):
        if parts[0] == "task" and depth >= 1 and isinstance(node, DictConfig) and part not in node:
            # task options belong to the task module (e.g. task.dep.decode=eisner): not checked here
            if depth == len(parts) - 1:
                node[part] = _parse_scalar(value, key) if isinstance(value, str) else value
                return
            node[part] = {}
        if not isinstance(node, DictConfig) or part not in node:
            where = ".".join(parts[:depth]) or "top level"
            valid = ", ".join(sorted(node.keys())) if isinstance(node, DictConfig) else "(none: not a section)"
            raise ConfigError(f"unknown config key '{key}' ({where} has: {valid})")
        if depth < len(parts) - 1:
            node = node[part]
    last = parts[-1]
    default = node[last]
    parsed = _parse(value, default, key) if isinstance(value, str) else value
    for mapping in (parsed if isinstance(parsed, list) else [parsed]):  # a list of mappings: train.phases
        if isinstance(mapping, dict):
            _check_mapping_shape(mapping, key, value)
    if isinstance(default, DictConfig) and isinstance(parsed, dict) and _free_form(key):
        node[last] = parsed
    elif isinstance(default, DictConfig):
        if not isinstance(parsed, dict):
            raise ConfigError(f"config key '{key}': expected a mapping like {{a: 1}}, got {value!r}")
        for sub, sub_value in parsed.items():
            set_key(cfg, f"{key}.{sub}", sub_value)
    else:
        node[last] = _check_type(parsed, default, key, value)


def _check_mapping_shape(parsed: dict, key: str, raw: Any) -> None:
    """YAML reads ``{train:20}`` (no space after the colon) as the key ``'train:20'`` with no value,
    at any depth (``{ner:{train:dev}}``); say so with the form that was meant."""
    def glued(mapping: dict) -> list[str]:
        return [g for k, v in mapping.items() for g in
                ([k] if v is None and isinstance(k, str) and ":" in k else glued(v) if isinstance(v, dict) else [])]

    found = glued(parsed)
    if found:
        meant = re.sub(r",(?=\S)", ", ", re.sub(r":(?=\S)", ": ", str(raw)))
        raise ConfigError(f"config key '{key}': {raw!r} reads as keys without values ({', '.join(map(repr, found))}); "
                          f"YAML needs a space after each colon: {key}={meant}")


def _free_form(key: str) -> bool:
    """Sections whose sub-keys are the user's own (split names, task options)."""
    return (key in {"data.unannotated", "data.demo_sizes", "data.splits", "data.task_splits", "data.sentences"}
            or key.startswith(("task.", "data.task_splits.")))


def _parse(text: str, default: Any, key: str) -> Any:
    if isinstance(default, ListConfig) and not text.strip().startswith("["):
        return [_parse_scalar(v.strip(), key) for v in text.split(",") if v.strip()]
    if isinstance(default, str) and not text.strip().startswith(("[", "{")):
        return text  # keep strings verbatim (paths, names)
    return _parse_scalar(text, key)


def _parse_scalar(text: str, key: str) -> Any:
    try:
        return yaml.safe_load(text) if text != "" else None
    except yaml.YAMLError as err:  # PyYAML's own text spans lines (the context, a caret): its problem and column
        mark = getattr(err, "problem_mark", None)
        where = "" if mark is None else f" at line {mark.line + 1}, column {mark.column + 1}" if "\n" in text.strip() \
            else f" at column {mark.column + 1}"
        raise ConfigError(f"config key '{key}': cannot parse {text!r}: "
                          f"{getattr(err, 'problem', None) or str(err).splitlines()[0]}{where}") from None


def _check_type(value: Any, default: Any, key: str, raw: Any) -> Any:
    if default is None or value is None:
        return value
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        expected = "true or false"
    elif isinstance(default, int):
        ok = isinstance(value, int) and not isinstance(value, bool)
        expected = "an integer"
    elif isinstance(default, float):
        value = _float_or_same(value)  # YAML reads 1e-4 (no dot) as a string
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
        expected = "a number"
    elif isinstance(default, str):
        ok = isinstance(value, str)
        expected = "a string"
    elif isinstance(default, ListConfig):
        ok = isinstance(value, (list, tuple))
        expected = "a list (a,b,c)"
    else:
        ok, expected = True, ""
    if not ok:
        raise ConfigError(f"config key '{key}': expected {expected}, got {raw!r}")
    return value


def _float_or_same(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return value


def pick(registry: dict, names: list[str], key: str, example: str) -> dict:
    """``{name: registry[name]}`` for the names given under config ``key``; none, an unknown one or
    one listed twice is a ConfigError naming the key (``example``: a good value for the message)."""
    names = list(names)
    if not names:
        raise ConfigError(f"config key '{key}': give at least one, e.g. {key}={example}")
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise ConfigError(f"config key '{key}': unknown {', '.join(map(repr, unknown))}; known: {', '.join(registry)}")
    if len(set(names)) != len(names):
        raise ConfigError(f"config key '{key}': listed twice in {names}")
    return {n: registry[n] for n in names}


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)


# --- value rules ------------------------------------------------------------------------------
# Each rule returns None for a good value, else what was expected. Types are already checked
# against the defaults by set_key; these check ranges and choices. Keys absent from a config
# (probe.yaml lacks train.*) are skipped.
Rule = Callable[[Any], "str | None"]


def choice(*values: str) -> Rule:
    return lambda v: None if v in values else f"one of {', '.join(values)}"


def subset(*values: str) -> Rule:
    """A non-empty list of distinct values, each one of ``values``."""
    def rule(v):
        ok = isinstance(v, (list, tuple, ListConfig)) and len(v) > 0 and len(set(v)) == len(v) \
            and all(x in values for x in v)
        return None if ok else f"some of {', '.join(values)}, each once"
    return rule


def count(minimum: int = 1, optional: bool = False) -> Rule:
    def rule(v):
        if v is None and optional:
            return None
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= minimum
        return None if ok else f"an integer >= {minimum}" + (" or null" if optional else "")
    return rule


def number(low: float = 0.0, low_open: bool = True, high: float | None = None, high_open: bool = True,
           auto: bool = False) -> Rule:
    """A number in the interval from ``low`` to ``high`` (open or closed ends), or ``auto``."""
    def rule(v):
        if auto and isinstance(v, str) and v.strip().lower() == "auto":
            return None
        v = _float_or_same(v)
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
        ok = ok and (v > low if low_open else v >= low)
        ok = ok and (high is None or (v < high if high_open else v <= high))
        interval = ("(" if low_open else "[") + f"{low:g}, " + (f"{high:g}" if high is not None else "inf") + (
            ")" if high_open or high is None else "]")
        return None if ok else f"a number in {interval}" + (" or auto" if auto else "")
    return rule


def _device(v) -> str | None:
    return None if isinstance(v, str) and re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v) else "auto, cpu, cuda or cuda:N"


def _seed(v) -> str | None:
    ok = isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**32
    return None if ok else "an integer in [0, 2**32)"


def _seeds(v) -> str | None:
    return None if all(_seed(x) is None for x in v) else "a list of integers in [0, 2**32), e.g. seeds=1,2,3"


def _threads(v) -> str | None:
    ok = v is None or v == "auto" or (isinstance(v, int) and not isinstance(v, bool) and v >= 1)
    return None if ok else "null (torch's default; 1 when reproducible) or a whole number of threads >= 1"


def _budget(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return "null, a head count (36) or a fraction in (0, 1) (0.5)"
    return None if (isinstance(v, int) and v >= 1) or (isinstance(v, float) and (0 < v < 1 or v.is_integer() and v >= 1)) \
        else "null, a head count >= 1 or a fraction in (0, 1)"


def sentence_range(value) -> tuple[int, int] | None:
    """``data.sentences``' value of one role as ``(start, end)``: N is ``(0, N)``, ``[start, end]`` itself
    (0 <= start < end); None when it is neither."""
    items = OmegaConf.to_container(value) if isinstance(value, ListConfig) else value
    if isinstance(items, int) and not isinstance(items, bool) and items >= 1:
        return 0, items
    if (isinstance(items, list) and len(items) == 2 and all(isinstance(x, int) and not isinstance(x, bool) for x in items)
            and 0 <= items[0] < items[1]):
        return items[0], items[1]
    return None


# train.phases: each phase's keys (its rates default to train's), and what a phase may freeze
PHASE_KEYS = ("epochs", "lr_encoder", "lr_decoder", "freeze")
FREEZABLE = ("decoders",)


def train_phases(train) -> list[dict]:
    """``train.phases`` resolved, one dict per phase with every key of :data:`PHASE_KEYS`: ``epochs``,
    ``lr_encoder`` and ``lr_decoder`` (floats; train's own where the phase gives none) and ``freeze`` (a
    list of :data:`FREEZABLE`; default none). ``train``: the config's ``train`` section. Null or absent
    (runs saved before the key): one phase of ``train.epochs`` epochs at train's rates, nothing frozen,
    which is the schedule of every run without phases. A phase that is not a mapping, an unknown key,
    a bad value, or epochs that do not add up to ``train.epochs`` are a ConfigError naming the key."""
    given = train.get("phases")
    rates = {"lr_encoder": float(train.lr_encoder), "lr_decoder": float(train.lr_decoder)}
    if given is None:
        return [{"epochs": train.epochs, **rates, "freeze": []}]
    items = OmegaConf.to_container(given) if isinstance(given, (ListConfig, DictConfig)) else given
    example = "[{epochs: 2}, {epochs: 1, lr_encoder: 1.0e-5, freeze: [decoders]}]"
    if not isinstance(items, list) or not items:
        raise ConfigError(f"config key 'train.phases': expected null or a list of phases like {example}, got {items!r}")
    frozen = subset(*FREEZABLE)
    rules = (("epochs", count()), ("lr_encoder", number()), ("lr_decoder", number()),
             ("freeze", lambda v: None if v == [] else frozen(v)))  # freeze: [] (the default) or some of FREEZABLE
    phases = []
    for i, phase in enumerate(items):
        key = f"train.phases[{i}]"
        if not isinstance(phase, dict) or "epochs" not in phase:
            raise ConfigError(f"config key '{key}': expected a mapping with epochs (and lr_encoder, lr_decoder, "
                              f"freeze), like {example}, got {phase!r}")
        unknown = sorted(set(map(str, phase)) - set(PHASE_KEYS))
        if unknown:
            raise ConfigError(f"config key '{key}': unknown key {unknown[0]!r} (a phase has: {', '.join(PHASE_KEYS)})")
        resolved = {**rates, "freeze": [], **phase}
        for name, rule in rules:
            expected = rule(resolved[name])
            if expected:
                raise ConfigError(f"config key '{key}.{name}': expected {expected}, got {resolved[name]!r}")
        phases.append({"epochs": resolved["epochs"], "lr_encoder": float(resolved["lr_encoder"]),
                       "lr_decoder": float(resolved["lr_decoder"]), "freeze": list(resolved["freeze"])})
    total = sum(p["epochs"] for p in phases)
    if total != train.epochs:
        raise ConfigError(f"config key 'train.phases': its phases add up to {total} epochs and train.epochs is "
                          f"{train.epochs}; set train.epochs={total} (or change the phases)")
    return phases


def _mapping(values: Rule, example: str) -> Rule:
    def rule(v):
        items = OmegaConf.to_container(v) if isinstance(v, DictConfig) else v
        if not isinstance(items, dict) or any(not isinstance(k, str) or values(x) for k, x in items.items()):
            return f"a mapping like {example}"
        return None
    return rule


def task_modules() -> list[str]:
    """The task modules in ``tasks/`` (a task named ``x`` lives in ``tasks/x.py``), found without
    importing them (they import torch): the fast check of ``tasks=``; ``build_tasks`` checks the
    registry ``tasks.TASKS`` itself. ``base`` (the Task class) and ``plain`` (the decoders' previous, plainer
    implementations, which tests and benches check the fast ones against) are no tasks."""
    spec = importlib.util.find_spec("tasks")
    folders = spec.submodule_search_locations if spec is not None else []
    return sorted(p.stem for folder in folders for p in Path(folder).glob("*.py")
                  if p.stem not in ("__init__", "base", "plain"))


def _tasks(v) -> str | None:
    registry = getattr(sys.modules.get("tasks"), "TASKS", {})  # when already imported: tasks added at run time
    known = sorted(set(task_modules()) | set(registry))
    unknown = [t for t in v if t not in known]
    if unknown:
        return f"task names from {', '.join(known)} (unknown: {', '.join(map(str, unknown))})"
    return "each task once" if len(set(v)) != len(v) else None


RULES: dict[str, Rule] = {
    "tasks": _tasks,
    "seed": _seed,
    "seeds": _seeds,
    "device": _device,
    "precision": choice(*PRECISIONS),
    "threads": _threads,
    "prune.mode": choice(*PRUNE_MODES),
    "prune.lambda": number(0.0, low_open=False, auto=True),
    "prune.budget": _budget,
    "prune.lr_lagrangian": number(),
    "encoder.attn_implementation": choice("sdpa", "eager"),
    "encoder.gate": choice("none", "fixed", "hard_concrete"),
    "encoder.gate_groups": choice("heads", "kv"),
    "encoder.gate_init": number(),
    "encoder.gate_init_mean": number(float("-inf"), auto=True),
    "encoder.pool": choice("auto", "first", "last", "mean"),
    "data.format": choice("demo", "conll2012", "ewt", "hf", "conllu"),
    "data.pos": choice("auto", "upos", "xpos"),
    "data.deprel": choice("full", "universal"),
    "data.deps": choice("auto", "ud", "converted", "none"),
    "data.long_policy": choice("skip", "split"),
    "data.max_sentences": count(optional=True),
    "data.max_eval_sentences": count(optional=True),
    "data.demo_seed": _seed,
    "data.demo_sizes": _mapping(count(), "{train: 1200, dev: 200, test: 200} (sentences per split, each >= 1)"),
    "data.splits": _mapping(lambda x: None if isinstance(x, str) else "a split name",
                            "{train: train, dev: dev, test: test} (role: corpus split)"),
    "data.unannotated": _mapping(lambda x: None if isinstance(x, list) else "a list",
                                 "{train: [entities]} (split: list of layers)"),
    "data.task_splits": _mapping(lambda x: None if isinstance(x, dict) else "a mapping",
                                 "{ner: {train: dev}} (task: {role: role it reads})"),
    "data.sentences": _mapping(lambda x: None if sentence_range(x) else "N or [start, end]",
                               "{train: 1000, dev: [1000, 1500]} (role: the first N sentences, or [start, end))"),
    "train.epochs": count(),
    "train.batch_size": count(),
    "train.eval_batch_size": count(),
    "train.lr_encoder": number(),
    "train.lr_decoder": number(),
    "train.lr_gate": number(),
    "train.weight_decay": number(0.0, low_open=False),
    "train.warmup": number(0.0, low_open=False, high=1.0),
    "train.clip": number(0.0, low_open=False),
    "train.sampling_alpha": number(0.0, low_open=False, high=1.0, high_open=False),
    "train.select": choice("auto", "best", "last"),
    "train.patience": count(optional=True),
    "train.checkpoint_every": count(0),
    "train.strategy": choice("ddp", "fsdp"),  # mtl_heads.training.parallel.STRATEGIES
    "wandb.mode": choice("auto", "online", "offline", "disabled"),
    # probe.yaml, evaluate.yaml, predict.yaml
    "split": choice("train", "dev", "test"),
    "compare_pool": choice("seeds", "none"),  # mtl_heads.reports.probe_compare.POOLS
    "pred_format": choice("auto", "conll2012", "conllu", "jsonl"),
    "gold_format": choice("auto", "conll2012", "conllu", "jsonl"),
    "conllu_pos": choice("upos", "xpos"),
    "format": choice("auto", "conll2012", "conllu", "ptb", "jsonl"),
    "input.format": choice("auto", "text", "conllu", "conll2012", "jsonl"),
    "long_policy": choice("skip", "split"),
    "batch_size": count(),
    "dep.root": choice("cls", "none"),
    "dep.relations": choice("full", "universal"),
    "clustering.variant": choice("same_split", "held_out"),
    "clustering.centroid_split": choice("train", "dev", "test"),
    "voita.frequency_split": choice("train", "dev", "test"),
    "voita.min_arcs": count(),
    "importance.max_sentences": count(optional=True),
    "ablation.max_sentences": count(optional=True),
    "ablation.rank_by": choice("ablation", "importance"),
    "report.panels": count(),
    "report.compare_panels": count(),
    # remove.yaml, compare.yaml, report.yaml, gates.yaml
    "check_sentences": count(),
    "threshold": number(0.0, low_open=False, high=1.0, high_open=False),
    "panels": count(),
    "shuffles": count(),
    # ablate.yaml
    "methods": subset("zero", "mean", "resample"),  # mtl_heads.analysis.ablation.METHODS
    "random_sets": count(),
    "matched": choice("layer", "importance"),  # mtl_heads.analysis.ablation.MATCHED
    "reference": choice("train", "dev", "test"),
    "max_sentences": count(optional=True),
    "reference_sentences": count(optional=True),
    "top": count(optional=True),
}
# a key whose values differ by command: the rule of that command's config file overrides RULES
RULES_OF_FILE = {
    "claims.yaml": {"format": choice("markdown", "json")},  # predict.yaml's format is RULES' own
}

_ABSENT = object()


def validate(cfg: DictConfig, file: str = "") -> None:
    """Check every key of ``cfg`` that :data:`RULES` knows (with :data:`RULES_OF_FILE`'s rules for the
    config file named ``file``, such as ``claims.yaml``; default none); the first bad one is a
    ConfigError naming the key, the expected values and the value given."""
    for key, rule in {**RULES, **RULES_OF_FILE.get(file, {})}.items():
        value = OmegaConf.select(cfg, key, default=_ABSENT)
        if value is _ABSENT:
            continue
        expected = rule(value)
        if expected:
            shown = OmegaConf.to_container(value) if isinstance(value, (DictConfig, ListConfig)) else value
            raise ConfigError(f"config key '{key}': expected {expected}, got {shown!r}")
    if OmegaConf.select(cfg, "train.phases", default=None) is not None:  # its keys checked, and with train.epochs
        train_phases(cfg.train)
