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


@pytest.mark.skipif(os.environ["TRITON_INTERPRET"] != "1" or REPORT["triton"] != "usable",
                    reason="Triton's interpreter is not in use")
def test_bool_and_bfloat16_constants_are_built():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def select(values_ptr, out_ptr, flags_ptr):
        lanes = tl.arange(0, 4)
        live = tl.where(tl.load(flags_ptr + lanes) != 0, lanes < 3, False)
        tl.store(out_ptr + lanes, tl.where(live, tl.load(values_ptr + lanes), 1.5))

    out = torch.zeros(4, dtype=torch.bfloat16)
    select[(1,)](torch.tensor([2.0, 3.0, 4.0, 5.0], dtype=torch.bfloat16), out, torch.tensor([1, 0, 1, 1]))
    assert out.tolist() == [2.0, 1.5, 4.0, 1.5]
