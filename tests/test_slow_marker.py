"""The ``slow`` marker (issue 53, item 11): every integration test and every test of ``conftest.SLOW`` is
``slow``, so that ``python -m pytest -m "not slow"`` is a fast first check; pyproject.toml declares the
marker, the README's test section names the command, and CI (``python -m pytest``) still runs them all."""
import subprocess
import sys
import tomllib

from conftest import SLOW
from helpers import REPO


def slow_tests(request, files: list[str]) -> set[str]:
    """The ``slow`` tests of ``files`` (``tests/<file>::<name>``, parameters as pytest names them): read from this
    session's collection when it holds every one of ``files`` and nothing was deselected (the whole suite, as
    CI runs it), else from ``pytest --collect-only -m slow`` on them in a fresh process (this file run alone,
    or ``-m "not slow"``, which leaves the slow tests out of the session)."""
    items, option = request.session.items, request.config.option
    whole = not (option.markexpr or option.keyword or getattr(option, "deselect", None))
    if whole and {item.nodeid.split("::")[0] for item in items} >= set(files):
        return {item.nodeid for item in items if item.nodeid.split("::")[0] in files and item.get_closest_marker("slow")}
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "-m", "slow", *files], capture_output=True, text=True, cwd=REPO)
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def test_slow_names_the_integration_tests_and_the_slowest_others(request):
    files = sorted({f"tests/{name.split('::')[0]}" for name in SLOW} | {"tests/test_integration.py"})
    collected = slow_tests(request, files)
    assert {f"tests/{name}" for name in SLOW} <= collected, "a test of conftest.SLOW is gone or renamed"
    assert {"tests/test_integration.py::test_packaged_encoder_learns_the_demo_corpus",
            "tests/test_readme.py::test_readme_tour_runs", "tests/test_readme.py::test_decoder_guide_runs"} <= collected
    assert "tests/test_readme.py::test_relative_links_resolve[README.md]" not in collected  # a fast one stays
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    assert any(marker.startswith("slow:") for marker in markers)
    assert 'python -m pytest -m "not slow"' in (REPO / "README.md").read_text()
    assert "python -m pytest\n" in (REPO / ".ci" / "run").read_text()  # CI: every test, the slow ones too
