"""Does a run's record reproduce? Train its config again and compare (``python -m mtl_heads reproduce``).

:func:`reproduce` trains a run folder's ``config.yaml`` again into another folder and :func:`differences`
compares the two records: the weights' SHA-256 (``weights_sha256`` in ``metrics.json``, recorded since
29 November 2026), every dev and test score, the dev curve, the heads kept, ``labels.json`` and
``gates.json``. Wall time and machine are not compared; where the machines differ, the differing facts
are named (the usual cause of last-bit differences: another CPU capability, thread count or library
version; see :mod:`mtl_heads.reproducible`).

The environment (threads and pinned kernels) must be set before torch is imported, so the command
does that (:func:`mtl_heads.reproducible.pin_command` for a record trained with ``reproducible=true``; the
record's thread count and CPU capability for an older one) and then calls :func:`reproduce`.
"""
from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from mtl_heads.config import ConfigError, load_saved_config
from mtl_heads.files import file_sha256, read_json
from mtl_heads.folders import check_record, is_finished_run

# metrics.json keys that say how long and where, not what was learnt
NOT_COMPARED = ("seconds", "machine", "resumed", "resumed_from")
GATE_TOLERANCE = 1e-6  # relative, for gates.json's float values in records that name no weights digest


@dataclass
class Reproduction:
    """What :func:`reproduce` found.

    Attributes:
        record: the run folder whose record was trained again.
        new: the folder it was trained again in (gone unless kept).
        differences: how the new run differs, one line each (empty: it reproduced).
        digest: the record's weights digest, which was compared (None for a record that names none).
        kept: where the new weights were kept (None: not kept).
    """

    record: Path
    new: Path
    differences: list[str] = field(default_factory=list)
    digest: str | None = None
    kept: Path | None = None

    @property
    def reproduced(self) -> bool:
        return not self.differences

    def lines(self) -> list[str]:
        """The verdict as printed: ``reproduced: weights identical`` or what differs."""
        if self.reproduced:
            if self.digest:
                head = f"reproduced: weights identical (sha256 {self.digest})"
            else:
                head = ("reproduced: scores, dev curve, heads kept, labels and gates identical (the record names no "
                        "weights digest, so the weights themselves could not be compared)")
            return [head] + ([f"weights kept in {self.kept}"] if self.kept else [])
        return ([f"did not reproduce {self.record}:"] + [f"  {line}" for line in self.differences]
                + ([f"the new run is kept in {self.kept}"] if self.kept else []))


def _pair(a, b) -> str:
    """Two values as text, ``a -> b``: two decimals, or every digit where two decimals read the same."""
    short = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in (a, b)]
    return " -> ".join(short if short[0] != short[1] else map(repr, (a, b)))


def _flat(value) -> list[float] | None:
    """A number or nested lists of numbers as one list (None stays None)."""
    if value is None:
        return None
    return [x for item in value for x in _flat(item)] if isinstance(value, list) else [float(value)]


def differences(record: Path, new: Path) -> list[str]:
    """How run folder ``new`` differs from run folder ``record`` (empty: it does not), one line each:
    :func:`metrics_differences`, then ``labels.json``, ``gates.json``; where the machines differ, the facts
    that differ."""
    a, b = (read_json(Path(folder) / "metrics.json") or {} for folder in (record, new))
    out = metrics_differences(a, b)
    labels = [read_json(Path(folder) / "labels.json") for folder in (record, new)]
    if labels[0] != labels[1]:
        out.append("labels.json differs")
    out += _gate_differences(read_json(Path(record) / "gates.json") or {}, read_json(Path(new) / "gates.json") or {},
                             exact=bool(a.get("weights_sha256") and b.get("weights_sha256")))
    if out:
        out += _machine_differences(a, b)
    return out


def metrics_differences(a: dict, b: dict) -> list[str]:
    """How metrics.json ``b`` differs from the record's ``a`` (empty: it does not), one line each: the weights'
    digest first when both name one, then each test score, the dev scores and curve, the heads kept and any other
    key but time, machine and reproducible mode's pins (:data:`NOT_COMPARED`). Alone where a retraining keeps only
    its metrics (a later round's annex keeps ``retraining.metrics.json``, not the labels and gates)."""
    out = []
    if a.get("weights_sha256") and b.get("weights_sha256") and a["weights_sha256"] != b["weights_sha256"]:
        out.append(f"weights sha256 {a['weights_sha256'][:12]}... -> {b['weights_sha256'][:12]}...")
    for role in ("test", "dev"):
        one, two = a.get(role, {}), b.get(role, {})
        out += [f"{role} {task} {key} {_pair(one.get(task, {}).get(key), two.get(task, {}).get(key))}"
                for task in sorted({*one, *two}) for key in sorted({*one.get(task, {}), *two.get(task, {})})
                if one.get(task, {}).get(key) != two.get(task, {}).get(key)]
    if a.get("heads_kept") != b.get("heads_kept"):
        out.append(f"heads kept {_pair(a.get('heads_kept'), b.get('heads_kept'))}")
    if a.get("history") != b.get("history"):
        out.append("the dev curve (metrics.json's history) differs")
    shown = {"test", "dev", "heads_kept", "history", "weights_sha256", "test_mean", "dev_mean", "reproducible",
             *NOT_COMPARED}  # reproducible mode's pins: with the machine, in differences()
    return out + [f"metrics.json's {key} {_pair(a.get(key), b.get(key))}" for key in sorted({*a, *b} - shown)
                  if a.get(key) != b.get(key)]


def _gate_differences(g: dict, h: dict, exact: bool) -> list[str]:
    """``gates.json`` compared: every key exactly, the float values (``values``, ``expected_l0``) exactly
    when both runs name their weights (then they are the same weights or not), else to
    :data:`GATE_TOLERANCE` relative (an older record's float32 gates may differ in the last bit while
    every score is the same)."""
    g, h = dict(g), dict(h)
    close = {key: [m.pop(key, None) for m in (g, h)] for key in ("values", "expected_l0")}
    out = [f"gates.json's {k} differs" for k in sorted({*g, *h}) if g.get(k) != h.get(k)]
    for key, (x, y) in close.items():
        x, y = _flat(x), _flat(y)
        if x == y:
            continue
        if exact or x is None or y is None or len(x) != len(y) or any(
                abs(p - q) > GATE_TOLERANCE * max(1.0, abs(p)) for p, q in zip(x, y)):
            out.append(f"gates.json's {key} differs")
    return out


def _machine_differences(a: dict, b: dict) -> list[str]:
    """Where two records' machines (and reproducible mode's pins) differ, and where the earlier processes of a
    resumed new run ran when that was elsewhere: a line each (none when alike)."""
    ma, mb = ({**(m.get("machine") or {}), **{f"reproducible.{k}": v for k, v in (m.get("reproducible") or {}).items()}}
              for m in (a, b))
    out = []
    if ma != mb and not a.get("machine"):
        out.append("the record does not say where it was trained (trained again on "
                   + ", ".join(f"{k} {mb[k]}" for k in sorted(mb)) + ")")
    elif ma != mb:
        out.append("trained on another machine: " + ", ".join(f"{k} {ma.get(k, '?')} -> {mb.get(k, '?')}"
                                                               for k in sorted({*ma, *mb}) if ma.get(k) != mb.get(k)))
    here = b.get("machine") or {}
    for part in b.get("resumed", []):  # trained again in several processes: where the earlier ones ran, if elsewhere
        there = part.get("machine") or {}
        if there != here:
            out.append(f"resumed: {part.get('seconds', '?')} s of it ran with " + ", ".join(
                f"{k} {there.get(k, '?')}" for k in sorted({*there, *here}) if there.get(k) != here.get(k)))
    return out


def check_init(record: Path, cfg) -> None:
    """A record that started from ``init=`` can be reproduced only from the same weights: the init run
    must be there, and hold the weights the record names (``init_weights_sha256``); else a ConfigError."""
    if not cfg.get("init"):
        return
    init = Path(cfg.init)
    if not (init / "model.safetensors").is_file():
        raise ConfigError(f"{record} started from init={init}, whose weights (model.safetensors) are not here: "
                          "it cannot be trained again without them")
    want = (read_json(record / "metrics.json") or {}).get("init_weights_sha256")
    have = file_sha256(init / "model.safetensors")
    if want and want != have:
        raise ConfigError(f"{record} started from weights with sha256 {want[:12]}..., and {init}/model.safetensors "
                          f"is {have[:12]}...: trained from other weights it cannot reproduce")


def reproduce(record: str | Path, out: str | Path | None = None, keep: bool = False, progress: bool = False) -> Reproduction:
    """Train the config of run folder ``record`` again and compare the two (:func:`differences`).

    Args:
        record: a finished run folder (``config.yaml`` and ``metrics.json``).
        out: where to train it again (default: a temporary folder, removed afterwards). An unfinished run
            already there (a reproduction that was stopped) is resumed; a finished one is compared as it is.
        keep: keep the new weights. When the run reproduced and ``record`` has no ``model.safetensors``
            (the study commits records without weights), the new, identical weights are copied into it;
            when it did not, the new run stays in ``out`` (by default a hidden folder beside the record,
            ``.<name>.reproduced``). Default False: nothing is kept (a given ``out`` is never removed).
        progress: progress bars while training (default off).

    The caller sets the threads and kernels before torch is imported (the ``reproduce`` command does).
    """
    record = check_record(record, key="run")
    cfg = load_saved_config(record / "config.yaml")
    check_init(record, cfg)
    given_out = out is not None
    if out is None:
        out = record.parent / f".{record.name}.reproduced" if keep else Path(tempfile.mkdtemp(prefix="reproduce-")) / "run"
    out = Path(out)
    started = (out / "config.yaml").is_file()
    if started and not is_finished_run(out) and load_saved_config(out / "config.yaml").get("seed") != cfg.get("seed"):
        raise ConfigError(f"config key 'out': {out} holds another run; give another out=")
    cfg.run_dir, cfg.resume, cfg.seeds = str(out), started, []
    cfg.wandb.mode = "disabled"
    cfg.train.progress = progress
    if not is_finished_run(out):  # training imported only here: a finished run is compared without torch
        from mtl_heads.training.experiment import INHERITED, run_config

        run_config(cfg, list(INHERITED) + ["resume", "run_dir"])  # INHERITED: the record's values, not its init run's
    result = Reproduction(record, out, differences(record, out),
                          digest=(read_json(record / "metrics.json") or {}).get("weights_sha256"))
    if keep and result.reproduced and not (record / "model.safetensors").exists():
        shutil.copyfile(out / "model.safetensors", record / "model.safetensors")
        result.kept = record
    elif keep and not result.reproduced:
        result.kept = out
    if not given_out and result.kept != out:  # a folder of its own choosing: the temporary one, or the hidden one
        shutil.rmtree(out if keep else out.parent, ignore_errors=True)
    return result
