"""Set-up of the NPU-route suite (`make test-ascend`): triton-ascend 3.2 in a venv of its own.

The parent conftest sets TRITON_INTERPRET=1, so kernels are InterpretedFunctions here and the
launchers run on CPU tensors; the compiles run in child processes without it. The launches are
captured once per session, with the launchers on their NPU route: the op table's valid call and
DRAWS random valid calls of every op.
"""

from __future__ import annotations

import pytest
from triton.backends import backends

import launches as capture

if "ascend" not in backends:
    raise pytest.UsageError("tests/ascend needs triton-ascend: run `make test-ascend` from the repository root")


@pytest.fixture(scope="session")
def op_table():
    from op_table import OP_TABLE

    return OP_TABLE


@pytest.fixture(scope="session")
def captured_launches(op_table) -> list[capture.Launch]:
    import specops
    from specops.triton_kernels._launch import assumed_npu

    found: list[capture.Launch] = []
    for op in op_table:
        for label, call in capture.op_calls(op, capture.DRAWS):
            with assumed_npu(), specops.backend("triton"), capture.capture_launches(label) as launched:
                op.wrapper(**call)
            found += launched
    return found
