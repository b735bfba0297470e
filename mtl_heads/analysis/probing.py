"""Probing a model: parameter-free head probes of one model (an encoder or a trained run) into a
report folder, or a comparison of reports; each logged to W&B when asked.

``python -m mtl_heads probe`` (:mod:`mtl_heads.commands.probe`) is the command over this module; it
passes the probe registry (``probes.PROBES``) in, so the library needs no registry of its own.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

import torch
from omegaconf import DictConfig, OmegaConf

from mtl_heads.config import ConfigError, pick
from mtl_heads.data.corpus import ROLES, load_corpus
from mtl_heads.folders import is_probe_report, is_run_dir, removal_dir
from mtl_heads.training.build import load_run, pick_device
from mtl_heads.model.encoder import EncoderNotFound, GatedEncoder
from mtl_heads.model.gate_constants import KEPT_AT, kept_count
from mtl_heads.model.headsets import head_name
from mtl_heads.model.precision import autocast
from mtl_heads.model.removal import read_heads
from mtl_heads.study.core import heads_text
from mtl_heads.reports.probe_compare import compare_reports, group_reports
from mtl_heads.records.probe_reports import read_report
from mtl_heads.reports.probe_report import closed_best, safe_name, write_report
from mtl_heads.training.tracking import resolve_mode, start_run
from probes.base import Probe, ProbeContext, RunProbeAdapter, first_token_name
from probes.runner import examples_for, run_probes
from probes.samples import AttentionSamples
from probes.sink import SinkProbe

__all__ = ["REPORTS", "ADDED", "probe_classes", "with_sink", "file_probes", "load_model", "closed_heads",
           "build_probes", "needed_layers", "probe_model", "run_compare", "LoggedReport", "log_to_wandb",
           "check_config"]

REPORTS = Path("probe-reports")


# --- building ---------------------------------------------------------------------------------
def probe_classes(names: list[str], registry: dict) -> dict:
    """``{name: Probe class}`` from ``registry`` (``probes.PROBES``); unknown names are a ConfigError."""
    return pick(registry, names, "probes", "dep,pos")


ADDED = (SinkProbe, AttentionSamples)
"""Probes added to every report that captures attention maps: they reuse the maps, no encoder pass."""


def with_sink(classes: dict) -> dict:
    """``classes`` plus the probes of :data:`ADDED` (``sink``; ``attention-samples``, which keeps a
    few sentences' attention for the report's attention view) when one of them reads attention
    maps (they reuse them, so they cost no encoder pass); unchanged otherwise."""
    if not any(getattr(cls, "uses_attentions", False) for cls in classes.values()):
        return classes
    return {**classes, **{cls.name: cls for cls in ADDED if cls.name not in classes}}


def file_probes(probes: dict) -> dict:
    """The probes of ``probes`` that write a file of their own (``write(folder)``) instead of a
    per-head table (:class:`probes.samples.AttentionSamples`): kept out of ``report.json``'s
    ``probes``, so that every reader of per-head tables skips them."""
    return {name: p for name, p in probes.items() if callable(getattr(p, "write", None))}


def load_model(spec: str, device: torch.device) -> tuple[GatedEncoder, object | None, dict]:
    """``(encoder in eval mode on device, LoadedRun or None, description)`` for ``model=spec``."""
    spec = str(spec)
    if is_run_dir(spec):
        loaded = load_run(spec, device=device)
        encoder = loaded.model.encoder.eval()
        values = encoder.gate_values().cpu()
        kept = kept_count(values)
        info = {"model_kind": "run", "model_name": Path(spec).resolve().name, "encoder": loaded.cfg.encoder.name,
                "weights_sha256": loaded.weights_sha256,  # the weights probed, by their digest
                "run_tasks": list(loaded.cfg.tasks), "gates_text": f"{type(encoder.gate).__name__ if encoder.gate is not None else 'none'}"
                f" (eval values), kept {kept} of {values.numel()} (>= {KEPT_AT:g})",
                "closed_heads": closed_heads(values, Path(spec))}
        return encoder, loaded, info
    if Path(spec).is_dir() and (Path(spec) / "config.yaml").exists() and not (Path(spec) / "config.json").exists():
        raise ConfigError(f"config key 'model': {spec} is a run folder without a finished model "
                          "(config.yaml, labels.json and model.safetensors are needed)")
    if Path(spec).is_dir() and (Path(spec) / "report.json").exists():
        raise ConfigError(f"config key 'model': {spec} is a probe report folder; compare it with compare={spec},<other>")
    try:
        encoder = GatedEncoder.from_pretrained(spec, gate="none")
    except EncoderNotFound as err:
        raise ConfigError(f"config key 'model': {err}") from None
    except (OSError, ValueError) as err:  # unknown architecture, slow tokenizer, broken folder
        raise ConfigError(f"config key 'model' ({spec}): {err}") from None
    name = Path(spec).resolve().name if Path(spec).is_dir() else spec.replace("/", "_")
    kind = "pretrained decoder-only LM" if encoder.causal else "pretrained encoder"
    return encoder.to(device).eval(), None, {"model_kind": kind, "model_name": name,
                                             "encoder": spec, "gates_text": "none (every head open)"}


def closed_heads(values: torch.Tensor, run: Path) -> dict[str, str]:
    """``{head name: why}`` for the heads of a run that add nothing to its output, which a probe report marks
    wherever it names them as best: ``gate closed`` (its eval gate below :data:`KEPT_AT`, as the run's
    ``gates.json`` records), ``gate closed, removed in removal/`` where ``python -m mtl_heads remove`` also
    took it out of the run's ``removal/`` model (``removed in pruned/`` for a folder written when the command
    was called ``prune``: :func:`~mtl_heads.folders.removal_dir`).

    Args:
        values: the run's eval gate values, ``[layers, heads]``.
        run: the run folder (its removal folder is read when present).
    """
    removed, folder = set(), removal_dir(run)
    if folder is not None:
        heads = read_heads(folder)
        removed = {(layer, head) for layer, (kept, zeroed) in
                   enumerate(zip(heads["kept_heads"], heads.get("zeroed_heads") or [[] for _ in heads["kept_heads"]]))
                   for head in range(heads["heads"]) if head not in kept or head in zeroed}
    return {head_name(layer, head): "gate closed" + (f", removed in {folder.name}/" if (layer, head) in removed else "")
            for layer, head in (values < KEPT_AT).nonzero().tolist()}


def build_probes(cfg: DictConfig, classes: dict, encoder: GatedEncoder, device: torch.device, loaded) -> dict:
    """Instantiate each probe with its options: the config section named by the class's
    ``options_section`` (clustering probes: ``clustering``) or by the probe's name, when present.
    A registered class that is not a ``probes.base.Probe`` but has ``run(loaded_run,
    examples_by_task, batch_size)`` (``probes.importance``) is wrapped in ``RunProbeAdapter``."""
    probes = {}
    for name, cls in classes.items():
        if getattr(cls, "needs_run", False) and loaded is None:
            raise ConfigError(f"config key 'probes': probe '{name}' needs a trained run; pass model=runs/<run>")
        section = getattr(cls, "options_section", name)
        options = OmegaConf.to_container(cfg[section]) if section in cfg and isinstance(cfg[section], DictConfig) else {}
        try:
            if isinstance(cls, type) and issubclass(cls, Probe):
                probes[name] = cls(encoder.num_layers, encoder.num_heads, device=device, **options)
            else:
                probes[name] = RunProbeAdapter(cls(**options), encoder.num_layers, encoder.num_heads, device,
                                               batch_size=cfg.batch_size)
        except (TypeError, ValueError) as err:
            if isinstance(err, ConfigError):
                raise
            raise ConfigError(f"config key '{section}' (options of probe '{name}'): {err}") from None
    return probes


def needed_layers(classes: dict, loaded=None) -> set[str]:
    """Sentence layers the probes read (a run's probes read its tasks' layers)."""
    layers = {layer for cls in classes.values() for layer in getattr(cls, "needs", ())}
    if loaded is not None and any(getattr(cls, "needs_run", False) for cls in classes.values()):
        layers |= {layer for task in loaded.tasks.values() for layer in task.needs}
    return layers


# --- one model --------------------------------------------------------------------------------
def probe_model(cfg: DictConfig, spec: str, out: Path | None, registry: dict, log: Callable = print) -> Path:
    """Probe ``model=spec`` as configured, with the probes ``cfg.probes`` names in ``registry``
    (``probes.PROBES``); write and log its report folder; return the folder."""
    started = time.time()
    device = pick_device(cfg.device)
    classes = with_sink(probe_classes(list(cfg.probes), registry))
    # everything that can fail on bad input runs before the report folder is written
    encoder, loaded, info = load_model(spec, device)
    probes = build_probes(cfg, classes, encoder, device, loaded)
    corpus = load_corpus(cfg.data, needed_layers(classes, loaded))
    context = ProbeContext(encoder, corpus, cfg.split, device, loaded, cfg.data.long_policy)
    examples = examples_for(context, cfg.split)
    if not examples:
        raise ConfigError(f"config key 'split': the '{cfg.split}' split has no sentence to probe")
    log(f"probing {spec} on {cfg.data.format} '{cfg.split}' ({len(examples)} sentences) on {device}: {', '.join(probes)}")
    with autocast(device, cfg.precision):  # encoder passes in bf16 where asked; probe statistics stay fp32
        timings = run_probes(probes, context, cfg.batch_size, cfg.progress, log)
    folder = out or _fresh(REPORTS / f"{safe_name(info['model_name'])}-{cfg.split}-{datetime.now():%Y%m%d-%H%M%S}")
    own_files = file_probes(probes)
    probes = {name: p for name, p in probes.items() if name not in own_files}
    folder.mkdir(parents=True, exist_ok=True)
    kept = {name: p.write(folder) for name, p in own_files.items()}  # before write_report: listed in "files"
    metas = {name: p.meta() for name, p in probes.items()}
    clustering = [m for m in metas.values() if "variant" in m]
    meta = {"model": str(spec), **info, "layers": encoder.num_layers, "heads": encoder.num_heads,
            "causal": bool(encoder.causal), "first_token": first_token_name(encoder),
            "data": OmegaConf.to_container(cfg.data), "split": cfg.split, "sentences": len(examples),
            "words": sum(len(e.sentence.words) for e in examples),
            "subwords": sum(len(e.input_ids) for e in examples),
            "tokenize": context.tokenize_reports[cfg.split].lines(),
            "clustering_variant": (f"{clustering[0]['variant']}: {clustering[0]['variant_text']}" if clustering else "-"),
            "probes": metas, "passes": timings["passes"],
            "device": str(device), "precision": cfg.precision, "seconds": round(time.time() - started, 1),
            "created": datetime.now().isoformat(timespec="seconds"), "config": OmegaConf.to_container(cfg)}
    if AttentionSamples.name in kept:
        meta["attention_samples"] = kept[AttentionSamples.name]
    written = write_report(folder, probes, meta, cfg.report.panels)
    drawn = time.time()
    for line in written["meta"]["caveats"]:  # a causal model: what its numbers mean, in words
        log(f"causal: {line}")
    marked = closed_best(written["summaries"], info.get("closed_heads") or {})
    if marked:
        log(f"{len(marked)} best head(s) are closed in the run (marked in report.md): {heads_text(marked, 8)}")
    sink = written["meta"].get("attention_sink")
    if sink:
        log(f"attention sink: {sink['mean']:.1f}% of attention on the first token ({sink['first_token']}) on average, "
            f"up to {sink['max']['share']:.1f}% (L{sink['max']['layer']}H{sink['max']['head']})")
    logged = LoggedReport(written["meta"], written["summaries"], written["tables"], written["images"])
    run_id = log_to_wandb(cfg, folder, "probe", logged, run_cfg=loaded.cfg if loaded is not None else None)
    log(f"report folder: {folder}" + (f" (W&B run {run_id})" if run_id else "")
        + f"; probing {meta['seconds']} s, report {drawn - started - meta['seconds']:.1f} s"
        + (f", W&B {time.time() - drawn:.1f} s" if run_id else ""))
    return folder


# --- comparison -------------------------------------------------------------------------------
def run_compare(cfg: DictConfig, registry: dict, log: Callable = print) -> Path:
    """Compare the report folders and/or models listed in ``compare`` (models are probed first, with
    the probes of ``registry``); return the comparison folder."""
    entries = [str(x) for x in cfg.compare]
    if len(entries) < 2:
        raise ConfigError(f"config key 'compare': give two or more report folders or models, got {entries}")
    out = Path(cfg.out) if cfg.out else _fresh(REPORTS / f"compare-{datetime.now():%Y%m%d-%H%M%S}")
    probe_classes(list(cfg.probes), registry)
    reports = []
    for i, entry in enumerate(entries):
        if is_probe_report(entry):
            try:
                reports.append(read_report(entry))
            except (OSError, ValueError) as err:
                raise ConfigError(f"config key 'compare': {err}") from None
            continue
        if Path(entry).is_dir() and not is_run_dir(entry) and not (Path(entry) / "config.json").exists():
            raise ConfigError(f"config key 'compare': {entry} is neither a probe report folder, a run folder nor an encoder folder")
        folder = probe_model(cfg, entry, out / f"{i}-{safe_name(Path(entry).name or entry)}", registry, log)
        reports.append(read_report(folder))
    common = [p for p in cfg.probes if all(p in r.summaries for r in reports)]
    if not common:
        raise ConfigError(f"config key 'compare': the reports share none of the probes {list(cfg.probes)} "
                          f"(they hold: {'; '.join(', '.join(r.summaries) for r in reports)})")
    groups = group_reports(reports, pool=cfg.compare_pool)
    if len(groups) < 2:
        raise ConfigError(f"config key 'compare': the {len(reports)} reports are seeds of one setting "
                          f"({groups[0].name}), nothing to compare them with; compare_pool=none compares the seeds")
    for group in groups:
        if len(group.reports) > 1:
            log(f"seeds pooled: {group.name} = {', '.join(group.names)}")
    written = compare_reports(reports, out, common, cfg.report.compare_panels, cfg.compare_pool)
    for line in written["meta"]["choice_warnings"]:
        log(f"warning: {line}")
    logged = LoggedReport(written["meta"], written["tables"], {}, written["images"])  # its tables are the summaries
    run_id = log_to_wandb(cfg, out, "probe", logged, compare=True)
    log(f"comparison folder: {out}" + (f" (W&B run {run_id})" if run_id else ""))
    return out


# --- W&B --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoggedReport:
    """What a probe report or a probe comparison logs to W&B: what its folder holds (``write_report``,
    ``compare_reports``), as pandas tables and picture files."""

    meta: dict
    """The report's record (``report.json``, ``compare.json``); the W&B config takes it without its ``config``
    and ``passes``."""
    summaries: dict
    """``{probe: DataFrame}`` logged as ``<probe>/summary`` (a comparison's: ``<probe>/compare``); a report's rows
    (``label``, ``score``) also go to the W&B summary as ``<probe>/<label>``."""
    tables: dict
    """``{probe: DataFrame}`` of the per-head tables, logged as ``<probe>/table`` (a comparison has none)."""
    images: dict
    """``{key: picture file}`` logged as ``<key>/heatmap``."""


def log_to_wandb(cfg: DictConfig, folder: Path, job_type: str, report: LoggedReport, compare: bool = False,
                 run_cfg: DictConfig | None = None) -> str | None:
    """Log ``report`` to a W&B run (``wandb.mode``; disabled: nothing); returns the run id.

    Args:
        cfg: the probe command's config (its ``wandb`` section; the W&B config under ``probe``).
        folder: the report folder (W&B files under it; the run id to ``folder/wandb_id``).
        job_type: the W&B job type (``probe``).
        report: what is logged (:class:`LoggedReport`).
        compare: a probe comparison (default False: one model's report), tagged ``compare``.
        run_cfg: the probed training run's config (default None: a pretrained encoder or a comparison):
            it names the W&B group and tags, so a probe sits beside the run it probed.
    """
    import wandb  # only when logging: a heavy import

    meta, summaries, tables, images = report.meta, report.summaries, report.tables, report.images
    config = {"probe": OmegaConf.to_container(cfg),
              "meta": {k: v for k, v in meta.items() if k not in ("config", "passes")}}
    run = start_run(cfg.wandb, folder, job_type, config, run_cfg=run_cfg,
                    extra_tags=("compare",) if compare else ())
    if run is None:
        return None
    try:
        logged = {f"{name}/{'compare' if compare else 'summary'}": wandb.Table(dataframe=t.astype(object))
                  for name, t in summaries.items()}
        logged.update({f"{name}/table": wandb.Table(dataframe=t.astype(object)) for name, t in tables.items()})
        logged.update({f"{key}/heatmap": wandb.Image(str(path)) for key, path in images.items()})
        run.log(logged)
        if not compare:
            run.summary.update({f"{name}/{row.label}": float(row.score) for name, s in summaries.items()
                                for row in s.itertuples()})
        (folder / "wandb_id").write_text(run.id)
        return run.id
    finally:
        run.finish()


# --- helpers ----------------------------------------------------------------------------------
def _fresh(path: Path) -> Path:
    """``path``, or ``path-2``, ``path-3``... when it exists."""
    candidate, n = path, 1
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def check_config(cfg: DictConfig) -> None:
    if cfg.split not in ROLES:
        raise ConfigError(f"config key 'split': expected one of {', '.join(ROLES)}, got {cfg.split!r}")
    if not isinstance(cfg.batch_size, int) or cfg.batch_size < 1:
        raise ConfigError(f"config key 'batch_size': expected a positive integer, got {cfg.batch_size!r}")
    if cfg.clustering.centroid_split not in ROLES:
        raise ConfigError(f"config key 'clustering.centroid_split': expected one of {', '.join(ROLES)}, "
                          f"got {cfg.clustering.centroid_split!r}")
    resolve_mode(cfg.wandb.mode)
