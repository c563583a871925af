"""One message per check in both languages: the native host op (csrc/cpu/*checks.h) and each
Python backend (python/specops/ops/_*checks.py, run before a Triton launch, before the
reference and in the fake kernel) reject every metadata row of the bad-input matrix
(tests/hardening/test_bad_input_matrix.py: the derived dtype/device/rank/layout cases and each op's
`metadata_errors`) with the same exception class and the same message, character for character.

Value rows (`value_errors`) are the native op's alone (device paths cannot raise), so there is
nothing to compare them with.
"""

from __future__ import annotations

import pytest
from conftest import BACKENDS
from test_bad_input_matrix import METADATA_CASES, _derived_cases

import specops

PYTHON_BACKENDS = [name for name in BACKENDS if name != "native"]


def _rejection(spec, case, backend: str) -> str:
    call = spec.valid_call()
    case.change(call)
    with specops.backend(backend), pytest.raises(ValueError) as error:
        spec.wrapper(**call)
    return f"{type(error.value).__name__}: {error.value}"


@pytest.mark.skipif("native" not in BACKENDS or not PYTHON_BACKENDS, reason="needs the native op and a Python backend")
@pytest.mark.parametrize("spec,index", [(s, i) for s, i, _ in METADATA_CASES], ids=[i for _, _, i in METADATA_CASES])
def test_native_and_python_checks_say_the_same(spec, index):
    case = (_derived_cases(spec) + spec.metadata_errors())[index]
    native = _rejection(spec, case, "native")
    for backend in PYTHON_BACKENDS:
        assert _rejection(spec, case, backend) == native, f"{backend} differs from native"
