"""The packages of cograg form layers: no top-level package or module imports one that imports it
back (directly or through others), and shared types sit below their users."""

from __future__ import annotations

import ast
from collections import defaultdict
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import cograg

ROOT = Path(cograg.__file__).parent


def _unit(path: Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def _imported_units(path: Path) -> set[str]:
    """Top-level cograg units that `path` imports anywhere (module level or inside functions)."""
    out: set[str] = set()
    package = list(path.relative_to(ROOT).parts[:-1])
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the file's package
                base = package[:len(package) - (node.level - 1)]
                names = [".".join(["cograg", *base, *([node.module] if node.module else [])])]
            elif node.module == "cograg":
                names = [f"cograg.{a.name}" for a in node.names]
            else:
                names = [node.module or ""]
        else:
            continue
        out.update(n.split(".")[1] for n in names if n.startswith("cograg."))
    return out


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in ROOT.rglob("*.py"):
        unit = _unit(path)
        graph[unit].update(u for u in _imported_units(path) if u != unit)
    return graph


def test_no_package_imports_one_that_imports_it_back() -> None:
    graph = import_graph()
    try:
        TopologicalSorter(graph).prepare()
    except CycleError as exc:
        raise AssertionError(f"import cycle between cograg packages: {' -> '.join(exc.args[1])}") from None


def test_shared_modules_sit_below_their_users() -> None:
    graph = import_graph()
    assert "ingest" not in graph["index"]  # the store keeps cograg.documents types, not ingest's
    for shared in ("text", "documents", "trace", "questions", "messages"):
        assert graph[shared] <= {"text", "errors", "messages"}, (shared, graph[shared])
    for stage in ("answer", "control", "retrieval", "index", "models", "ingest", "memory"):
        assert "orchestrator" not in graph[stage] and "engine" not in graph[stage], stage


def test_memory_sits_above_control_and_below_the_orchestrator() -> None:
    graph = import_graph()
    for below in ("answer", "control", "retrieval", "index", "models", "ingest"):
        assert "memory" not in graph[below], below
    assert graph["memory"] <= {"answer", "control", "retrieval", "index", "config", "errors", "text", "ingest",
                               "trace", "messages", "documents", "questions", "models", "prompts"}, graph["memory"]
