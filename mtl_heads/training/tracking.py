"""Weights & Biases logging with one layout for every command: config, per-epoch metrics, gates.

Every W&B run made by this project (``python -m mtl_heads.train``, ``python -m mtl_heads remove``,
``python -m mtl_heads probe``) is started by :func:`start_run` and so has:

- name: the run (or report) folder's name unless ``wandb.name`` is set;
- group: the experiment (config ``experiment``; without one, the setting name ``pos-ner``,
  ``dep-dynamic``), so the seeds of one setting and their head removals and probes sit together;
- job_type: ``train`` (plain training), ``prune`` (training with gates pruned, ``prune.mode`` static
  or dynamic), ``probe``; the head removal of ``python -m mtl_heads remove`` continues its training run's
  W&B run online, and offline is a run of its own linked to it (job type ``removal``,
  :func:`log_head_removal`; tagged ``removal``, its keys under ``removal/``);
- tags: ``wandb.tags`` plus the tasks, ``stl``/``mtl``, ``prune:<mode>``, ``encoder:<name>``, ``seed:<n>``;
- config: the run folder's resolved config.

Training logs ``dev/<task>/<metric>``, ``dev/mean`` and ``epoch`` once per epoch, ``train/loss/<task>``
every 20 steps, and the gates once per epoch: ``gates/L<l>H<h>`` scalars, ``gates/table`` (a table of
layer, head, gate), ``gates/heatmap`` (an image) and ``gates/kept``.

``wandb.mode=auto`` follows the ``WANDB_MODE`` environment variable when it is set, else logs online
when ``WANDB_API_KEY`` is set and offline otherwise (no key needed; upload later with
``wandb sync <folder>/wandb/offline-run-*``); ``disabled`` turns it off. The W&B run id is kept in
the run folder (``wandb_id``, and the last step logged in ``wandb_step``) so that a resumed run (and,
online, the head removal) continues the same W&B run. When an offline run finishes, the
command prints where it went (:func:`offline_message`, the one place for train, remove and probe):
``W&B: offline run written to <folder>; upload with `wandb sync <folder>```.
"""
from __future__ import annotations

import os
import tempfile
import uuid
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError
from mtl_heads.figures.gate_map import plot_gate_map
from mtl_heads.folders import setting_stem, shown
from mtl_heads.model.gate_constants import kept_count
from mtl_heads.model.sparsity import prune_mode
from mtl_heads.training.plan import RunPlan

MODES = ("auto", "online", "offline", "disabled")
JOB_TYPES = ("train", "prune", "removal", "probe")  # prune: training with pruning; removal: a head removal's own run
ID_FILE = "wandb_id"      # in a run folder: its W&B run id
STEP_FILE = "wandb_step"  # in a run folder: the last step its training logged (the removal logs after it)


def resolve_mode(mode: str) -> str:
    """``online``, ``offline`` or ``disabled`` for a ``wandb.mode`` value (``auto`` resolved, see module doc)."""
    if mode not in MODES:
        raise ConfigError(f"config key 'wandb.mode': expected one of {', '.join(MODES)}, got {mode!r}")
    if mode == "auto":
        env = os.environ.get("WANDB_MODE", "").strip().lower()
        if env in ("online", "offline", "disabled", "dryrun"):
            return "offline" if env == "dryrun" else env
        return "online" if os.environ.get("WANDB_API_KEY") else "offline"
    return mode


def job_type(mode: str) -> str:
    """``train``, or ``prune`` for a pruning run (``mode``: its ``prune.mode``)."""
    return "prune" if mode != "none" else "train"


def run_group(cfg, mode: str) -> str:
    """The W&B group of a run (``cfg``: its config; ``mode``: its ``prune.mode``): its ``experiment``, else its
    setting name (``pos-ner``, ``dep-dynamic``)."""
    experiment = OmegaConf.select(cfg, "experiment", default=None)
    return str(experiment) if experiment else setting_stem(cfg.tasks, mode)


def run_tags(cfg, mode: str) -> list[str]:
    """The user's ``wandb.tags`` plus tasks, prune mode (``mode``: the run's ``prune.mode``), encoder and seed
    (for filtering in W&B); ``cfg``: the run's config."""
    encoder = Path(str(OmegaConf.select(cfg, "encoder.name", default="?"))).name  # a local folder: its name
    auto = [*cfg.tasks, "mtl" if len(cfg.tasks) > 1 else "stl", f"prune:{mode}",
            f"encoder:{encoder}"[:64], f"seed:{OmegaConf.select(cfg, 'seed', default='?')}"]
    user = OmegaConf.select(cfg, "wandb.tags", default=None) or []
    return list(dict.fromkeys([*user, *auto]))


def start_run(wandb_cfg, folder: Path, job: str, config: dict, run_cfg=None, name: str | None = None,
              extra_tags: tuple[str, ...] = (), run_id: str | None = None):
    """Start a W&B run with the project's layout; None when the mode resolves to ``disabled``.

    Args:
        wandb_cfg: a ``wandb`` config section (mode, project, entity, name, tags).
        folder: the output folder; W&B files go to ``folder/wandb``.
        job: ``train``, ``prune``, ``removal`` or ``probe``.
        config: the W&B run config (the run folder's resolved config, plus the command's options).
        run_cfg: the training run's config that names group and tags (tasks, prune mode, encoder,
            seed); None (e.g. a probe of a pretrained encoder): group ``<job>``, tags ``wandb.tags``.
        name: the run name; default ``wandb.name``, else ``folder``'s name.
        extra_tags: added after the layout's tags (e.g. ``removal``, ``compare``).
        run_id: a fixed W&B id (resume); default a new one.
    """
    if job not in JOB_TYPES:
        raise ValueError(f"job must be one of {', '.join(JOB_TYPES)}, got {job!r}")
    mode = resolve_mode(wandb_cfg.mode)
    if mode == "disabled":
        return None
    import wandb

    user_tags = list(wandb_cfg.get("tags") or [])
    prune = prune_mode(run_cfg) if run_cfg is not None else None  # prune.mode: a training run's, or a saved run's
    tags = run_tags(run_cfg, prune) if run_cfg is not None else user_tags
    group = run_group(run_cfg, prune) if run_cfg is not None else job
    run = wandb.init(project=wandb_cfg.project, entity=wandb_cfg.get("entity"), dir=str(folder), mode=mode,
                     name=wandb_cfg.get("name") or name or folder.name, group=group, job_type=job,
                     tags=list(dict.fromkeys([*user_tags, *tags, *extra_tags])), config=config, id=run_id,
                     resume="allow" if run_id else None, settings=wandb.Settings(console="off", silent=True))
    tell_when_finished(run)
    return run


def offline_message(folder: Path) -> str:
    """The line printed when an offline W&B run is written: where, and how to upload it."""
    folder = shown(folder)
    return f"W&B: offline run written to {folder}; upload with `wandb sync {folder}`"


def tell_when_finished(run, log=print) -> None:
    """Make ``run.finish()`` of an offline W&B run print :func:`offline_message` (once) after it
    finishes. :func:`start_run` does this for every run, so train (:meth:`Tracker.finish`), the
    head removal (remove) and the probe all say where their offline run went."""
    if run is None or not getattr(run, "offline", False):
        return
    folder = Path(run.dir).parent  # run.dir is <folder>/wandb/offline-run-<time>-<id>/files
    finish = run.finish
    told = []

    def finish_and_tell(*args, **kwargs):
        result = finish(*args, **kwargs)
        if not told:
            told.append(True)
            log(offline_message(folder))
        return result

    run.finish = finish_and_tell


def gate_table(values: torch.Tensor):
    """Gate values ``[layers, heads]`` as a ``wandb.Table`` with columns layer, head, gate."""
    import wandb

    rows = [[layer, head, float(v)] for layer, row in enumerate(values.tolist()) for head, v in enumerate(row)]
    return wandb.Table(columns=["layer", "head", "gate"], data=rows)


def gate_scalars(values: torch.Tensor) -> dict[str, float]:
    """``{gates/L<l>H<h>: value}`` for gate values ``[layers, heads]``."""
    return {f"gates/L{layer}H{head}": float(v)
            for layer, row in enumerate(values.tolist()) for head, v in enumerate(row)}


def log_gate_pictures(run, values: torch.Tensor, title: str, step: int | None = None, prefix: str = "gates") -> None:
    """Log ``<prefix>/table`` (layer, head, gate), ``<prefix>/heatmap`` (the layer x head picture of
    :func:`mtl_heads.figures.gate_map.plot_gate_map`) and ``<prefix>/kept`` (heads with gate >=
    :data:`mtl_heads.model.gate_constants.KEPT_AT`).

    Args:
        run: a W&B run (None: nothing is logged).
        values: gate values ``[layers, heads]`` in [0, 1].
        title: the picture's title (its kept count is appended).
        step: the W&B step (default: W&B's own counter).
        prefix: the key prefix (default ``gates``).
    """
    if run is None:
        return
    import wandb  # only where W&B logs: a heavy import

    array = np.clip(values.detach().cpu().double().numpy(), 0.0, 1.0)  # [layers, heads]
    with tempfile.TemporaryDirectory() as tmp:
        picture = plot_gate_map(array, title, Path(tmp) / "gates.png")
        run.log({f"{prefix}/table": gate_table(values), f"{prefix}/heatmap": wandb.Image(str(picture)),
                 f"{prefix}/kept": kept_count(array)}, step=step)


class Tracker:
    """A W&B run tied to a run folder; every method is a no-op when logging is off.

    Args:
        plan: the run's :class:`~mtl_heads.training.plan.RunPlan`: its config (whose ``wandb`` section is read,
            and which is the W&B config) and its folder (W&B files go to ``run_dir/wandb``; the id to
            ``run_dir/wandb_id``, and at :meth:`finish` the last step logged to ``run_dir/wandb_step``).
        enabled: False on non-zero DDP ranks. Default True.
    """

    def __init__(self, plan: RunPlan, enabled: bool = True):
        cfg, run_dir = plan.cfg, plan.run_dir
        self.run, self.run_dir, self.step = None, run_dir, None
        mode = resolve_mode(cfg.wandb.mode)
        if not enabled or mode == "disabled":
            return
        id_file = run_dir / ID_FILE
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        id_file.write_text(run_id)
        self.name = cfg.wandb.name or run_dir.name
        self.run = start_run(cfg.wandb, run_dir, job_type(plan.pruning.mode),
                             OmegaConf.to_container(cfg, resolve=True), run_cfg=cfg, name=self.name, run_id=run_id)

    def log(self, metrics: dict, step: int) -> None:
        if self.run is not None:
            self.run.log(metrics, step=step)
            self.step = step if self.step is None else max(self.step, step)

    def log_gates(self, values: torch.Tensor, step: int) -> None:
        """Gate values ``[layers, heads]``: one scalar per head, a table, a heatmap image, the kept count."""
        if self.run is None:
            return
        self.run.log(gate_scalars(values), step=step)
        log_gate_pictures(self.run, values, f"{self.name}, step {step}", step=step)

    def summary(self, metrics: dict) -> None:
        if self.run is not None:
            self.run.summary.update(metrics)

    def finish(self) -> None:
        if self.run is not None:
            if self.step is not None:
                (self.run_dir / STEP_FILE).write_text(str(self.step))
            self.run.finish()
            self.run = None


def log_head_removal(wandb_cfg, run_path: Path, run_cfg, out: Path, gates: torch.Tensor,
                     heads_per_layer: list[int], numbers: dict, options: dict) -> str | None:
    """Log ``python -m mtl_heads remove``; returns the W&B run id (None when disabled or when W&B fails,
    which is reported on stderr: the removal folder is written either way).

    Online, the training's W&B run (``run_path/wandb_id``) is continued (``resume="allow"``, W&B files
    in ``run_path/wandb``) with the training's project, entity, name, group, job type and tags, plus the
    tag ``removal``: one run holds the training and its head removal. Offline, and for a run trained
    without W&B, the removal gets a run of its own in ``out/wandb`` (job type ``removal``, name
    ``<run>-removal``, the training's group and tags plus ``removal``, the training's id in the config's
    ``removal.training_run``): W&B cannot resume an offline run, and ``wandb sync`` of a second offline
    folder with the same id has replaced the first's history (wandb/wandb#3841, #5865), which would
    lose the training's curves. Either way the config gains ``removal`` (the command's ``options``,
    ``run`` and ``out``) and everything logged is under ``removal/``: the table
    ``removal/heads_per_layer``, the gates before removal (``removal/gates/table``,
    ``removal/gates/heatmap``, ``removal/gates/kept``), one history row (in a continued run at the step
    after the training's last, ``run_path/wandb_step``), and the summary ``removal/<number>``.

    Args:
        wandb_cfg: the command's ``wandb`` section (see :func:`wandb_section`): its mode is used; its
            project only for a run of its own (a continued run stays in the training's project).
        run_path: the trained run folder; run_cfg: its config (the W&B config, under ``removal``
            the command's ``options`` and ``run_path``).
        out: the removal folder.
        gates: the run's gate values ``[layers, heads]`` (logged as ``removal/gates/table`` and ``.../heatmap``).
        heads_per_layer: heads kept in each layer (logged as the table ``removal/heads_per_layer``).
        numbers: scalars for the summary (heads kept, parameter counts, output differences).
    """
    import sys

    run_path = Path(run_path)
    config = {**OmegaConf.to_container(run_cfg, resolve=True),
              "removal": {**options, "run": str(run_path), "out": str(out)}}
    training_id = training_run_id(run_path)
    config["removal"]["training_run"] = training_id or None
    try:
        if attaches(wandb_cfg.mode, training_id):
            trained = OmegaConf.select(run_cfg, "wandb", default=None) or {}
            section = wandb_section(wandb_cfg.mode, trained.get("project") or wandb_cfg.project, trained.get("entity"),
                                    trained.get("name"), list(trained.get("tags") or []))
            last = _read_text(run_path / STEP_FILE)
            step = int(last) + 1 if last.isdigit() else None
            run = start_run(section, run_path, job_type(prune_mode(run_cfg)), config, run_cfg=run_cfg,
                            name=run_path.name, extra_tags=("removal",), run_id=training_id)
        else:
            step = None
            run = start_run(wandb_cfg, out, "removal", config, run_cfg=run_cfg, name=f"{run_path.name}-removal",
                            extra_tags=("removal",))
        if run is None:
            return None
        import wandb

        try:
            run.log({"removal/heads_per_layer": wandb.Table(columns=["layer", "kept"], data=[
                [i, k] for i, k in enumerate(heads_per_layer)])}, step=step, commit=False)  # one row with the gates
            log_gate_pictures(run, gates, f"{run_path.name}: gates before removal", step=step, prefix="removal/gates")
            run.summary.update({f"removal/{k}": v for k, v in numbers.items()})
            return run.id
        finally:
            run.finish()
    except Exception as err:  # noqa: BLE001 -- W&B's own errors (no network, bad key) must not undo the removal
        print(f"warning: W&B logging ({wandb_cfg.mode}) failed: {err}", file=sys.stderr)
        return None


def attaches(mode: str, training_id: str) -> bool:
    """Does the head removal continue the training's W&B run: only online, with the training's id
    (``mode``: a ``wandb.mode``; :func:`log_head_removal` says why not offline)."""
    return bool(training_id) and resolve_mode(mode) == "online"


def training_run_id(run_path: Path) -> str:
    """The W&B run id a training saved in ``run_path/wandb_id``; empty when there is none."""
    return _read_text(run_path / ID_FILE)


def _read_text(path: Path) -> str:
    """The stripped text of ``path``; empty when it does not exist or cannot be read."""
    try:
        return path.read_text().strip()
    except OSError:
        return ""


def wandb_section(mode: str = "auto", project: str = "mtl-heads", entity: str | None = None,
                  name: str | None = None, tags: list[str] | None = None) -> DictConfig:
    """A ``wandb`` config section for commands configured by flags rather than a config file."""
    return OmegaConf.create({"mode": mode, "project": project, "entity": entity, "name": name,
                             "tags": list(tags or [])})
