"""Configuration: YAML files in ``configs/`` loaded with OmegaConf, plus ``key=value`` overrides.

Every key that can be set is in ``configs/train.yaml`` with its default and a comment. An override
naming a key that is not there, or giving a value of the wrong type, raises :class:`ConfigError`
naming the key (and the valid keys at that level).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"
PRESET_GROUPS = ("data", "encoder", "prune")  # `data=ewt` loads configs/data/ewt.yaml into `data`


class ConfigError(ValueError):
    """A bad configuration key or value; the message names the key."""


def load_config(overrides: list[str] | None = None, base: str | Path = CONFIG_DIR / "train.yaml") -> DictConfig:
    """Load ``base`` and apply command-line ``overrides`` (``["tasks=pos,ner", "train.epochs=2"]``)."""
    cfg = OmegaConf.load(base)
    for item in overrides or []:
        key, value = _split(item)
        if key in PRESET_GROUPS and isinstance(cfg.get(key), DictConfig) and _is_preset_name(value):
            _apply_preset(cfg, key, value)
        else:
            set_key(cfg, key, value)
    return cfg


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
    if isinstance(default, DictConfig) and isinstance(parsed, dict) and _free_form(key):
        node[last] = parsed
    elif isinstance(default, DictConfig):
        if not isinstance(parsed, dict):
            raise ConfigError(f"config key '{key}': expected a mapping like {{a: 1}}, got {value!r}")
        for sub, sub_value in parsed.items():
            set_key(cfg, f"{key}.{sub}", sub_value)
    else:
        node[last] = _check_type(parsed, default, key, value)


def _free_form(key: str) -> bool:
    """Sections whose sub-keys are the user's own (split names, task options)."""
    return (key in {"data.unannotated", "data.demo_sizes", "data.splits", "data.task_splits"}
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
    except yaml.YAMLError as err:
        raise ConfigError(f"config key '{key}': cannot parse {text!r}: {err}") from None


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


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)
