"""The module graph: layers, no cycles, no private names, small modules (docs/internals.md, "Layers").

Every module of ``src/actlab`` and of the LeRobot plugin in ``integrations/`` is read with ``ast``; every
``import`` / ``from ... import`` of actlab or of the plugin, at module top and inside functions alike, is an
edge of the module graph (``from actlab.utils import procs`` is an edge to ``actlab.utils.procs``; an
edge goes to the module named, not to the packages above it). On that graph:
- an import that the layer table (``MAY_IMPORT``) does not allow fails, and the table in
  docs/internals.md must say the same as ``MAY_IMPORT``;
- a cycle (two modules importing each other, directly or through others) fails, naming its modules;
- importing another module's ``_private`` name fails;
- a module over ``MAX_LINES`` lines fails;
- an actlab import inside a function without a one-line reason fails: a ``#`` comment on the import's
  line or on the line above it (above the first of a run of consecutive imports, for a block). The CLI is
  exempt (it imports lazily everywhere, by rule, so that ``actlab --help`` stays light).

Beside the graph: no file of the repository points at the design notes kept outside it (a reference, an
architecture and a style file, or a numbered section of one): a fact is said where it is used, or by
naming a public source or a doc in docs/.
"""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "actlab"
PLUGIN = ROOT / "integrations" / "lerobot_policy_actlab" / "lerobot_policy_actlab"
PLUGIN_NAME = "lerobot_policy_actlab"  # its layer: above everything in src/actlab, imported by none

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
    PLUGIN_NAME: {"errors", "utils", "policies", "sim", "lerobot"},
}  # fmt: skip

MAX_LINES = 900


@dataclass(frozen=True)
class Module:
    name: str  # dotted: actlab.evaluation.harness, actlab.evaluation (an __init__), lerobot_policy_actlab.x
    path: Path
    tree: ast.Module
    lines: list[str]

    @property
    def package(self) -> str:
        """The layer the module belongs to: actlab.<package>... or the plugin."""
        parts = self.name.split(".")
        return parts[1] if parts[0] == "actlab" and len(parts) > 1 else parts[0]

    @property
    def rel(self) -> str:
        return str(self.path.relative_to(ROOT))


@dataclass(frozen=True)
class Edge:
    source: Module
    target: str  # a module name of the graph
    names: tuple[str, ...]  # the names taken (from ... import a, b); () for a plain import
    node: ast.Import | ast.ImportFrom
    in_function: bool


def _module_name(path: Path) -> str:
    base = SRC.parent if path.is_relative_to(SRC) else PLUGIN.parent
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _read_modules() -> dict[str, Module]:
    paths = sorted(SRC.rglob("*.py")) + sorted(PLUGIN.rglob("*.py"))
    modules = {}
    for path in paths:
        text = path.read_text()
        tree = ast.parse(text, filename=str(path))
        name = _module_name(path)
        modules[name] = Module(name, path, tree, text.splitlines())
    return modules


MODULES = _read_modules()
OURS = ("actlab", PLUGIN_NAME)


def _imports(tree: ast.Module) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import node of the tree, in ``ast.walk`` order, with whether it sits inside a function body.
    One pass over the tree (walking each function's subtree again, and the whole tree in two of the tests,
    cost ~2 s of CPU)."""
    found: list[tuple[ast.Import | ast.ImportFrom, bool]] = []
    queue = deque([(tree, False)])
    while queue:
        node, in_function = queue.popleft()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            found.append((node, in_function))
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        queue.extend((child, inner) for child in ast.iter_child_nodes(node))
    return found


IMPORTS = {name: _imports(m.tree) for name, m in MODULES.items()}


def _target(dotted: str) -> str | None:
    """The longest module of the graph that ``dotted`` names or lies in."""
    parts = dotted.split(".")
    while parts:
        if ".".join(parts) in MODULES:
            return ".".join(parts)
        parts.pop()
    return None


def _edges(module: Module) -> list[Edge]:
    edges = []
    for node, in_function in IMPORTS[module.name]:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in OURS:
                continue
            base = _target(node.module)
            assert base is not None, f"{module.rel}:{node.lineno}: no module {node.module}"
            plain = []
            for alias in node.names:  # from pkg import submodule: an edge to the submodule itself
                sub = f"{node.module}.{alias.name}"
                if sub in MODULES:
                    edges.append(Edge(module, sub, (), node, in_function))
                else:
                    plain.append(alias.name)
            if plain:
                edges.append(Edge(module, base, tuple(plain), node, in_function))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    target = _target(alias.name)
                    assert target is not None, f"{module.rel}:{node.lineno}: no module {alias.name}"
                    edges.append(Edge(module, target, (), node, in_function))
    return edges


EDGES = [e for m in MODULES.values() for e in _edges(m)]


def _where(e: Edge) -> str:
    return f"{e.source.rel}:{e.node.lineno}"


def test_every_package_is_in_the_table():
    packages = {m.package for m in MODULES.values()} - {"actlab"}
    assert packages == set(MAY_IMPORT), "a new package needs a row in MAY_IMPORT and in docs/internals.md"


def test_no_package_imports_a_package_above_it():
    wrong = []
    for e in EDGES:
        pkg = e.source.package
        target = MODULES[e.target].package if e.target != "actlab" else "actlab"
        if target in (pkg, "actlab"):
            continue  # itself, actlab.__version__
        if target not in MAY_IMPORT[pkg]:
            wrong.append(f"{_where(e)}: {pkg} imports {e.target}")
    assert not wrong, "imports against the layers (docs/internals.md):\n" + "\n".join(wrong)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself), Tarjan."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in edges.get(v, ()):
                found.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_cycles():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"a"}}) == [["a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle():
    graph: dict[str, set[str]] = {}
    for e in EDGES:
        graph.setdefault(e.source.name, set()).add(e.target)
    cycles = _cycles(graph)
    lines = []
    for comp in cycles:
        members = set(comp)
        via = [
            f"  {_where(e)} -> {e.target}" for e in EDGES if e.source.name in members and e.target in members
        ]
        lines.append("cycle: " + " <-> ".join(comp) + "\n" + "\n".join(via))
    assert not cycles, "modules importing each other, directly or through others:\n" + "\n".join(lines)


def test_no_private_names_from_other_modules():
    wrong = []
    for e in EDGES:
        private = [n for n in e.names if n.startswith("_") and not n.startswith("__")]
        if private:
            wrong.append(f"{_where(e)}: {e.source.name} imports {', '.join(private)} from {e.target}")
    assert not wrong, "make the name public (or move it) instead:\n" + "\n".join(wrong)


def test_no_module_over_the_line_limit():
    long = [f"{m.rel}: {len(m.lines)} lines" for m in MODULES.values() if len(m.lines) > MAX_LINES]
    assert not long, f"modules over {MAX_LINES} lines (split them along a seam):\n" + "\n".join(long)


def _has_reason(module: Module, node: ast.Import | ast.ImportFrom, import_lines: set[int]) -> bool:
    """A ``#`` comment on the import's line, or on the line above it (or above its run of imports)."""
    first = node.lineno
    if "#" in module.lines[first - 1]:
        return True
    above = first - 1
    while above in import_lines:  # a block of imports under one comment
        above -= 1
    return above >= 1 and module.lines[above - 1].strip().startswith("#")


def test_every_import_inside_a_function_says_why():
    missing = []
    for m in MODULES.values():
        if m.package == "cli":
            continue
        import_lines = {
            line
            for node, _ in IMPORTS[m.name]
            for line in range(node.lineno, (node.end_lineno or node.lineno) + 1)
        }
        seen = set()
        for e in EDGES:
            if e.source is m and e.in_function and id(e.node) not in seen:
                seen.add(id(e.node))
                if not _has_reason(m, e.node, import_lines):
                    missing.append(_where(e))
    assert not missing, (
        "an actlab import inside a function needs a one-line reason (a # comment on its line or the line "
        "above: lazy torch, a cycle it avoids, ...):\n" + "\n".join(sorted(missing))
    )


def test_the_reason_rule_on_a_written_out_module():
    text = (
        "def f():\n"
        "    from actlab.a import x  # lazy: torch\n"  # on its line
        "    # lazy: a block under one comment\n"
        "    from actlab.b import y\n"
        "    from actlab.c import (\n"
        "        z,\n"
        "    )\n"
        "    n = 1\n"
        "    from actlab.d import w\n"  # none: the line above is code
    )
    tree = ast.parse(text)
    module = Module("actlab.t", SRC / "t.py", tree, text.splitlines())
    nodes = [n for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    lines = {i for n in nodes for i in range(n.lineno, (n.end_lineno or n.lineno) + 1)}
    assert [_has_reason(module, n, lines) for n in nodes] == [True, True, True, False]


def test_no_relative_imports():
    """Relative imports would slip past the checks above; actlab spells every import out."""
    relative = [
        f"{m.rel}:{node.lineno}"
        for m in MODULES.values()
        for node, _ in IMPORTS[m.name]
        if isinstance(node, ast.ImportFrom) and node.level > 0
    ]
    assert not relative


def test_the_docs_table_says_the_same():
    text = (ROOT / "docs" / "internals.md").read_text()
    section = text.split("## Layers", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for m in re.finditer(r"^\| `(?:actlab\.)?(\w+)`[^|]*\|[^|]*\| ([^|]*) \|$", section, flags=re.M):
        names = re.findall(r"`(\w+)`", m.group(2))
        rows[m.group(1)] = set(names)
    assert rows == MAY_IMPORT


def test_test_modules_have_unique_basenames():
    # tests/ has no __init__.py files: pytest imports each test module by its basename, so two files
    # of one name in two folders stop the whole suite at collection ("import file mismatch").
    seen: dict[str, list[str]] = {}
    for f in sorted((ROOT / "tests").rglob("test_*.py")):
        seen.setdefault(f.name, []).append(str(f.relative_to(ROOT)))
    dups = {name: files for name, files in seen.items() if len(files) > 1}
    assert not dups, f"test modules sharing a basename (rename one): {dups}"


# Pointers at notes outside the repository: one of these names followed by ".md" or by a section sign
# (with or without a space), the names under their shared/ folder, or an issue tracker's number ("issue"
# and a number: the tracker is not part of the repository either). The examples below are spelled in
# pieces so that this file passes its own test.
_NOTES = "REFERENCE|ARCHITECTURE|STYLE"
OUTSIDE_POINTER = re.compile(
    rf"\b(?:{_NOTES})(?:\.md\b|\s*\u00a7)|\bshared/(?:{_NOTES})|\bissues? #?\d", re.IGNORECASE
)
POINTER_SCOPE = ("src", "tests", "docs", "integrations", "README.md")


def _pointers(text: str) -> list[int]:
    return [n for n, line in enumerate(text.splitlines(), 1) if OUTSIDE_POINTER.search(line)]


def test_the_pointer_rule_on_written_out_lines():
    pointing = [
        "see REFERENCE \u00a73",
        "(REFERENCE\u00a71)",
        "as STYLE" + ".md says",
        "ARCHITECTURE" + ".md",
        "(issue" + " 36)",
        "Issue" + " #12",
    ]
    fine = ["LEROBOT_REFERENCE_SAMPLES_PER_S = 160.0", "CODEC_PREFERENCE", "the reference figure", "/dev/shm"]
    assert _pointers("\n".join(pointing)) == [1, 2, 3, 4, 5, 6]
    assert _pointers("\n".join(fine)) == []
    assert _pointers("shared/" + "STYLE") == [1]


def test_no_file_points_at_notes_outside_the_repository():
    found = []
    for top in POINTER_SCOPE:
        path = ROOT / top
        files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
        for f in files:
            if "__pycache__" in f.parts or any(part.endswith(".egg-info") for part in f.parts):
                continue
            data = f.read_bytes()
            if b"\0" in data:
                continue  # binary (weights, images)
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            found += [f"{f.relative_to(ROOT)}:{n}" for n in _pointers(text)]
    assert not found, f"say the fact here, or name a public source or docs/*.md, instead of: {found}"
