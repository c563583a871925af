"""Public op wrappers, one module per op (ops/NAME.py), each naming its public names in its own
`__all__` (the wrapper and its result type). Every such module is found here by its file, so a
new op is exported without a line of this file; importing this package imports every op module,
which registers its device kernels (ops/_op.py) and fills specops.ops.registry.OPS.

Modules whose name starts with "_" and `registry` are the package's machinery, not ops.
"""

import importlib as _importlib
import pkgutil as _pkgutil

__all__: list[str] = []
for _found in sorted(_pkgutil.iter_modules(__path__), key=lambda found: found.name):
    if _found.name.startswith("_") or _found.name == "registry":
        continue
    _module = _importlib.import_module(f"{__name__}.{_found.name}")
    for _name in _module.__all__:
        globals()[_name] = getattr(_module, _name)
        __all__.append(_name)
del _found, _module, _name
