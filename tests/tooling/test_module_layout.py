"""The package's layers: its modules import each other without a cycle at module level (each
module's imports at load time form a graph without a cycle, so no module works only because
another one happened to be loaded first), nor through the imports made inside functions (a lazy
import that closes a cycle is a cycle the load order happens to hide); inside a package not even
through the imports made for type checking (a lower module naming a higher one's type is a cycle
of design); persistent/ never imports drafting/; a private module or name (`_x`) is imported only
inside its own package (a top-level `specops._x` is the whole package's); the layers take nothing
from the reference implementations; the benchmarks import nothing of the developer tools; torch's
private names are read in specops/_fastpath.py alone; and no module reads another object's
underscore attribute.

`from P import x` imports P: it runs P's __init__ and reads x from P's namespace (a submodule x is
also imported), so a module of P that imports from P itself, as in `from specops.ops import
_sas_inputs` inside specops/ops/, closes a cycle through P's __init__ (which imports that module).
`import P.x` imports the module P.x by its name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import specops

PACKAGE = Path(specops.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py")) if "triton_kernels" not in path.parts}


def module_level_imports(name: str, path: Path, type_checking: bool = False, lazy: bool = False) -> set[str]:
    """The specops modules `name` imports when it is loaded: the statements at module level (in
    class bodies, under if, try and with too), not those inside functions (unless lazy), nor
    (unless type_checking) those under `if TYPE_CHECKING:`. `from a import b` names the module a
    (its namespace is read) and a.b when b is one; `import a.b` names a.b."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(statements: list[ast.stmt]) -> None:
        for node in statements:
            if isinstance(node, ast.If):
                test = node.test
                if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" and not type_checking:
                    visit(node.orelse)
                    continue
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if lazy:
                    visit(node.body)
            else:
                for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                    block = getattr(node, field, None)
                    if isinstance(block, list):
                        visit([child for child in block if isinstance(child, (ast.stmt, ast.excepthandler,
                                                                               ast.match_case))])

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


def import_graph(lazy: bool = False, sources: dict[str, str] | None = None, tmp_path: Path | None = None):
    """Each module's imports (lazy: those inside functions too); sources: modules' text in place of
    their files (written under tmp_path)."""
    paths = dict(MODULES)
    for name, text in (sources or {}).items():
        paths[name] = tmp_path / MODULES[name].relative_to(PACKAGE.parent)
        paths[name].parent.mkdir(parents=True, exist_ok=True)
        paths[name].write_text(text)
    return {name: module_level_imports(name, path, lazy=lazy) for name, path in paths.items()}


def test_no_module_level_import_cycle():
    graph = import_graph()
    assert "specops.persistent.checks" in graph["specops.persistent.mappings"]  # the checker sees imports
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_cycle_through_lazy_imports():
    graph = import_graph(lazy=True)
    assert "specops.integrations.vllm._releases" in graph["specops.integrations.vllm"]  # activate()'s import
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


# The two cycles of hardening round 5 (docs/changelog.md). The first was sas_metadata's
# `from specops.ops import _sas_inputs`; specops.ops now finds its op modules by their files (no
# import of them to close a cycle through), so a drafting module importing from its package,
# whose __init__ imports it, stands in for it.
_OWN_PACKAGE = ("specops.drafting.builder", "from specops.drafting.buffers import DraftBuffers",
                "from specops.drafting import DraftBuffers")
_LAZY = ("specops.integrations.vllm.mrv2", "def make_gather_block_tables(original):\n",
         "def make_gather_block_tables(original):\n    import specops.integrations.vllm.target_step as target_step\n")


@pytest.mark.parametrize("module, now, then", [_OWN_PACKAGE, _LAZY], ids=["own-package", "lazy"])
def test_the_checker_sees_a_module_importing_its_own_package_and_a_lazy_cycle(module, now, then, tmp_path):
    text = MODULES[module].read_text()
    assert text.count(now) == 1
    graph = import_graph(lazy=module == _LAZY[0], sources={module: text.replace(now, then)}, tmp_path=tmp_path)
    cycle = find_cycle(graph)
    assert cycle is not None and module in cycle, cycle
    if module == _LAZY[0]:
        assert find_cycle(import_graph(sources={module: text.replace(now, then)}, tmp_path=tmp_path)) is None
        assert {"specops.integrations.vllm.mrv2", "specops.integrations.vllm.target_step"} <= set(cycle), cycle
    else:
        assert "specops.drafting" in cycle


def package_of(name: str) -> str:
    return name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]


def type_checking_cycle(package: str, sources: dict[str, Path] | None = None) -> list[str] | None:
    """A cycle among the package's own modules, counting their `if TYPE_CHECKING:` imports, or
    None; sources: modules read from another file than their own."""
    sources = sources or {}
    members = {name for name in MODULES if package_of(name) == package and name != package}
    graph = {name: module_level_imports(name, sources.get(name, MODULES[name]), type_checking=True) & members
             for name in members}
    return find_cycle(graph)


def test_no_import_cycle_inside_a_package_even_for_type_checking():
    for package in sorted({package_of(name) for name in MODULES}):
        cycle = type_checking_cycle(package)
        assert cycle is None, " -> ".join(cycle)


def test_a_lower_module_naming_the_builder_for_type_checking_is_a_cycle(tmp_path):
    """drafting/calls.py naming the builder's type, as it once did: builder -> step -> calls ->
    builder, through an import only a type checker makes."""
    calls = tmp_path / "calls.py"
    calls.write_text(MODULES["specops.drafting.calls"].read_text()
                     + "\nif TYPE_CHECKING:\n    from specops.drafting.builder import DraftMetadataBuilder\n")
    assert "specops.drafting.builder" not in module_level_imports("specops.drafting.calls", calls)
    cycle = type_checking_cycle("specops.drafting", {"specops.drafting.calls": calls})
    assert cycle is not None and {"specops.drafting.calls", "specops.drafting.builder"} <= set(cycle), cycle


def test_persistent_never_imports_drafting():
    for name, path in MODULES.items():
        if name.startswith("specops.persistent"):
            imported = module_level_imports(name, path, type_checking=True)
            assert not {module for module in imported if module.startswith("specops.drafting")}, name


# Underscore attributes of torch's objects the package reads on purpose (a tensor's version
# counter, an OpOverload's schema and C++ entries, torch.compiler's flag, the device check's
# torch.cuda._sleep): in specops/_fastpath.py alone (test_torchs_private_names_are_read_in_the_seam_alone).
TORCH_PRIVATE_ATTRIBUTES = {"_version", "_schema", "_op", "_op_dk", "_is_compiling_flag", "_sleep"}
# A NamedTuple's public API, which is spelled with an underscore so that it clashes with no field,
# and the Triton descriptor slots kernel_capture binds launches with, as Triton itself does.
TORCH_AND_STDLIB_ATTRIBUTES = TORCH_PRIVATE_ATTRIBUTES | {"_init_slots", "_fields", "_asdict", "_make", "_replace"}
# Names bound to another project's module without an import statement, by module: the device
# check's `vllm` is vLLM's kernels file loaded by path, whose launchers are private to it.
FOREIGN_MODULES = {"specops.devtools.device_check.vllm_peers": {"vllm"}}


def underscore_reads(source: str, foreign_modules: set[str] = frozenset()) -> list[str]:
    """Every `x._name` in source where x is not self, cls or a module (imported, or one of
    foreign_modules: its private names, such as specops._C, are the module's own business),
    minus TORCH_AND_STDLIB_ATTRIBUTES."""
    tree = ast.parse(source)
    modules = {(alias.asname or alias.name).split(".")[0] for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names} | set(foreign_modules)
    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")):
            continue
        owner = node.value
        if isinstance(owner, ast.Name) and (owner.id in ("self", "cls") or owner.id in modules):
            continue
        if node.attr not in TORCH_AND_STDLIB_ATTRIBUTES:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_reads_another_objects_underscore_attribute():
    found = [f"{name}:{read}" for name, path in MODULES.items()
             for read in underscore_reads(path.read_text(), FOREIGN_MODULES.get(name, set()))]
    assert not found, "\n".join(found)


def test_the_underscore_check_sees_a_read():
    source = "import torch\n\nclass A:\n    def f(self, mappings, t):\n        return self._a, torch._C, t._version, " \
             "mappings._captured, mappings.checks._tables\n"
    assert underscore_reads(source) == ["5: mappings._captured", "5: mappings.checks._tables"]
    assert underscore_reads(source, {"mappings"}) == ["5: mappings.checks._tables"]


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def all_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module or module.name) of every import statement in the file, at any level
    (function bodies and `if TYPE_CHECKING:` included); relative imports resolved."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found += [(node.lineno, base)] + [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return found


def private_owner(dotted: str) -> str | None:
    """The package or module that owns the first private component of a dotted name (`a.b._c.d`:
    `a.b`), None when no component is private."""
    parts = dotted.split(".")
    for index, part in enumerate(parts[1:], 1):
        if part.startswith("_") and not part.startswith("__"):
            return ".".join(parts[:index])
    return None


def foreign_private_imports(path: Path) -> list[str]:
    """Imports of a specops private module or name owned by a package other than the importer's
    own or one above it."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for line, dotted in all_imports(path):
        owner = private_owner(dotted)
        if dotted.split(".")[0] == "specops" and owner is not None and \
                not (package == owner or package.startswith(owner + ".")):
            found.append(f"{name}:{line}: {dotted}")
    return found


def test_private_modules_stay_private():
    found = sorted({entry for path in MODULES.values() for entry in foreign_private_imports(path)})
    assert not found, "a private module or name is its package's own; give what others need a public name:\n" + \
        "\n".join(found)


def test_the_private_import_check_sees_one(tmp_path):
    assert private_owner("specops.ops._op.SpecOp") == "specops.ops"
    assert private_owner("specops._fastpath.row_views") == "specops"
    assert private_owner("specops.reference.advance_draft_step._slots") == "specops.reference.advance_draft_step"
    assert private_owner("specops.arguments.checked_int") is None
    drafting = MODULES["specops.drafting.plan"]
    assert not foreign_private_imports(drafting)


def test_the_layers_take_nothing_from_the_reference():
    """drafting/ and persistent/ call ops through their public wrappers (any backend), never a
    reference implementation directly, and take no constant from one."""
    found = [f"{name}:{line}: {dotted}" for name, path in MODULES.items()
             if name.startswith(("specops.drafting", "specops.persistent"))
             for line, dotted in all_imports(path) if dotted.startswith("specops.reference")]
    assert not found, "\n".join(found)


def test_the_benchmarks_import_nothing_of_the_developer_tools():
    """devtools/ is a layer over the benchmark cases (it compiles and runs them on devices); the
    benchmarks take what both use from public modules of their own (specops.launch_count)."""
    found = [f"{name}:{line}: {dotted}" for name, path in MODULES.items() if name.startswith("specops.bench")
             for line, dotted in all_imports(path) if dotted.startswith("specops.devtools")]
    assert not found, "\n".join(found)


def torch_private_names(source: str) -> list[str]:
    """Every private name of torch's in source: an import of a private torch module or name, a
    dotted torch.a._b, and a read of one of TORCH_PRIVATE_ATTRIBUTES."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] + [f"{node.module}.{alias.name}" for alias in node.names]
            found += [f"{node.lineno}: {dotted}" for dotted in names
                      if dotted.split(".")[0] == "torch" and private_owner(dotted) is not None]
        elif isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            text = ast.unparse(node)
            if text.split(".")[0] == "torch" or node.attr in TORCH_PRIVATE_ATTRIBUTES:
                found.append(f"{node.lineno}: {text}")
    return sorted(set(found))


def test_torchs_private_names_are_read_in_the_seam_alone():
    """A torch upgrade that moves a private name breaks specops/_fastpath.py and nothing else."""
    found = [f"{name}:{entry}" for name, path in MODULES.items() if name != "specops._fastpath"
             for entry in torch_private_names(path.read_text())]
    assert not found, "read torch's private names through specops._fastpath:\n" + "\n".join(found)


def test_the_torch_private_name_check_sees_one():
    source = ("import torch\nfrom torch._C import x\nfrom torch.utils._python_dispatch import M\n"
              "a = torch.compiler._is_compiling_flag\nb = t._version\nc = torch.compiler.is_compiling\n")
    assert torch_private_names(source) == [
        "2: torch._C", "2: torch._C.x", "3: torch.utils._python_dispatch", "3: torch.utils._python_dispatch.M",
        "4: torch.compiler._is_compiling_flag", "5: t._version"]
