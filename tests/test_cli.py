"""One command line: python -m mtl_heads <command>, key=value everywhere, the old --flags as aliases,
one plain-text -h per command."""
import subprocess
import sys

import pytest

from mtl_heads.__main__ import main as dispatch
from mtl_heads.cli import Arguments, config_file, overrides, plain, yaml_keys
from mtl_heads.commands import COMMANDS
from mtl_heads.config import ConfigError


def test_dispatcher_lists_every_command(capsys):
    assert dispatch(["-h"]) == 0
    listed = capsys.readouterr().out
    for name in COMMANDS:
        assert f"\n  {name} " in listed
    assert dispatch(["nope"]) == 2 and "unknown command 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_help_is_plain_text_with_keys(name, capsys):
    assert dispatch([name, "-h"]) == 0
    text = capsys.readouterr().out
    assert "``" not in text and ":mod:" not in text and ":func:" not in text
    assert "[" in text.split("\n\n")[-1] or "Old options" in text  # the keys with their defaults


def test_help_lists_each_key_of_the_config():
    for name in ("compare", "gates", "remove", "report", "claims"):
        keys = [k for k, default, _ in yaml_keys(config_file(name)) if default is not None]
        text = subprocess.run([sys.executable, "-m", "mtl_heads", name, "-h"], capture_output=True, text=True).stdout
        for key in keys:
            assert f"\n  {key} " in text, (name, key)


ARGS = Arguments(config_file("compare"), positional="runs", many=True, repeat=frozenset({"test"}),
                 flags={"--out": "out", "--plot": "plot", "--test": "test"}, switches=frozenset({"--plot"}))


def test_old_flags_are_aliases_of_keys():
    new = overrides(["a", "b", "out=o", "plot=true", "test=x,y", "test=all"], ARGS)
    old = overrides(["a", "b", "--out", "o", "--plot", "--test", "x,y", "--test=all"], ARGS)
    assert new == old == [("runs", ["a", "b"]), "out=o", "plot=true", ("test", ["x,y", "all"])]


def test_greedy_flag_takes_values_up_to_the_next_key():
    args = Arguments(config_file("gates"), positional="runs", many=True, greedy=frozenset({"--probes"}),
                     flags={"--probes": "probes", "--out": "out"})
    assert overrides(["r", "--probes", "p1", "p2", "out=o"], args) == [("runs", ["r"]), "probes=p1,p2", "out=o"]


def test_bad_arguments_are_config_errors():
    with pytest.raises(ConfigError, match="unknown option"):
        overrides(["--nope", "x"], ARGS)
    with pytest.raises(ConfigError, match="expected a value"):
        overrides(["--out"], ARGS)
    single = Arguments(config_file("remove"), positional="run")
    with pytest.raises(ConfigError, match="argument 'b': expected key=value"):
        overrides(["a", "b"], single)


def test_plain_drops_rest_markup():
    assert plain("``a`` :mod:`mtl_heads.x` `b`\n\nExamples::") == "a mtl_heads.x b\n\nExamples:"


def test_every_command_lives_in_the_commands_package(capsys):
    """The commands stand apart from the library: each one's main is in mtl_heads/commands/ (the EWT
    builder's command once sat in the data layer and imported mtl_heads.cli from there)."""
    assert {module for module, _ in COMMANDS.values()} == {f"mtl_heads.commands.{name}" for name in COMMANDS}
    assert dispatch(["ewt", "outt=x"]) == 2
    assert capsys.readouterr().err == ("error: unknown config key 'outt' (top level has: check, force, out, progress, "
                                       "sources)\n")


def test_the_documented_forms_run_and_train_keeps_its_module():
    """``python -m mtl_heads <command>`` is the documented form of every command; ``python -m mtl_heads.train``
    stays (the set-up's main job), the other per-command modules are gone (the top level shows the architecture)."""
    done = subprocess.run([sys.executable, "-m", "mtl_heads", "compare", "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "Keys (default in brackets" in done.stdout
    done = subprocess.run([sys.executable, "-m", "mtl_heads.train", "-h"], capture_output=True, text=True)
    assert done.returncode == 0 and "tasks" in done.stdout
    import importlib.util

    assert importlib.util.find_spec("mtl_heads.compare") is None


@pytest.mark.parametrize("name", ["remove", "compare", "report"])
def test_help_answers_without_torch(name):
    """-h of remove, compare and report imports neither torch nor transformers (remove -h, then called prune, once
    took 4.8 s: the command module imported the model code at the top; report -h 5.8 s, through the page's probes)."""
    code = ("import sys, io, contextlib\nfrom mtl_heads.__main__ import main\n"
            f"with contextlib.redirect_stdout(io.StringIO()):\n    assert main([{name!r}, '-h']) == 0\n"
            "print(sorted({'torch', 'transformers', 'wandb'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
