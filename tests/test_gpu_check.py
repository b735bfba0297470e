"""bench/gpu_check.py, the check prepared for a lent GPU, run end to end with ``--dry-run`` on the CPU (a
tiny random BERT, the demo corpus, gloo for NCCL, the CUDA tests skipped), so that it cannot rot between
the stretches that have a GPU; and a budget too small for anything, which skips every section but still
writes the record."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from helpers import REPO

SECTIONS = ["environment", "cuda_tests", "throughput", "removal", "ddp", "real_run"]
TASKS = {"pos", "ner", "dep", "con", "srl"}


def gpu_check(out, *args) -> tuple[subprocess.CompletedProcess, dict, float]:
    """``python bench/gpu_check.py *args`` with ``$OUT`` set to ``out``: the process, its record, its seconds."""
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", *args], cwd=REPO, env={**os.environ, "OUT": str(out)},
                          capture_output=True, text=True, timeout=600)
    return proc, json.loads((out / "gpu-check.json").read_text()), time.perf_counter() - started


def test_dry_run_fills_every_section(tmp_path):
    # about a minute on 2 idle cores, well inside its default budget of 120 s; twice that here (each section's
    # limit with it), so that a CPU busy with other jobs slows the check without failing it
    proc, record, seconds = gpu_check(tmp_path, "--dry-run", "--budget", "240")
    sections = record["sections"]
    failed = {name: e.get("error") for name, e in sections.items() if e["status"] != "ok"}
    assert proc.returncode == 0 and not failed, (failed, proc.stdout[-3000:])
    print(f"\ndry run: {seconds:.0f} s (record: {record['seconds']:.0f} s)")
    assert record["dry_run"] and list(sections) == SECTIONS and record["within_budget"] and record["budget_s"] == 240
    assert set(record["goals"]) == {"seconds", *SECTIONS[1:]}
    for name in SECTIONS:
        assert (tmp_path / "gpu-check-logs" / f"{name}.log").exists(), name
        assert name in proc.stdout  # the table has a row per section
    result = {name: entry["result"] for name, entry in sections.items()}

    assert result["environment"]["cuda_available"] is False and result["environment"]["torch"]

    tests = result["cuda_tests"]  # reported, every one skipped on the CPU
    assert tests["counts"]["skipped"] == len(tests["tests"]) >= 10
    assert all(t["outcome"] == "skipped" and "CUDA" in t["message"] for t in tests["tests"])

    p4 = result["throughput"]
    assert p4["goal"] == 0.8 and p4["batch_mix"]["batches"] == 4 and p4["batch_mix"]["sentences_per_step"] == 8
    assert [s["layers"] for s in p4["sizes"]] == [2, 2] and [s["hidden"] for s in p4["sizes"]] == [32, 64]
    for size in p4["sizes"]:
        assert size["ratio"] > 0 and size["plain"]["sentences_per_s"] > 0 and size["gated"]["sentences_per_s"] > 0
        assert len(size["gated"]["rounds_ms"]) == 2 and size["gated"]["peak_gib"] is None  # no CUDA: no peak

    runs = result["removal"]["runs"]
    assert [r["dtype"] for r in runs] == ["fp32"] and runs[0]["settings"] == 4
    assert {(r["batch"], r["length"]) for r in runs[0]["rows"]} == {(1, 8), (1, 16), (2, 8), (2, 16)}
    assert all(r["FLOP ratio"] == 0.5 for r in runs[0]["rows"])  # 8 of 16 heads kept in both layers together

    worlds = result["ddp"]["worlds"]
    assert set(worlds) == {"1", "2"}
    for world, r in worlds.items():
        assert r["backend"] == "gloo" and r["equal"] and len(r["ranks"]) == int(world), r
        assert all(set(per) == TASKS for per in r["ranks"].values())

    real = result["real_run"]
    assert real["epoch_done"] and real["steps"] == real["steps_per_epoch"] > 0 and real["sentences_per_s"] > 0
    assert set(real["dev_after_epoch_1"]) == TASKS and not real["comparable_with_record"]
    seed1 = real["cpu_record"]["seed1"]  # the committed CPU record of the setting
    assert seed1["epochs"] == 2 and set(seed1["dev_after_epoch_1"]) == TASKS and seed1["dev_mean_after_epoch_1"] > 50


def test_no_time_left_or_no_cuda_skips_sections_and_still_writes_the_record(tmp_path):
    proc, record, _ = gpu_check(tmp_path / "no-time", "--dry-run", "--budget", "1")
    assert proc.returncode == 1
    assert list(record["sections"]) == SECTIONS
    assert all(e["status"] == "skipped" and "no time left" in e["error"] for e in record["sections"].values())
    # the real check on a machine without CUDA: the environment says so, the rest is skipped
    proc, record, _ = gpu_check(tmp_path / "no-cuda", "--only", "environment,throughput")
    assert proc.returncode == 1 and list(record["sections"]) == ["environment", "throughput"]
    assert record["sections"]["environment"]["status"] == "ok"
    assert record["sections"]["throughput"]["status"] == "skipped"
    assert "no CUDA device" in record["sections"]["throughput"]["error"]
    proc = subprocess.run([sys.executable, "bench/gpu_check.py", "--only", "nonsense"], cwd=REPO,
                          env={**os.environ, "OUT": str(tmp_path / "bad")}, capture_output=True, text=True)
    assert proc.returncode == 2 and "unknown section(s) nonsense" in proc.stderr
