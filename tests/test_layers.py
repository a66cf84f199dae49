"""The package layers: no package imports a package above it (docs/internals.md, "Layers").

Every module's ``import actlab...`` / ``from actlab... import`` statements are read with ``ast`` (at
module top and inside functions alike) and checked against ``MAY_IMPORT``. The table in docs/internals.md
must say the same as ``MAY_IMPORT``, so the picture a reader sees is the one this test enforces.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "actlab"

# What each package may import besides itself, lowest layer first. ``actlab`` itself (its __init__:
# __version__) may be imported by anyone.
MAY_IMPORT: dict[str, set[str]] = {
    "errors": set(),
    "utils": {"errors"},
    "viz": {"errors", "utils"},
    "profiling": {"errors", "utils"},
    "lifecycle": {"errors", "utils"},
    "datasets": {"errors", "utils", "profiling"},
    "policies": {"errors", "utils", "profiling"},
    "sim": {"errors", "utils", "datasets"},
    "training": {"errors", "utils", "viz", "profiling", "lifecycle", "datasets", "policies"},
    "evaluation": {"errors", "utils", "viz", "profiling", "datasets", "policies", "sim"},
    "demo": {
        "errors", "utils", "viz", "profiling", "lifecycle", "datasets", "policies", "sim", "training",
        "evaluation",
    },
    "lerobot": {"errors", "utils", "datasets", "policies", "sim", "evaluation"},
    "rl": {"errors", "utils", "lifecycle", "datasets", "policies", "sim", "evaluation"},
    "cli": {
        "errors", "utils", "viz", "profiling", "lifecycle", "datasets", "policies", "sim", "training",
        "evaluation", "demo", "lerobot", "rl",
    },
}  # fmt: skip


def _package(module_path: Path) -> str:
    parts = module_path.relative_to(SRC).with_suffix("").parts
    return parts[0]


def _imported_packages(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, first component under actlab) of every absolute actlab import in the module."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "actlab":
                continue
            if len(parts) > 1:
                found.append((node.lineno, parts[1]))
            else:  # from actlab import errors / __version__
                found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "actlab" and len(parts) > 1:
                    found.append((node.lineno, parts[1]))
    return found


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py") if p.parent != SRC or p.name != "__init__.py")


def test_every_package_is_in_the_table():
    packages = {_package(p) for p in _modules()}
    assert packages == set(MAY_IMPORT), "a new package needs a row in MAY_IMPORT and in docs/internals.md"


def test_no_package_imports_a_package_above_it():
    wrong = []
    for path in _modules():
        pkg = _package(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        for line, target in _imported_packages(tree):
            if target in (pkg, "__version__") or target not in MAY_IMPORT:
                continue  # itself, actlab.__version__ (a name, not a package)
            if target not in MAY_IMPORT[pkg]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {pkg} imports {target}")
    assert not wrong, "imports against the layers (docs/internals.md):\n" + "\n".join(wrong)


def test_no_relative_imports():
    """Relative imports would slip past the check above; actlab spells every import out."""
    relative = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level > 0:
                relative.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not relative


def test_the_docs_table_says_the_same():
    text = (ROOT / "docs" / "internals.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `actlab\.(\w+)` \|[^|]*\| ([^|]*) \|$", section, flags=re.M):
        names = re.findall(r"`(\w+)`", m.group(2))
        rows[m.group(1)] = set(names)
    assert rows == MAY_IMPORT
