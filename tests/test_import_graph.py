"""The package's import graph has no cycle, and the daemon client stays light.

The graph is read from the source (every import, also those inside functions, except
under ``if TYPE_CHECKING``); importing ``a.b.c`` also runs ``a/__init__`` and
``a/b/__init__``, so those are edges too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import jarvisd

PACKAGE = Path(jarvisd.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    found: set[str] = set()
    base = module.split(".") if is_package else module.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - node.level + 1]
                target = ".".join(anchor + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        targets: set[str] = set()
        # Packages above this module are already being imported when it runs.
        own = {".".join(name.split(".")[:end]) for end in range(1, name.count(".") + 2)}
        for imported in _imports(ast.parse(path.read_text()), name, path.name == "__init__.py"):
            parts = imported.split(".")
            # The module itself and every package above it run on import.
            for end in range(1, len(parts) + 1):
                candidate = ".".join(parts[:end])
                if candidate in files and candidate not in own:
                    targets.add(candidate)
        graph[name] = targets
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                return [*stack[stack.index(target) :], target]
            if target not in state:
                cycle = walk(target)
                if cycle:
                    return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = walk(node)
            if cycle:
                return cycle
    return None


def test_no_import_cycle_in_jarvisd() -> None:
    # Parsed in a fresh interpreter: CPython 3.11.7's AST constructor can fail with
    # "SystemError: AST constructor recursion depth mismatch" once earlier tests in the
    # same process have left its recursion counter off (seen after tests/bridge).
    code = (
        "import json; from tests.test_import_graph import find_cycle, import_graph; "
        "print(json.dumps(find_cycle(import_graph())))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=PACKAGE.parent, check=True)  # fmt: skip
    cycle = json.loads(out.stdout)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_cycles() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_daemon_client_imports_no_agent_engine_or_runtime_module() -> None:
    code = (
        "import sys; from jarvisd.daemon._client import Client; "
        "heavy = ('jarvisd.agents', 'jarvisd.engines', 'jarvisd.runs._execute', "
        "'jarvisd.runs._build', 'jarvisd.tools', 'jarvisd.sandbox', 'jarvisd.cli', "
        "'jarvisd.daemon._server', 'jarvisd.daemon._tasks'); "
        "print(','.join(sorted(m for m in sys.modules if m.startswith(heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
