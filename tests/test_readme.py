"""The README's "Adding a task" example is real: one module, one registry line, it trains."""
import re
import types

from conftest import REPO


def test_readme_task_example_trains(tiny_encoder_dir, tmp_path, monkeypatch):
    import tasks
    from mtl_heads.experiment import run

    readme = (REPO / "README.md").read_text()
    code = re.search(r"```python\n(# tasks/chunk.py\n.*?)```", readme, re.S).group(1)
    module = types.ModuleType("tasks.chunk")
    exec(compile(code, "README.md", "exec"), module.__dict__)
    monkeypatch.setitem(tasks.TASKS, "chunk", module.ChunkTask)
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    metrics = run([f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 24, dev: 8, test: 8}", "train.epochs=1",
                   "train.batch_size=8", "wandb.mode=disabled", "train.progress=false", "tasks=pos,chunk",
                   f"run_dir={tmp_path / 'run'}"])
    assert 0 < metrics["test"]["chunk"]["accuracy"] <= 100
