"""docs/ewt-study.sh: its checks and skips, without training anything."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_compare import make_run

SCRIPT = Path(__file__).resolve().parents[1] / "docs" / "ewt-study.sh"
pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def study(tmp_path, *stages, **env):
    return subprocess.run(["bash", str(SCRIPT), *stages], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "STUDY": str(tmp_path / "study"), "SEEDS": "1", **env})


def test_script_parses():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0


def test_unknown_stage_and_setting(tmp_path):
    result = study(tmp_path, "train")
    assert result.returncode == 2 and "unknown stage 'train' (baselines probes sp dp budget doc)" in result.stderr
    result = study(tmp_path, "baselines", SETTINGS="pos tagger")
    assert result.returncode == 2 and "SETTINGS: unknown setting 'tagger'" in result.stderr


def test_finished_runs_are_skipped_and_sp_needs_weights(tmp_path):
    """A finished run is not trained again; SP whose baseline has no weights (a later session: weights
    are not committed) is named as failed, with what to do, and nothing is trained."""
    make_run(tmp_path / "study" / "pos" / "seed1", ("pos",), 1)
    result = study(tmp_path, "baselines", "sp", SETTINGS="pos")
    assert f"done: {tmp_path}/study/pos/seed1" in result.stdout
    assert (f"not run: {tmp_path}/study/pos-sp/seed1 needs the weights of {tmp_path}/study/pos/seed1 "
            f"(not committed; train it again: rm -r {tmp_path}/study/pos/seed1)") in result.stdout
    assert result.returncode == 1 and f"failed (see the log above; run the script again to retry): " \
        f"{tmp_path}/study/pos-sp/seed1" in result.stderr
    assert not (tmp_path / "study" / "pos-sp").exists()


def test_doc_stage_reads_only_finished_runs(tmp_path):
    """The doc stage on a partial study: a pruned setting whose only run is still training is left
    out (it made the gates command fail), and every output is written from the finished runs."""
    root = tmp_path / "study"
    for seed in (1, 2):
        make_run(root / "pos" / f"seed{seed}", ("pos",), seed, test={"pos": 90.0 + seed}, experiment="pos")
        make_run(root / "pos-dp" / f"seed{seed}", ("pos",), seed, test={"pos": 89.0 + seed}, experiment="pos-dp",
                 gates=[[1.0, 0.0, 0.9], [0.0, 1.0, 0.2 * seed]], prune={"mode": "dynamic", "lambda": "auto"})
    (root / "pos-sp" / "seed1").mkdir(parents=True)  # started, not finished
    (root / "pos-sp" / "seed1" / "config.yaml").write_text("tasks: [pos]\nseed: 1\n")
    doc = tmp_path / "doc.md"
    doc.write_text("# Study\n<!-- claims:begin -->\n<!-- claims:end -->\n")
    result = study(tmp_path, "doc", DOC=str(doc), WANDB_MODE="disabled")
    assert result.returncode == 0, result.stderr[-2000:]
    for output in ("compare/compare.md", "gates/stem-cells.csv", "report.html", "claims.md"):
        assert (root / output).is_file(), output
    assert "Generated from 4 runs in 2 settings" in doc.read_text()
    assert "pos-sp/seed1 (unfinished run: no metrics.json yet)" in doc.read_text()
