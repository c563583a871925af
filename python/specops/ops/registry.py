"""Every op's SpecOp by name: the internal API through which the layers above the wrappers
(persistent/, drafting/, the benchmarks and the tests) call an op with its schema's arguments,
without the keyword wrapper. `OPS["compute_slot_mapping"].select()(...)` runs the op on the
selected backend; `.check` is its metadata check (the fake kernel).

Each op module declares its SpecOp (ops/_op.py); importing this module imports specops.ops,
which imports every op module, so OPS holds them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from specops.ops._op import DECLARED, SpecOp

OPS: Mapping[str, SpecOp] = MappingProxyType(DECLARED)
