"""Each op's contract is written once (docs/adding_an_op.md): its schema and its C++ checks, in
one file (csrc/cpu/NAME.cpp, with helpers of csrc/cpu/*checks.h); the checks are the CPU kernel's
checks, the op's Meta (fake) kernel and the check-only entry the Triton launcher and the
reference run first. So no Python module under ops/ restates a check, no Python fake kernel exists, the
references and the launchers read the op's one argument record by name, and the layers call ops
by keyword, never through an argument list of their own. A wrapper calls its own op by position
(a call of more than 15 keywords costs a dict built and unpacked again), each argument a local
named as the schema's, in its order: checked here against the registered schema, so no argument
can be swapped."""

from __future__ import annotations

import ast
import inspect
import itertools
import re
from pathlib import Path

import pytest
import torch

import specops
from specops.ops._op import wrapper_call, wrapper_call_names
from specops.ops.registry import OPS

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "python" / "specops"
NATIVE = "native" in specops.available_backends()
needs_native = pytest.mark.skipif(not NATIVE, reason="native extension not built")

# The shortest message fragment compared: shorter ones ("got ", ", got") say nothing of a rule.
MIN_FRAGMENT = 12


def cpp_message_text() -> str:
    """Every string literal of the C++ checks and kernels (csrc/cpu), joined by NULs."""
    literals = []
    for path in sorted((ROOT / "csrc" / "cpu").iterdir()):
        if path.suffix in (".cpp", ".h"):
            literals += re.findall(r'"((?:[^"\\]|\\.)*)"', path.read_text())
    return "\0".join(literals)


def raised_fragments(source: str) -> list[tuple[int, str]]:
    """(line, fragment) of every literal piece of a message a `raise X(...)` builds."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            for piece in ast.walk(node.exc.args[0]):
                if isinstance(piece, ast.Constant) and isinstance(piece.value, str):
                    found += [(node.lineno, fragment.strip()) for fragment in re.split(r"\s{2,}", piece.value)]
    return [(line, fragment) for line, fragment in found if len(fragment) >= MIN_FRAGMENT]


def restatements(source: str, cpp: str) -> list[str]:
    return [f"{line}: {fragment!r}" for line, fragment in raised_fragments(source) if fragment in cpp]


def test_no_python_module_under_ops_restates_a_cpp_check():
    cpp = cpp_message_text()
    found = [f"ops/{path.name}:{entry}" for path in sorted((PACKAGE / "ops").glob("*.py"))
             for entry in restatements(path.read_text(), cpp)]
    assert not found, "a C++ check's message raised from Python (call the op's check entry instead):\n" + \
        "\n".join(found)


def test_the_restatement_check_sees_one():
    cpp = cpp_message_text()
    source = ('def f(t, name):\n    if t.dim() != 1:\n'
              '        raise ValueError(f"{name} must be 1-D, got shape {list(t.shape)}")\n'
              '    raise ValueError(f"{name} must have at least {3} entries, got {t.numel()}")\n')
    assert restatements(source, cpp) == ["4: 'must have at least'", "4: 'entries, got'"]


def test_ops_hold_no_check_module():
    found = [path.name for path in (PACKAGE / "ops").glob("*.py") if "check" in path.name]
    assert not found, f"an op's checks are in csrc/cpu/NAME.cpp: {found}"


def test_no_python_fake_kernel():
    found = [f"{path.relative_to(PACKAGE)}" for path in PACKAGE.rglob("*.py")
             if re.search(r"\b(register_fake|impl_abstract|register_kernel)\b", path.read_text())]
    assert not found, f"the fake kernels are the C++ checks, registered for Meta beside the schema: {found}"


@needs_native
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_has_its_cpp_checks_as_its_meta_kernel(name):
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"specops::{name}", "Meta")
    assert torch._C._dispatch_has_kernel_for_dispatch_key(f"specops::{name}", "CPU")


def test_each_schema_is_defined_in_its_ops_file():
    """The schema beside the checks and the kernels (TORCH_LIBRARY_FRAGMENT in csrc/cpu/NAME.cpp);
    csrc/registration.cpp names the library and defines no schema."""
    assert "m.def(" not in (ROOT / "csrc" / "registration.cpp").read_text()
    missing = [name for name in sorted(OPS)
               if f'"{name}(' not in (ROOT / "csrc" / "cpu" / f"{name}.cpp").read_text()]
    assert not missing, f"define the schema in csrc/cpu/NAME.cpp: {missing}"


@needs_native
def test_the_schemas_are_listed_in_one_place():
    """`python -m specops --schemas`: the API surface in one listing, every op's schema once."""
    from specops._fastpath import specops_schemas

    listed = [schema.split("(")[0].removeprefix("specops::") for schema in specops_schemas()]
    assert sorted(OPS) == sorted(set(listed) & set(OPS)) and len(listed) == len(set(listed))


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_reference_reads_the_record(name):
    """A reference takes the op's argument record (`a.seq_lens`), not a list of its own."""
    assert list(inspect.signature(OPS[name].reference).parameters) == ["a"]


@pytest.mark.parametrize("name", sorted(OPS))
def test_the_launcher_reads_the_record(name):
    path = ROOT / "triton_kernels" / f"{name}.py"
    launchers = [node for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.FunctionDef) and node.name == name]
    assert len(launchers) == 1 and [arg.arg for arg in launchers[0].args.args] == ["a"], path


def op_calls(tree: ast.AST, op_names: set[str]) -> list[ast.Call]:
    """Calls that run an op: `X.select()(...)`, an op's public wrapper or a SpecOp (op_names: the
    wrappers' names, `_OP`, the names bound to `OPS[...]`), and a SpecOp's `check` and `checked`."""
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        if isinstance(function, ast.Call) and isinstance(function.func, ast.Attribute) and \
                function.func.attr == "select":
            calls.append(node)
        elif isinstance(function, ast.Attribute) and function.attr in ("check", "checked") and \
                isinstance(function.value, ast.Name) and function.value.id in op_names:
            calls.append(node)
        elif isinstance(function, ast.Name) and function.id in op_names:
            calls.append(node)
    return calls


def is_own_call(call: ast.Call) -> bool:
    """`_OP.select()(...)`: a wrapper's call of its own op."""
    function = call.func
    return isinstance(function, ast.Call) and isinstance(function.func, ast.Attribute) and \
        function.func.attr == "select" and isinstance(function.func.value, ast.Name) and function.func.value.id == "_OP"


def positional_op_calls(path: Path, base: Path = PACKAGE, own_calls: bool = True) -> list[str]:
    """Op calls in path that pass an argument by position (own_calls False: the wrapper's calls of
    its own op left out, which wrapper_call_faults judges)."""
    tree = ast.parse(path.read_text())
    names = set(OPS) | {"_OP"}
    for node in ast.walk(tree):
        # A name bound to OPS["..."] (`_GATHER = OPS["gather_block_tables"]`).
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript) and \
                isinstance(node.value.value, ast.Name) and node.value.value.id == "OPS":
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Tuple):
            for target, value in zip(getattr(node.targets[0], "elts", []), node.value.elts):
                if isinstance(value, ast.Subscript) and isinstance(value.value, ast.Name) and \
                        value.value.id == "OPS" and isinstance(target, ast.Name):
                    names.add(target.id)
    return [f"{path.relative_to(base)}:{call.lineno}: {ast.unparse(call)[:100]}"
            for call in op_calls(tree, names) if call.args and (own_calls or not is_own_call(call))]


def test_the_layers_call_ops_by_keyword():
    """drafting/ and persistent/ name every argument of every op call: no argument list of
    their own restates a schema's order."""
    found = [entry for folder in ("drafting", "persistent") for path in sorted((PACKAGE / folder).glob("*.py"))
             for entry in positional_op_calls(path)]
    assert not found, "\n".join(found)


def schema_names(name: str) -> list[str]:
    return [argument.name for argument in getattr(torch.ops.specops, name).default._schema.arguments]


def wrapper_call_faults(source: str, names: list[str]) -> list[str]:
    """What is wrong with each `_OP.select()(...)` call in source against the schema's argument
    names: every argument by position, each a local named as the schema's argument, in its order."""
    calls = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call) and is_own_call(node)]
    if not calls:
        return ["no `_OP.select()(...)` call"]
    faults = []
    for call in calls:
        if call.keywords:
            faults.append(f"{call.lineno}: by keyword ({', '.join(str(k.arg) for k in call.keywords)}): pass every "
                          "argument by position")
        passed = [argument.id if isinstance(argument, ast.Name) else ast.unparse(argument) for argument in call.args]
        for position, (given, expected) in enumerate(itertools.zip_longest(passed, names)):
            if given is None:
                faults.append(f"{call.lineno}: argument {position} ({expected}) is missing")
            elif expected is None:
                faults.append(f"{call.lineno}: argument {position} is {given}, past the schema's {len(names)}")
            elif given != expected:
                faults.append(f"{call.lineno}: argument {position} is {given}, the schema's is {expected}")
    return faults


@needs_native
@pytest.mark.parametrize("name", sorted(OPS))
def test_the_wrapper_calls_its_op_by_position_under_the_schemas_names(name):
    """The positional call's safety is the keyword call's: each argument is a local named exactly
    as the schema's argument at that place, so a swapped, missing or extra argument fails here."""
    faults = wrapper_call_faults((PACKAGE / "ops" / f"{name}.py").read_text(), schema_names(name))
    assert not faults, f"ops/{name}.py calls its op with the schema's names, in its order:\n" + "\n".join(faults)


@needs_native
@pytest.mark.parametrize("name", sorted(OPS))
def test_without_the_extension_the_wrappers_call_names_its_arguments(name):
    """What names a wrapper's positional arguments where no schema is registered (the reference
    backend without the extension) is the same call, read from its source."""
    assert list(wrapper_call_names(name)) == schema_names(name)


def test_the_order_check_sees_a_swap_an_expression_and_a_keyword():
    names = ["query_start_loc", "positions", "out"]

    def wrapper(arguments: str) -> str:
        return f"def f(query_start_loc, positions, out):\n    _OP.select()({arguments})\n"

    assert wrapper_call_faults(wrapper("query_start_loc, positions, out"), names) == []
    assert wrapper_call_faults(wrapper("positions, query_start_loc, out"), names) == [
        "2: argument 0 is positions, the schema's is query_start_loc",
        "2: argument 1 is query_start_loc, the schema's is positions"]
    assert wrapper_call_faults(wrapper("query_start_loc, positions, out.view(-1)"), names) == [
        "2: argument 2 is out.view(-1), the schema's is out"]
    assert wrapper_call_faults(wrapper("query_start_loc, positions"), names) == ["2: argument 2 (out) is missing"]
    assert wrapper_call_faults(wrapper("query_start_loc, positions, out, out"), names) == [
        "2: argument 3 is out, past the schema's 3"]
    assert wrapper_call_faults(wrapper("query_start_loc, positions, out=out"), names) == [
        "2: by keyword (out): pass every argument by position", "2: argument 2 (out) is missing"]
    assert wrapper_call_faults("def f(a):\n    _OP(a)\n", names) == ["no `_OP.select()(...)` call"]
    assert [argument.id for argument in wrapper_call(ast.parse(wrapper("query_start_loc, positions, out"))).args] \
        == names


def test_the_wrappers_call_other_ops_by_keyword():
    """Beside its own op's call, a wrapper module calls ops (another op's wrapper, its own op's
    check) by keyword, as the layers do."""
    found = [entry for path in sorted((PACKAGE / "ops").glob("*.py")) if not path.name.startswith("_")
             for entry in positional_op_calls(path, own_calls=False)]
    assert not found, "\n".join(found)


def test_the_keyword_check_sees_a_positional_call(tmp_path):
    path = tmp_path / "probe.py"
    path.write_text('from specops.ops.registry import OPS\n_GATHER, _X = OPS["gather_block_tables"], 1\n'
                    'def f(a, b):\n    _GATHER(a, out=b)\n    OPS["x"].select()(a)\n    _GATHER(out=b)\n'
                    '    compute_slot_mapping(*a)\n')
    assert [entry.split(": ")[0] for entry in positional_op_calls(path, tmp_path)] == ["probe.py:4", "probe.py:5",
                                                                                        "probe.py:7"]
