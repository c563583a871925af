"""The package's modules import each other without a cycle at module level: each module's
imports at load time (not those for type checking, nor those inside functions) form a graph
without a cycle, so no module works only because another one happened to be loaded first."""

from __future__ import annotations

import ast
from pathlib import Path

import specops

PACKAGE = Path(specops.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if "triton_kernels" not in path.parts}
# Compiled modules (specops._C): they import nothing of the package.
EXTENSIONS = {module_name(path.with_name(path.name.split(".")[0] + ".py")) for path in PACKAGE.rglob("*.so")}


def module_level_imports(name: str, path: Path) -> set[str]:
    """The specops modules `name` imports when it is loaded: the statements at module level,
    not those under `if TYPE_CHECKING:` nor inside functions. `from a import b` names the
    module a.b when b is one, else a."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
                    visit(node.orelse)
                    continue
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, *(handler.body for handler in node.handlers), node.orelse, node.finalbody):
                    visit(block)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    if submodule not in EXTENSIONS:
                        found.add(submodule if submodule in MODULES else base)

    visit(ast.parse(path.read_text()).body)
    return {imported for imported in found if imported in MODULES and imported != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as the list of its modules (first repeated last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return path[path.index(successor):] + [successor]
            if successor not in state and (cycle := visit(successor)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_module_level_import_cycle():
    graph = {name: module_level_imports(name, path) for name, path in MODULES.items()}
    assert "specops.drafting.configs" in graph["specops.persistent.mappings"]  # the checker sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
