"""The W&B layout: a tiny training run and its head removal logged offline, then read back from the
offline run's ``.wandb`` file (a LevelDB-style log of ``wandb_internal_pb2.Record`` protobufs) and
its ``files/`` folder: name, group, job type, tags, config, per-epoch keys, gate table and image."""
import json
import struct
import time
from pathlib import Path

import pytest
import torch

from mtl_heads.training.experiment import run
from mtl_heads.training.tracking import resolve_mode

wandb = pytest.importorskip("wandb")


# --- reading an offline run back -----------------------------------------------------------------
def read_records(path: Path):
    """The ``Record`` protobufs of a ``run-<id>.wandb`` file, in order.

    Format: a 7-byte header (``:W&B``, magic, version), then 32 KiB blocks of chunks, each a 7-byte
    header (crc32, length, type: 1 full, 2 first, 3 middle, 4 last) and its data; a block's tail
    shorter than a chunk header is padding.
    """
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B", f"{path} is not a W&B log"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if kind == 0 and length == 0:  # zero padding to the end of the block
            pos += left
            continue
        pending += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(pending)
            pending = b""
            yield record


def _items(items) -> dict:
    """``{key: value}`` of history/summary items (nested keys joined with '.', JSON values decoded)."""
    out = {}
    for item in items:
        key = item.key or ".".join(item.nested_key)
        out[key] = json.loads(item.value_json)
    return out


def _complete_log(run_dir: Path, timeout: float = 60.0) -> Path:
    """The run's ``.wandb`` file once it holds its ``exit`` record: W&B's service process may still be
    flushing it for a moment after ``run.finish()`` returns."""
    deadline = time.monotonic() + timeout
    while True:
        logs = list(run_dir.glob("run-*.wandb"))
        try:
            if len(logs) == 1 and any(r.WhichOneof("record_type") == "exit" for r in read_records(logs[0])):
                return logs[0]
        except Exception:  # noqa: BLE001 -- a chunk half written: read again
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{run_dir}: no complete run-*.wandb file after {timeout} s")
        time.sleep(0.2)


def read_offline_run(folder: Path, which: int | None = None) -> dict:
    """The run record (id, name, group, job type, tags, config), history rows, summary and files of the
    one offline W&B run under ``folder/wandb`` (``which``: the index of one of several, oldest first)."""
    folders = sorted((folder / "wandb").glob("offline-run-*"))  # offline-run-<time>-<id>: by time
    [run_dir] = folders if which is None else [folders[which]]
    result = {"history": [], "summary": {}, "files": run_dir / "files"}
    for record in read_records(_complete_log(run_dir)):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            r = record.run
            result.update(id=r.run_id, name=r.display_name, group=r.run_group, job_type=r.job_type,
                          tags=list(r.tags), config={i.key: json.loads(i.value_json) for i in r.config.update})
        elif kind == "history":
            result["history"].append(_items(record.history.item))
        elif kind == "summary":
            result["summary"].update(_items(record.summary.update))
    return result


# --- the runs ------------------------------------------------------------------------------------
@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))


@pytest.fixture
def trained(offline, tiny_encoder_dir, tmp_path):
    """A 2-epoch STL pos run on the tiny encoder, logged offline, in experiment ``exp-x``."""
    folder = tmp_path / "exp-x" / "seed3"
    run([f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 24, dev: 8, test: 8}", "train.epochs=2",
         "train.batch_size=8", "train.eval_batch_size=16", "train.progress=false", "train.select=last",
         "tasks=pos", "seed=3", "experiment=exp-x", f"run_dir={folder}", "wandb.mode=offline", "wandb.tags=[mine]"])
    return folder


def test_training_run_layout(trained, tiny_encoder_dir):
    logged = read_offline_run(trained)
    assert logged["id"] == (trained / "wandb_id").read_text().strip()
    assert logged["name"] == "seed3" and logged["group"] == "exp-x" and logged["job_type"] == "train"
    assert set(logged["tags"]) == {"mine", "pos", "stl", "prune:none", f"encoder:{tiny_encoder_dir.name}", "seed:3"}
    config = logged["config"]
    assert config["tasks"] == ["pos"] and config["seed"] == 3 and config["experiment"] == "exp-x"
    assert config["train"]["epochs"] == 2 and config["encoder"]["name"] == str(tiny_encoder_dir)

    epochs = [row for row in logged["history"] if "epoch" in row]
    assert [row["epoch"] for row in epochs] == [1, 2]
    metrics = json.loads((trained / "metrics.json").read_text())
    for row, saved in zip(epochs, metrics["history"]):
        assert row["dev/pos/accuracy"] == pytest.approx(saved["dev"]["pos"]["accuracy"])
        assert row["dev/mean"] == pytest.approx(saved["dev_mean"])
        assert row["gates/table._type"] == "table-file" and row["gates/heatmap._type"] == "image-file"
        assert row["gates/kept"] == 8 and "gates/L1H3" in row

    last = epochs[-1]
    gates = json.loads((trained / "gates.json").read_text())["values"]  # select=last: the last epoch's gates
    table = json.loads((logged["files"] / last["gates/table.path"]).read_text())
    assert table["columns"] == ["layer", "head", "gate"] and len(table["data"]) == 2 * 4
    for layer, head, value in table["data"]:
        assert value == pytest.approx(gates[layer][head], abs=1e-6)
        assert last[f"gates/L{layer}H{head}"] == pytest.approx(gates[layer][head], abs=1e-6)
    image = logged["files"] / last["gates/heatmap.path"]
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and last["gates/heatmap.width"] > 100
    assert logged["summary"]["test/pos/accuracy"] == pytest.approx(metrics["test"]["pos"]["accuracy"])


def test_head_removal_offline_is_a_run_of_its_own_linked_to_the_training(trained, capsys):
    """Offline, python -m mtl_heads remove logs to a run of its own (W&B cannot resume an offline run, and
    syncing two offline folders of one id has replaced the first's history): the training's group and tags
    plus ``removal``, the training's id in its config, its keys under removal/; the training's run is untouched."""
    from mtl_heads.commands.remove import main

    assert main([str(trained), f"out={trained / 'removal'}", "wandb.mode=offline", "check_sentences=4"]) == 0
    run_id = (trained / "wandb_id").read_text().strip()
    assert f"linked to the training's {run_id}" in capsys.readouterr().out
    training, logged = read_offline_run(trained), read_offline_run(trained / "removal")
    assert len(list((trained / "wandb").glob("offline-run-*"))) == 1  # no second folder with the training's id
    assert logged["id"] != run_id and logged["config"]["removal"]["training_run"] == run_id
    assert logged["name"] == "seed3-removal" and logged["group"] == training["group"] == "exp-x"
    assert logged["job_type"] == "removal" and set(logged["tags"]) == set(training["tags"]) | {"removal"}
    assert logged["config"]["removal"]["run"] == str(trained) and logged["config"]["tasks"] == ["pos"]
    assert logged["summary"]["removal/heads_kept"] == 8 and logged["summary"]["removal/heads_total"] == 8
    assert logged["summary"]["removal/max_diff/reloaded"] < 1e-4
    [row] = [r for r in logged["history"] if "removal/gates/table._type" in r]
    assert row["removal/gates/heatmap._type"] == "image-file" and row["removal/heads_per_layer._type"] == "table-file"
    last = max(r["_step"] for r in training["history"] if "_step" in r)
    assert int((trained / "wandb_step").read_text()) == last
    assert not any(key.startswith("removal/") for r in training["history"] for key in r)


def test_head_removal_online_continues_the_training_run(trained, monkeypatch):
    """Online, the removal continues the training's run: its id, its folder, its name and job type, at the
    step after the training's last (W&B itself is replaced here: no network in tests)."""
    from omegaconf import OmegaConf

    from mtl_heads.config import load_saved_config
    from mtl_heads.training import tracking

    assert tracking.attaches("online", "abc") and not tracking.attaches("offline", "abc")
    assert not tracking.attaches("online", "") and not tracking.attaches("disabled", "abc")
    calls = []
    monkeypatch.setattr(tracking, "start_run", lambda *args, **kwargs: calls.append((args, kwargs)))
    (trained / "wandb_step").write_text("41")
    cfg = load_saved_config(trained / "config.yaml")
    tracking.log_head_removal(OmegaConf.create({"mode": "online", "project": "p"}), trained, cfg, trained / "removal",
                              torch.ones(2, 4), [4, 4], {"heads_kept": 8}, {"threshold": 1e-3})
    [(args, kwargs)] = calls
    section, folder, job, config = args
    assert kwargs["run_id"] == (trained / "wandb_id").read_text().strip() and folder == trained
    assert job == "train" and kwargs["name"] == "seed3" and kwargs["extra_tags"] == ("removal",)
    assert config["removal"]["training_run"] == kwargs["run_id"]


def test_head_removal_of_a_run_trained_without_wandb(trained):
    """A run without a W&B id (trained with wandb.mode=disabled) gets a removal run of its own."""
    from mtl_heads.commands.remove import main

    (trained / "wandb_id").unlink()
    assert main([str(trained), "wandb.mode=offline", "check_sentences=4"]) == 0  # into the default <run>/removal
    logged = read_offline_run(trained / "removal")
    assert logged["name"] == "seed3-removal" and logged["group"] == "exp-x" and logged["job_type"] == "removal"
    assert {"removal", "pos", "seed:3", "mine"} <= set(logged["tags"])
    assert logged["id"] != read_offline_run(trained)["id"] and logged["summary"]["removal/heads_kept"] == 8


def test_auto_mode_follows_the_environment(monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert resolve_mode("auto") == "disabled" and resolve_mode("offline") == "offline"
    monkeypatch.delenv("WANDB_MODE")
    assert resolve_mode("auto") == "offline"
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    assert resolve_mode("auto") == "online"


def test_probe_run_layout(trained, tmp_path):
    """A probe of a training run joins the run's group and carries its tags; its summary holds the
    report's per-label scores."""
    from mtl_heads.commands.probe import run as probe

    folder = probe([f"model={trained}", "data.demo_sizes={train: 8, dev: 8, test: 8}", "probes=[pos,dep]",
                    "progress=false", "batch_size=8", f"out={tmp_path / 'probe'}", "wandb.mode=offline"])
    logged = read_offline_run(folder)
    assert logged["id"] == (folder / "wandb_id").read_text().strip()
    assert logged["group"] == "exp-x" and logged["job_type"] == "probe" and logged["name"] == "probe"
    assert {"mine", "pos", "stl", "seed:3"} <= set(logged["tags"])
    assert logged["config"]["probe"]["model"] == str(trained)
    assert json.loads((folder / "report.json").read_text())["model_kind"] == "run"
    assert any(key.startswith("pos/") for key in logged["summary"]) and any(k.startswith("dep/") for k in logged["summary"])
    row = next(r for r in logged["history"] if "pos/summary._type" in r)
    assert row["pos/summary._type"] == "table-file" and row["dep/dep/heatmap._type"] == "image-file"
