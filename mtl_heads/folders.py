"""The one module that knows the folders this project writes: what each kind holds, how to tell
them apart, how to check one and how they are named. Nothing here reads more than file names.

Kinds (the files that make one, written by the command in brackets):

- run (``python -m mtl_heads train``): ``config.yaml``, ``labels.json``, ``model.safetensors`` (a
  trained model, :func:`is_run_dir`); finished when ``metrics.json`` is there too
  (:func:`is_finished_run`); ``gates.json`` is written at the end;
- experiment with seeds (``train seeds=1,2,3``): ``<experiment>/seed<N>/``, one run per seed (:func:`seed_dir`);
- head removal (``remove``): ``heads.json``, ``config.yaml``, ``labels.json`` (:func:`is_removal_dir`),
  by default ``<run>/removal/`` (``<run>/pruned/`` when the command was called ``prune``: :func:`removal_dir`);
- probe report (``probe``): ``report.json``; probe comparison (``probe compare=...``): ``compare.json``;
- run comparison (``compare``): ``compare.csv`` and ``compare-runs.csv``;
- gate report (``gates``): ``correlation.csv`` and ``kept-per-layer.csv``;
- head ablation (``ablate``): ``ablation.json``, by default ``<run>/ablation[-<label>]/``;
- study (``docs/ewt-study.sh``, read by :mod:`mtl_heads.study`): ``<setting>/seed<N>`` run folders; beside a
  run whose weights were trained again and did not reproduce its record, the retraining
  (:data:`RETRAINED_FOLDER`, not committed: it holds weights); in the record's folder, the retraining's
  ``metrics.json`` (:data:`RETRAINING_METRICS`, and :data:`EARLIER_RETRAINING` for each earlier one, the
  first numbered 1); under a run, each of the study's head ablations (:data:`ABLATION_FOLDER`, and
  :data:`IMPORTANCE_ABLATION_FOLDER` against the importance-matched null); a study folder that adds seeds to
  another's settings (the EWT study's round 3) names that folder in :data:`CONTINUES` (:func:`continued_run`), and
  keeps what it adds to a run of that folder (a retraining's metrics, the retraining beside it, its ablations) in
  the run's annex, its own ``<setting>/seed<N>`` (:func:`annexes`), so that the continued record stays as it was.
  The study script reads these names from :func:`study_layout_shell` at its start, so that a name changed here
  changes in both. Each template's fields are in braces, in the order the script's ``printf`` fills them.
"""
from __future__ import annotations

import re
import shlex
from pathlib import Path

from mtl_heads.config import ConfigError

__all__ = ["RUN_FILES", "REMOVAL_FILES", "REMOVAL_DIR", "is_run_dir", "is_finished_run", "is_unfinished_run",
           "is_removal_dir", "removal_dir",
           "is_gate_run", "is_probe_report", "is_probe_comparison", "check_run_dir", "check_record", "seed_dir", "folder_kind",
           "SEED_FOLDER", "ABLATION_FILE", "ABLATION_KEPT_FILE", "RETRAINED_FOLDER", "RETRAINING_METRICS", "EARLIER_RETRAINING",
           "ABLATION_FOLDER", "IMPORTANCE_ABLATION_FOLDER", "ABLATION_NULLS", "CONTINUES", "continued_run",
           "continued_study", "annexes", "STUDY_LAYOUT",
           "match_name", "record_folder_name", "study_layout_shell",
           "KIND_WHY", "shown", "RUNS", "newest_unfinished_run", "setting_stem"]

SEED_FOLDER = "seed{seed}"  # the run folder of one seed in an experiment (train seeds=...) or a study
ABLATION_FILE = "ablation.json"  # what python -m mtl_heads ablate writes
ABLATION_KEPT_FILE = "ablation.partial.json"  # ... beside it while it runs: the passes scored so far (KeptScores)
# a study's (docs/ewt-study.sh; the module docstring)
RETRAINED_FOLDER = ".seed{seed}.retrained"  # the retrain stage's run trained again, beside the record
RETRAINING_METRICS = "retraining.metrics.json"  # in the record's folder: the latest retraining's metrics.json
EARLIER_RETRAINING = "retraining.{k}.metrics.json"  # ... an earlier retraining's, whose weights were lost
ABLATION_FOLDER = "ablation-{kind}-stem-cells-without-{task}"  # the ablate stage's: kind dp or budget, task T
IMPORTANCE_ABLATION_FOLDER = ABLATION_FOLDER + "-importance-matched"  # ... against the importance-matched null
ABLATION_NULLS = {"layer": "layer", "layer and importance": "importance"}  # an ablation.json's "matched" -> its null
CONTINUES = "continues.txt"  # in a study folder: the study folder whose settings its runs add seeds to (one path)
STUDY_LAYOUT = {"SEED_FOLDER": SEED_FOLDER, "RETRAINED_FOLDER": RETRAINED_FOLDER, "RETRAINING_METRICS": RETRAINING_METRICS,
                "EARLIER_RETRAINING": EARLIER_RETRAINING, "ABLATION_FOLDER": ABLATION_FOLDER,
                "IMPORTANCE_ABLATION_FOLDER": IMPORTANCE_ABLATION_FOLDER, "ABLATION_FILE": ABLATION_FILE,
                "CONTINUES": CONTINUES}
NUMBERS = {"seed", "k"}  # the template fields that are whole numbers; the others are names without a slash
FIELD = re.compile(r"\{(\w+)\}")

RUNS = Path("runs")  # where runs go when no folder is named (train's run_dir, compare's and report's root)

RUN_FILES = ("config.yaml", "labels.json", "model.safetensors")  # a trained model
REMOVAL_FILES = ("heads.json", "config.yaml", "labels.json")  # a multi-task model with heads removed
REMOVAL_DIR = "removal"  # in a run folder: where `remove` writes by default
# where it wrote when the command was called prune: old runs keep it, and readers look there too
OLD_REMOVAL_DIR = "pruned"
# the weights file of those folders, for a heads.json without "weights" (which names the file)
OLD_REMOVAL_WEIGHTS = "pruned.safetensors"


def _holds(path: str | Path, names: tuple[str, ...]) -> bool:
    path = Path(path)
    return path.is_dir() and all((path / name).exists() for name in names)


def is_run_dir(path: str | Path) -> bool:
    """True when ``path`` is a folder holding a trained model (config, labels and weights)."""
    return _holds(path, RUN_FILES)


def is_finished_run(path: str | Path) -> bool:
    """True when ``path`` is a run whose numbers are written (``config.yaml`` and ``metrics.json``)."""
    return _holds(path, ("config.yaml", "metrics.json"))


def is_unfinished_run(path: str | Path) -> bool:
    """True when ``path`` is a run started and not finished (no ``metrics.json``); a removal folder is no run."""
    path = Path(path)
    return _holds(path, ("config.yaml",)) and not (path / "metrics.json").exists() and not (path / "heads.json").exists()


def is_removal_dir(path: str | Path) -> bool:
    """True when ``path`` holds a multi-task model with heads removed (``python -m mtl_heads remove``'s output)."""
    return _holds(path, REMOVAL_FILES)


def removal_dir(run: str | Path) -> Path | None:
    """The removal folder inside a run, the first of ``<run>/removal/`` and ``<run>/pruned/`` (written when the
    command was called ``prune``) that holds a ``heads.json``; None when neither does."""
    for name in (REMOVAL_DIR, OLD_REMOVAL_DIR):
        if (Path(run) / name / "heads.json").is_file():
            return Path(run) / name
    return None


def is_gate_run(path: str | Path) -> bool:
    """True when ``path`` is a folder holding ``gates.json`` and ``config.yaml`` (a run the gate report reads)."""
    return _holds(path, ("gates.json", "config.yaml"))


def is_probe_report(path: str | Path) -> bool:
    """True when ``path`` is a probe report folder (``report.json``)."""
    return _holds(path, ("report.json",))


def is_probe_comparison(path: str | Path) -> bool:
    """True when ``path`` is a probe comparison folder (``compare.json``)."""
    return _holds(path, ("compare.json",))


def check_run_dir(path: str | Path, key: str | None = None) -> Path:
    """``path`` as a Path when it holds a trained model; else a ConfigError (naming ``key`` if given)."""
    path = Path(path)
    missing = [name for name in RUN_FILES if not (path / name).exists()]
    if not path.is_dir() or missing:
        where = f"config key '{key}': " if key else ""
        raise ConfigError(f"{where}{path} is not a finished run folder (missing: {', '.join(missing) or 'the folder'}); "
                          "train one with `python -m mtl_heads train`")
    return path


def check_record(path: str | Path, key: str | None = None) -> Path:
    """``path`` as a Path when it holds a finished run's record (``config.yaml`` and ``metrics.json``; its
    weights may be absent, as in a study's committed records); else a ConfigError (naming ``key`` if given)."""
    path = Path(path)
    if not is_finished_run(path):
        where = f"config key '{key}': " if key else ""
        missing = [name for name in ("config.yaml", "metrics.json") if not (path / name).exists()]
        raise ConfigError(f"{where}{path} holds no finished run's record (missing: "
                          f"{', '.join(missing) if path.is_dir() else 'the folder'})")
    return path


def shown(path: str | Path) -> str:
    """``path`` as messages and generated pages show it: relative to the working directory when it lies
    below it (so that a page, table or claims file made in a clone reads the same anywhere), else as given."""
    try:
        return str(Path(path).resolve().relative_to(Path.cwd().resolve()))
    except (ValueError, OSError):
        return str(path)


def seed_dir(experiment: Path, seed: int) -> Path:
    """The run folder of one seed of an experiment: ``<experiment>/seed<N>`` (:data:`SEED_FOLDER`)."""
    return Path(experiment) / SEED_FOLDER.format(seed=seed)


def setting_stem(tasks, mode: str) -> str:
    """``dep``, ``pos-ner``, ``dep-dynamic``: a training setting's tasks (a sequence of task ids) and prune mode
    (``none``, ``dynamic``, ``static``) as the names of a run folder, an experiment and a W&B group start."""
    return "-".join(tasks) + (f"-{mode}" if mode != "none" else "")


def newest_unfinished_run(root: Path = RUNS) -> Path:
    """The run under ``root`` (default ``runs/``) most recently changed that has a ``config.yaml`` and no
    ``metrics.json``: what ``resume=true`` without ``run_dir`` continues."""
    candidates = sorted((p for p in Path(root).glob("*") if (p / "config.yaml").exists() and not (p / "metrics.json").exists()),
                        key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise ConfigError(f"config key 'resume': no unfinished run in {root}/; pass run_dir=<folder>")
    return candidates[-1]


def folder_kind(path: Path) -> str | None:
    """What a folder that is no training run holds, when this project wrote it (None otherwise):
    ``probe report``, ``probe comparison``, ``run comparison``, ``gate report``, ``head removal``,
    ``head ablation``."""
    path = Path(path)
    if not path.is_dir():
        return None
    if is_probe_report(path):
        return "probe report"
    if is_probe_comparison(path):
        return "probe comparison"
    if _holds(path, ("compare.csv", "compare-runs.csv")):
        return "run comparison"
    if _holds(path, ("correlation.csv", "kept-per-layer.csv")):
        return "gate report"
    if (path / "heads.json").is_file():
        return "head removal"
    if (path / ABLATION_FILE).is_file():
        return "head ablation"
    return None


KIND_WHY = {  # why a folder of each kind is not used as a run
    "probe report": "a probe report folder (python -m mtl_heads probe): python -m mtl_heads report shows it",
    "probe comparison": "a probe comparison folder (python -m mtl_heads probe compare=...): "
                        "python -m mtl_heads report shows it",
    "run comparison": "output of python -m mtl_heads compare, not a run",
    "gate report": "output of python -m mtl_heads gates, not a run",
    "head removal": "a model with heads removed (python -m mtl_heads remove); its numbers are read with its run",
    "head ablation": "output of python -m mtl_heads ablate, not a run",
}


def match_name(template: str, name: str) -> dict[str, str] | None:
    """The fields of ``name`` read as ``template`` (``match_name(RETRAINED_FOLDER, ".seed2.retrained")`` ->
    ``{"seed": "2"}``), or None when ``name`` is not one."""
    parts = FIELD.split(template)  # literal, field, literal, ...
    pattern = "".join(re.escape(part) if i % 2 == 0 else f"(?P<{part}>\\d+)" if part in NUMBERS else f"(?P<{part}>[^/]+)"
                      for i, part in enumerate(parts))
    found = re.fullmatch(pattern, name)
    return found.groupdict() if found else None


def record_folder_name(name: str) -> str:
    """The run folder name a retraining stands for (``.seed2.retrained`` -> ``seed2``); any other name as is."""
    found = match_name(RETRAINED_FOLDER, name)
    return SEED_FOLDER.format(seed=int(found["seed"])) if found else name


def study_layout_shell() -> str:
    """The layout as bash assignments, each template a ``printf`` format (``SEED_FOLDER=seed%s``)."""
    return "\n".join(f"{key}={shlex.quote(FIELD.sub('%s', value))}" for key, value in STUDY_LAYOUT.items())


def continued_run(run: str) -> str:
    """A run folder path ``<study>/<setting>/<run>`` as the study it continues names it: ``<other>/<setting>/<run>``
    when ``<study>`` holds :data:`CONTINUES` naming ``<other>`` (read from the current folder, as the path is);
    else ``run`` as given. So that a static pruning run of a continuing study, whose ``init`` is its own baseline,
    is one setting with the continued study's (records.runs.setting_config)."""
    path = Path(run)
    other = continued_study(path.parent.parent) if len(path.parts) >= 3 else ""
    return str(Path(other) / path.parent.name / path.name) if other else run


def continued_study(study: str | Path) -> str:
    """The study folder that study folder ``study`` continues, as its :data:`CONTINUES` names it (a path read from
    the current folder), or ``""`` when it continues none."""
    marker = Path(study) / CONTINUES
    return marker.read_text().strip() if marker.is_file() else ""


def annexes(runs: list[str], specs: list[str]) -> dict[str, str]:
    """``{run: annex}``: for each of ``runs`` (``<study>/<setting>/seed<N>``) whose study one of ``specs`` continues
    (its :data:`CONTINUES` names it), the continuing study's folder of that run, ``<continuing>/<setting>/seed<N>``,
    where that study keeps what it adds to the run (the annex need not exist yet). Paths are read from the current
    folder, as :data:`CONTINUES` is."""
    continuing = {}
    for spec in map(Path, specs):
        other = continued_study(spec)
        if other and Path(other).resolve() != spec.resolve():
            continuing[Path(other).resolve()] = spec
    found = {}
    for run in runs:
        path = Path(str(run))
        over = continuing.get(path.parent.parent.resolve()) if len(path.parts) >= 3 else None
        if over is not None:
            found[str(run)] = str(over / path.parent.name / path.name)
    return found
