"""What the plugin checks before it patches a point: a structural fingerprint of each of its
targets (docs/integrations.md, "Fingerprints").

A target is a function, method or class of a runner package, named `module:qualname` (any
package: vllm, vllm_ascend). Its fingerprint is a hash of
- the wrappers the attribute holds around the function, outermost first (a decorator's or another
  plugin's `functools.wraps` wrapper, vLLM's kernel dispatchers): each named by the module its
  code comes from and its code's name, which `functools.wraps` does not copy; and
- the syntax tree of the function's `def` (its decorators, signature and body), found in the
  source file its code object names at the line that code starts, with every docstring dropped
  (comments are not in a syntax tree).
For a class it is that of its `__init__`, where the attributes the adapters read are made.

So a comment or docstring edit keeps a point, while any change to what the code does, and any
wrapper another plugin put around a target, drops it: the guard sees the object the plugin would
replace, not what `inspect.unwrap` finds behind it (a patch over a wrapper would silently drop
the other plugin's).

The tree is written out field by field, leaving out empty fields (None, []), so fields a newer
Python adds to its nodes (`type_params` in 3.12) do not change the fingerprint of code without
them.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import importlib
import inspect
import linecache
import types


class Mismatch(Exception):
    """A target that differs from the one the release table names; its message names it."""


def resolve(target: str):
    """The object `module:qualname` names, as the attribute holds it (an ImportError or an
    AttributeError when it is gone). A staticmethod or classmethod is taken as its function."""
    module_name, qualname = target.split(":")
    owner = importlib.import_module(module_name)
    for part in qualname.split("."):
        owner = inspect.getattr_static(owner, part)
    if isinstance(owner, (staticmethod, classmethod)):
        owner = owner.__func__
    return owner


def _wrapped(obj):
    # Read from the object's own namespace: some launchers forward unknown attributes to the
    # kernel they hold.
    namespace = getattr(obj, "__dict__", None)
    return namespace.get("__wrapped__") if isinstance(namespace, dict) else None


def _layer_name(obj) -> str:
    if isinstance(obj, types.FunctionType):
        return f"{obj.__globals__.get('__name__', '?')}.{obj.__code__.co_name}"
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def layers(obj) -> tuple[list[str], types.FunctionType]:
    """The wrappers around the function `obj` stands for, outermost first, and the function.
    Raises TypeError when there is no Python function at the bottom."""
    if inspect.isclass(obj):
        obj = obj.__init__
    names = []
    while True:
        inner = _wrapped(obj)
        if inner is None:
            break
        names.append(_layer_name(obj))
        obj = inner
        if len(names) > 32:
            raise TypeError("a cycle of __wrapped__ attributes")
    if not isinstance(obj, types.FunctionType):
        raise TypeError(f"not a Python function: {type(obj).__module__}.{type(obj).__qualname__}")
    return names, obj


@functools.lru_cache(maxsize=64)
def _parse(filename: str, text: str) -> ast.Module:
    return ast.parse(text, filename)


def definition(function: types.FunctionType) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """The `def` of `function` in its source file: the one its code object starts at."""
    code = function.__code__
    filename = inspect.getsourcefile(function) or code.co_filename
    text = "".join(linecache.getlines(filename, function.__globals__))
    if not text:
        raise OSError(f"no source for {code.co_name} ({code.co_filename})")
    for node in ast.walk(_parse(filename, text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            if first == code.co_firstlineno:
                return node
    raise OSError(f"no def of {code.co_name} at {filename}:{code.co_firstlineno}")


_DOCUMENTED = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
_LEFT_OUT = {"type_comment", "kind"}  # comments in a node, and the u-prefix of a string


def _is_docstring(statement: ast.stmt) -> bool:
    return (isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str))


def canonical(node) -> str:
    """The syntax tree as text: node names and non-empty fields, docstrings dropped."""
    if isinstance(node, list):
        return "[" + ",".join(canonical(item) for item in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    fields = []
    for name, value in ast.iter_fields(node):
        if name in _LEFT_OUT or value is None or value == []:
            continue
        if name == "body" and isinstance(node, _DOCUMENTED) and value and _is_docstring(value[0]):
            value = value[1:]
        fields.append(f"{name}={canonical(value)}")
    return f"{type(node).__name__}({','.join(fields)})"


def fingerprint_of(obj) -> str:
    names, function = layers(obj)
    text = "\n".join([*names, canonical(definition(function))])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def fingerprint(target: str) -> str:
    """The fingerprint of what `target` names now (raises when it is gone or has no source)."""
    return fingerprint_of(resolve(target))


def check_target(target: str, expected: str | None) -> None:
    """Raises Mismatch naming `target` when it is gone, unreadable, or not the expected code."""
    try:
        found = fingerprint(target)
    except Exception as exc:  # gone, renamed, wrapped by something that is not a function, no source
        raise Mismatch(f"{target} cannot be read ({type(exc).__name__}: {exc})") from None
    if expected is None:
        raise Mismatch(f"{target} has no fingerprint in this release's row")
    if found != expected:
        raise Mismatch(f"{target} differs from the release's (fingerprint {found}, expected {expected})")
