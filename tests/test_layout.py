"""The floors of the code run one way (README, *Layout*): every import, a function-local one too, goes to
the module's own floor or one below it. A module on no floor fails, so a new package is placed on purpose."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# bottom to top; a module belongs to the floor of the longest prefix that names it
FLOORS = [
    ("base", ["mtl_heads", "mtl_heads.config", "mtl_heads.files", "mtl_heads.folders", "mtl_heads.progress"]),
    ("stats", ["mtl_heads.stats"]),
    ("data", ["mtl_heads.data"]),
    ("model", ["mtl_heads.model"]),
    ("tasks, probes", ["tasks", "probes"]),
    ("figures", ["mtl_heads.figures"]),
    ("records", ["mtl_heads.records"]),
    ("gates", ["mtl_heads.gates"]),
    ("training, reports", ["mtl_heads.training", "mtl_heads.reports"]),
    ("study", ["mtl_heads.study"]),
    ("analysis", ["mtl_heads.analysis"]),
    ("commands", ["mtl_heads.commands", "mtl_heads.cli", "mtl_heads.__main__", "mtl_heads.train"]),
]
# the floors whose rooms stand side by side: on one floor, and none imports another (training writes runs,
# reports read them; what both draw is in figures, below)
SIDE_BY_SIDE = {"tasks, probes", "training, reports"}
STATS_LIBRARIES = {"numpy", "scipy"}  # what mtl_heads.stats may import beyond the standard library and base


def modules(root: Path, packages) -> dict[str, Path]:
    """``{dotted name: file}`` of every module under ``root``'s ``packages``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def imports(name: str, path: Path, known) -> set[str]:
    """The project modules that module ``name`` imports anywhere in its body (relative imports resolved)."""
    is_package = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if is_package else name.split(".")[:-1]
                parts = parts[:len(parts) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            names = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for target in names:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def floor_of(name: str, floors) -> tuple[int, str] | None:
    """(floor index, the prefix that placed it) of module ``name``; None when no floor names it."""
    best = None
    for index, (_, prefixes) in enumerate(floors):
        for prefix in prefixes:
            if (name == prefix or name.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[1])):
                best = (index, prefix)
    return best


def upward_imports(root: Path, floors=FLOORS, side_by_side=SIDE_BY_SIDE) -> list[str]:
    """Each import that breaks the floors, as ``module -> module (floor -> floor)``; a module on no floor too."""
    packages = sorted({p.split(".")[0] for _, prefixes in floors for p in prefixes})
    known = modules(root, packages)
    wrong = []
    for name, path in known.items():
        here = floor_of(name, floors)
        if here is None:
            wrong.append(f"{name}: on no floor")
            continue
        for target in sorted(imports(name, path, known)):
            there = floor_of(target, floors)
            if there is None:
                continue  # told once, as its own module
            upward = there[0] > here[0]
            across = there[0] == here[0] and here[1] != there[1] and floors[here[0]][0] in side_by_side
            if upward or across:
                wrong.append(f"{name} -> {target} ({floors[here[0]][0]} -> {floors[there[0]][0]})")
    return wrong


def test_every_import_runs_down_the_floors():
    assert upward_imports(REPO) == []


def test_stats_import_only_numpy_scipy_and_the_base():
    """The statistics stand on their own: below every floor but the base, and of the libraries only numpy and
    scipy (no pandas, no torch), so that a statistic is a function of arrays wherever it is used."""
    outside = set()
    for path in sorted((REPO / "mtl_heads" / "stats").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                tops = [(node.module or "").split(".")[0]]
            else:
                continue
            outside |= {f"{path.name}: {t}" for t in tops
                        if t not in sys.stdlib_module_names | STATS_LIBRARIES | {"mtl_heads", "__future__"}}
    assert outside == set()


def test_the_check_finds_an_upward_import_a_sideways_one_and_an_unplaced_module(tmp_path):
    (tmp_path / "mtl_heads" / "model").mkdir(parents=True)
    (tmp_path / "mtl_heads" / "reports").mkdir()
    (tmp_path / "tasks").mkdir()
    (tmp_path / "probes").mkdir()
    (tmp_path / "mtl_heads" / "__init__.py").write_text("")
    (tmp_path / "mtl_heads" / "model" / "__init__.py").write_text("")
    (tmp_path / "mtl_heads" / "model" / "gating.py").write_text(
        "def picture():\n    from ..reports.gate_map import draw  # function-local, relative\n    return draw\n")
    (tmp_path / "mtl_heads" / "reports" / "__init__.py").write_text("")
    (tmp_path / "mtl_heads" / "reports" / "gate_map.py").write_text("from mtl_heads.model import gating\n")
    (tmp_path / "mtl_heads" / "training").mkdir()
    (tmp_path / "mtl_heads" / "training" / "__init__.py").write_text("")
    (tmp_path / "mtl_heads" / "training" / "tracking.py").write_text("from mtl_heads.reports.gate_map import draw\n")
    (tmp_path / "mtl_heads" / "stray.py").write_text("")
    (tmp_path / "tasks" / "__init__.py").write_text("import probes\n")
    (tmp_path / "probes" / "__init__.py").write_text("")
    floors = FLOORS[:1] + [("model", ["mtl_heads.model"]), ("tasks, probes", ["tasks", "probes"]),
                           ("training, reports", ["mtl_heads.training", "mtl_heads.reports"])]
    floors[0] = ("base", ["mtl_heads"])
    assert upward_imports(tmp_path, floors) == [
        "mtl_heads.model.gating -> mtl_heads.reports.gate_map (model -> training, reports)",
        "mtl_heads.training.tracking -> mtl_heads.reports.gate_map (training, reports -> training, reports)",
        "tasks -> probes (tasks, probes -> tasks, probes)",
    ]
    floors[0] = ("base", ["mtl_heads.config"])
    assert "mtl_heads.stray: on no floor" in upward_imports(tmp_path, floors)
