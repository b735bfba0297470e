"""Run folders: finding them, reading their config, and grouping them into *settings*, as
``python -m mtl_heads compare``, ``python -m mtl_heads report`` and ``python -m mtl_heads gates`` do.

A run is a folder holding ``config.yaml`` and ``metrics.json``; :func:`find_runs` takes run folders,
globs, folders of runs (searched at any depth up to ``MAX_DEPTH``) and experiment names, and says in a
:class:`Note` what it was given or found and did not use. Runs whose configs are identical apart from
``IGNORED_KEYS`` (seed, folders, W&B, resume, progress bars, reproducible mode and threads) form one setting; :func:`setting_names`
names it by its tasks and prune mode (``pos+ner``, ``dep (dynamic)``), plus the keys that tell apart
settings of one name (``pos (dynamic, budget=36)``) or a number (``pos #2``).
"""
from __future__ import annotations

import glob
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from mtl_heads.config import ConfigError
from mtl_heads.folders import (KIND_WHY, RETRAINED_FOLDER, RUNS, SEED_FOLDER, continued_run, folder_kind, is_finished_run,
                               is_unfinished_run, match_name)

__all__ = ["IGNORED_KEYS", "RUNS", "MAX_DEPTH", "SKIP_DIRS", "KIND_WHY", "Note", "folder_kind", "walk_runs", "spec_folder",
           "find_runs", "read_yaml", "flatten_config", "setting_config", "varying_keys", "is_null",
           "value_text", "name_settings", "setting_names"]

# config keys that may differ between the seeds of one setting (a key and everything under it): how a run was
# run, not what: reproducible mode and the thread count change the last bits of the numbers, not the experiment,
# so a seed trained again in reproducible mode joins the seeds trained before it (the EWT study's round 3)
IGNORED_KEYS = ("seed", "seeds", "run_dir", "experiment", "wandb", "resume", "train.progress", "progress",
                "reproducible", "threads")


# --- finding runs ------------------------------------------------------------------------------
MAX_DEPTH = 4  # folders searched below a folder given: runs/<group>/<experiment>/seed<N> is depth 3
# removal folders: "removal", and "pruned" where the command was called prune (old runs)
SKIP_DIRS = {"wandb", "checkpoint", "checkpoint.prev", "removal", "pruned", "__pycache__", "node_modules",
             "site-packages"}


@dataclass
class Note:
    """Something a command was given (or found below a folder it was given) and did not use, and why."""

    path: Path
    why: str

    def __str__(self) -> str:
        return f"not used: {self.path} ({self.why})"


def walk_runs(folder: Path, is_run=is_finished_run, is_unfinished=is_unfinished_run, unfinished_why: str = "",
              max_depth: int = MAX_DEPTH, own_kinds: tuple[str, ...] = ()) -> tuple[list[Path], list[Path], list[Note]]:
    """(runs, unfinished runs, notes) at any depth up to ``max_depth`` below ``folder``.

    A run folder is taken whole (nothing below it is searched); hidden folders and W&B, checkpoint
    and removal folders are not searched. Probe reports and probe comparisons found on the way get a
    note (they are not runs), unless their kind is in ``own_kinds`` (the caller uses them); so do
    folders with runs deeper than ``max_depth``.
    """
    runs, unfinished, notes = [], [], []

    def visit(path: Path, depth: int) -> None:
        try:
            children = sorted(c for c in path.iterdir() if c.is_dir())
        except OSError as err:
            notes.append(Note(path, f"cannot be read: {err.strerror or err}"))
            return
        for child in children:
            if child.name.startswith(".") or child.name in SKIP_DIRS:
                continue
            if is_run(child):
                runs.append(child)
            elif is_unfinished(child):
                unfinished.append(child)
            elif (kind := folder_kind(child)) is not None:
                if kind in ("probe report", "probe comparison") and kind not in own_kinds:
                    notes.append(Note(child, KIND_WHY[kind]))
            elif depth < max_depth:
                visit(child, depth + 1)
            elif next(child.rglob("config.yaml"), None) is not None:
                notes.append(Note(child, f"more than {max_depth} levels below {folder}, not searched; "
                                         "name this folder itself"))

    if is_run(folder):
        return [folder], [], []
    visit(folder, 1)
    if unfinished_why:
        notes += [Note(u, unfinished_why) for u in unfinished]
    return runs, unfinished, notes


def _holds_kind(folder: Path, kinds: tuple[str, ...], depth: int = MAX_DEPTH) -> bool:
    """True when a folder of one of ``kinds`` lies below ``folder`` (up to ``depth`` levels)."""
    try:
        children = [c for c in folder.iterdir()
                    if c.is_dir() and not c.name.startswith(".") and c.name not in SKIP_DIRS]
    except OSError:
        return False
    return any(folder_kind(c) in kinds or (depth > 1 and not is_finished_run(c) and _holds_kind(c, kinds, depth - 1))
               for c in children)


def _experiment(spec: str, root: str | Path) -> bool:
    """Whether ``spec`` can name an experiment (``<root>/<spec>``): a relative path that does not already
    start with ``root`` (``runs/nope`` is a folder under runs, not the experiment ``runs/runs/nope``)."""
    parts, under = Path(spec).parts, Path(root).parts
    return not Path(spec).is_absolute() and parts[:len(under)] != under


def spec_folder(spec: str, root: str | Path = RUNS) -> Path:
    """Where ``spec`` points as :func:`find_runs` reads it: the path itself when it exists (or is a glob),
    else the experiment ``<root>/<spec>`` when that folder exists; else the path as given."""
    if not glob.has_magic(spec) and not Path(spec).exists() and _experiment(spec, root) and (Path(root) / spec).is_dir():
        return Path(root) / spec
    return Path(spec)


def find_runs(specs: list[str], root: str | Path = RUNS, notes: list[Note] | None = None,
              uses: tuple[str, ...] = ()) -> tuple[list[Path], list[Path]]:
    """The finished run folders named by ``specs`` (each once, in order) and the unfinished ones skipped.

    Args:
        specs: run folders, globs, folders of runs (searched at any depth up to ``MAX_DEPTH``: the
            ``runs/<experiment>/seed<N>`` folders of ``seeds=`` are found from ``runs``), or
            experiment names (``<root>/<name>``).
        root: where experiment names are looked up (default ``runs``).
        notes: when given, a :class:`Note` is appended for everything named or found that is not
            used: unfinished runs, probe reports, files, folders without runs.
        uses: kinds of :func:`folder_kind` the caller uses itself (no note for them; the HTML
            report passes ``probe report`` and ``probe comparison``).

    Raises ``ConfigError`` for a spec that names nothing, or an explicit folder that is not a finished run.
    """
    found, skipped = [], []
    notes = [] if notes is None else notes
    for spec in map(str, specs):
        if glob.has_magic(spec):
            matches = [Path(m) for m in sorted(glob.glob(spec))]
            if not matches:
                notes.append(Note(Path(spec), "the glob matches nothing"))
        elif Path(spec).exists():
            matches = [Path(spec)]
        elif _experiment(spec, root) and (Path(root) / spec).is_dir():
            matches = [Path(root) / spec]
        else:  # where it was looked for: the folder, and the experiment when spec can name one (runs/x cannot)
            looked = [str(Path(spec))] + ([str(Path(root) / spec)] if _experiment(spec, root) else [])
            raise ConfigError(f"{spec}: no such run folder, glob or experiment (looked in {' and '.join(looked)})")
        explicit = not glob.has_magic(spec)
        for match in matches:
            if is_finished_run(match):
                found.append(match)
            elif is_unfinished_run(match) and explicit:
                raise ConfigError(f"{match}: not a finished run (no metrics.json); is it still training?")
            elif is_unfinished_run(match):
                skipped.append(match)
                notes.append(Note(match, "unfinished run: no metrics.json yet"))
            elif not match.is_dir():
                notes.append(Note(match, "a file, not a run folder"))
            elif (kind := folder_kind(match)) is not None:
                if kind not in uses:
                    notes.append(Note(match, KIND_WHY[kind]))
            else:
                runs, unfinished, below = walk_runs(match, unfinished_why="unfinished run: no metrics.json yet",
                                                    own_kinds=uses)
                found += runs
                skipped += unfinished
                notes += below
                if not runs and not unfinished and not (uses and _holds_kind(match, uses)):
                    notes.append(Note(match, f"no finished run (config.yaml and metrics.json) in it or up to "
                                             f"{MAX_DEPTH} levels below"))
    return list(dict.fromkeys(p.resolve() for p in found)), list(dict.fromkeys(p.resolve() for p in skipped))


# --- reading a run's config --------------------------------------------------------------------
SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: Path) -> dict:
    """A run's ``config.yaml`` as a dict; a ``ConfigError`` naming the file (and line) when it is
    not valid YAML or not a mapping."""
    try:  # libyaml's safe loader where PyYAML has it: the same mappings, about ten times faster
        data = yaml.load(path.read_text(), Loader=SAFE_LOADER)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        raise ConfigError(f"{path}{where}: not valid YAML ({getattr(err, 'problem', None) or err})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys, got {type(data).__name__}")
    return data


def flatten_config(cfg: dict) -> dict[str, object]:
    """A nested config as ``{dotted.key: value}``; lists become comma-joined strings (``pos,ner``)."""
    flat = pd.json_normalize(cfg, sep=".").iloc[0].to_dict() if cfg else {}
    return {k: ",".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in flat.items()}


def _ignored(key: str) -> bool:
    return any(key == k or key.startswith(k + ".") for k in IGNORED_KEYS)


# config keys added since runs of a record were saved, with what their absence meant: a run saved
# without one and a run saved with this value are the same setting (add a key here when adding it to
# configs/train.yaml with a default that keeps the old behaviour)
ADDED_KEYS = {"prune.init_gates": "fresh", "train.patience": None,  # data.sentences: {} flattens to nothing
              "data.max_eval_sentences": None, "train.phases": None}


def setting_config(flat: dict) -> dict:
    """The config keys that define a setting; a key added since the run was saved (:data:`ADDED_KEYS`)
    reads as what its absence meant; ``init=.../seed<N>`` is read
    as ``.../seed*`` (static pruning of each seed's own trained run is one setting), and so is
    ``.../.seed<N>.retrained`` (a retraining of that run that stands in for it: docs/ewt-study.sh's
    retrain stage), and an ``init`` in a study folder that continues another
    (:func:`mtl_heads.folders.continued_run`) as the continued study's path."""
    if "tasks" in flat:  # a training run's config (probe and other configs are read as they are)
        flat = {**{k: v for k, v in ADDED_KEYS.items() if k not in flat}, **flat}
        flat = {k: v for k, v in flat.items() if not (k in ADDED_KEYS and ADDED_KEYS[k] is None and v is None)}
    out = {k: v for k, v in flat.items() if not _ignored(k)}
    if isinstance(out.get("init"), str):
        out["init"] = _any_seed(continued_run(out["init"]))
    return out


def _any_seed(init: str) -> str:
    """An ``init`` path whose last folder is one seed's run (:data:`~mtl_heads.folders.SEED_FOLDER`) or its
    retraining (:data:`~mtl_heads.folders.RETRAINED_FOLDER`) as ``.../seed*`` (a trailing slash kept); any other
    path as it is."""
    base = init.rstrip("/")
    name = base.rsplit("/", 1)[-1]
    if not (match_name(SEED_FOLDER, name) or match_name(RETRAINED_FOLDER, name)):
        return init
    return base[:len(base) - len(name)] + "seed*" + init[len(base):]


# --- settings and their names ------------------------------------------------------------------
def varying_keys(configs: list[dict]) -> list[str]:
    """Keys (in first-seen order) whose values are not the same in every config (absent counts as a value)."""
    keys = list(dict.fromkeys(k for c in configs for k in c))
    return [k for k in keys if len({repr(c.get(k, "<absent>")) for c in configs}) > 1]


NAME_KEYS = ("tasks", "prune.mode")  # already in the base name
MAX_SUFFIX = 28  # characters of "key=value" pairs in a name; longer: numbered names, keys in the legend
_ABSENT = "<absent>"


def _short_keys(keys: list[str]) -> dict[str, str]:
    """Each dotted key by its shortest distinct tail: ``prune.budget`` -> ``budget``."""
    short = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            tail = ".".join(parts[-n:])
            if sum(k == tail or k.endswith("." + tail) for k in keys) == 1:
                break
        short[key] = tail
    return short


def is_null(value) -> bool:
    """True for an unset config value: None or NaN (a key absent from some runs' configs)."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def value_text(value) -> str:
    """A config value as setting names and the legend write it: a float in ``%g`` form (``5e-05``, ``1``),
    anything else as ``str``."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def _usual(values: list) -> object:
    """The value a name leaves unsaid: unset (None) when some run has it unset, else the most common."""
    if any(v is None for v in values):
        return None
    return pd.Series([repr(v) for v in values]).mode().iloc[0]


def name_settings(rows: list[dict], configs: list[dict], varying: list[str]) -> list[str]:
    """Short names: ``pos+ner``, ``dep (dynamic)``. Where settings would share a name, each gets the
    keys (by their last part) whose value is not the usual one (unset, else the most common over all
    the runs): ``pos (dynamic)`` and ``pos (dynamic, budget=36)``, never ``budget=None``.
    When that would be long, the unusual settings are numbered instead (``pos``, ``pos #2``) and the
    legend (:func:`mtl_heads.reports.comparison.config_legend`) holds their keys.

    Args:
        rows: per run, ``tasks`` (``pos+ner``) and ``prune`` (the prune mode, ``none`` when unset).
        configs: per run, its :func:`setting_config`.
        varying: :func:`varying_keys` of ``configs``.
    """
    base = [r["tasks"] + (f" ({r['prune']})" if r["prune"] != "none" else "") for r in rows]
    keys = [tuple(repr(c.get(k, _ABSENT)) for k in varying) for c in configs]
    names = list(base)
    for name in dict.fromkeys(base):
        members = [i for i, b in enumerate(base) if b == name]
        distinct = list(dict.fromkeys(keys[i] for i in members))
        if len(distinct) == 1:
            continue
        differing = [k for k in varying if k not in NAME_KEYS
                     and len({repr(configs[i].get(k, _ABSENT)) for i in members}) > 1]
        short = _short_keys(differing)
        usual = {k: _usual([c.get(k) for c in configs]) for k in differing}  # over all runs
        suffix = {}
        for i in members:
            suffix[keys[i]] = ", ".join(f"{short[k]}={value_text(configs[i][k])}" for k in differing
                                        if configs[i].get(k) is not None and repr(configs[i][k]) != usual[k])
        texts = list(suffix.values())
        numbered = len(set(texts)) < len(texts) or any(len(t) > MAX_SUFFIX for t in texts)
        order = sorted(distinct, key=lambda key: (suffix[key] != "", distinct.index(key)))  # the usual one first
        for i in members:
            text = suffix[keys[i]]
            if not text:
                continue
            if numbered:
                names[i] = f"{name} #{order.index(keys[i]) + 1}"
            else:
                names[i] = f"{name[:-1]}, {text})" if name.endswith(")") else f"{name} ({text})"
    return names


def setting_names(configs: list[dict]) -> list[str]:
    """The setting name of each config (nested or flat), as the comparison table names it: configs
    equal apart from :data:`IGNORED_KEYS` share a name."""
    flats = [setting_config(flatten_config(c)) for c in configs]
    rows = []
    for flat in flats:
        tasks = flat.get("tasks") or ""
        mode = flat.get("prune.mode", flat.get("prune"))
        rows.append({"tasks": "+".join(t.strip() for t in str(tasks).split(",") if t.strip()),
                     "prune": str(mode) if mode not in (None, False, "") else "none"})
    return name_settings(rows, flats, varying_keys(flats))
