"""The interpreter the suite runs under stores what a compiled kernel stores (interpreter_quirks.py)."""

import os

import pytest
from conftest import REPORT
from interpreter_quirks import _probes


@pytest.mark.skipif(os.environ["TRITON_INTERPRET"] != "1" or REPORT["triton"] != "usable",
                    reason="Triton's interpreter is not in use")
def test_masked_scalar_stores_and_int32_sums_store_as_compiled():
    store_writes_under_a_false_mask, sum_is_stored_wide = _probes()
    assert not store_writes_under_a_false_mask()
    assert not sum_is_stored_wide()
