"""Sizes an op allocates its outputs from (docs/hardening.md, "Sizes an op allocates from"): a
wrapper given no output buffer checks every size it allocates from before it allocates, and a size
past its bound is a ValueError that names it, on every backend.
"""

from __future__ import annotations

import re

import pytest
import torch
from op_table import OP_TABLE, Call, OpSpec, names_pattern, t32, takes_none

import specops


def _draft_steps(**change):
    """advance_draft_steps with its outputs left to the wrapper."""
    call = dict(query_start_loc=t32(0, 1), positions=torch.tensor([3]), seq_lens=t32(4), token_indices=t32(0),
                num_rejected_tokens=t32(0), block_tables=[t32(1, 2).view(1, 2)], block_sizes=4,
                rope_cos_sin_cache=torch.zeros(8, 2), num_steps=2, num_actual_tokens=1, num_input_tokens=1,
                max_model_len=8, target_slot_mappings=[torch.tensor([3])])
    return specops.advance_draft_steps(**{**call, **change})


# Calls that leave outputs to the wrapper with a size that is wrong: the wrapper checks it before
# it allocates (once: "negative dimension", or 16 GiB allocated from query_start_loc[R] = 2^31 - 1).
ALLOCATION_CASES = [
    ("compute_slot_mapping", "num_tokens_padded", lambda: specops.compute_slot_mapping(
        t32(0, 2), torch.tensor([0, 1]), t32(1, 2).view(1, 2), 16, num_tokens_padded=-1)),
    ("compute_slot_mapping", "positions", lambda: specops.compute_slot_mapping(t32(0, 2), None, t32(1, 2), 16)),
    ("prepare_positions_and_seq_lens", "query_start_loc", lambda: specops.prepare_positions_and_seq_lens(
        t32(4), t32(0, -3))),
    ("prepare_positions_and_seq_lens", "query_start_loc", lambda: specops.prepare_positions_and_seq_lens(
        t32(4), t32(5, 2**31 - 1))),
    ("prepare_positions_and_seq_lens", "num_tokens_padded", lambda: specops.prepare_positions_and_seq_lens(
        t32(4), t32(0, 2), num_tokens_padded=-2)),
    ("prepare_positions_and_seq_lens", "num_reqs_padded", lambda: specops.prepare_positions_and_seq_lens(
        t32(4), t32(0, 2), num_reqs_padded=0)),
    ("prepare_spec_decode_inputs", "num_tokens_padded", lambda: specops.prepare_spec_decode_inputs(
        t32(4), t32(0), t32(-1), t32(), t32(), t32(4), t32(0, 2), [t32(1, 2).view(1, 2)], 16,
        positions=torch.zeros(2, dtype=torch.int64), seq_lens=t32(0), num_tokens_padded=-1)),
    ("prepare_spec_decode_inputs", "query_start_loc", lambda: specops.prepare_spec_decode_inputs(
        t32(4), t32(0), t32(-1), t32(), t32(), t32(4), t32(3, 2**31 - 1), [t32(1, 2).view(1, 2)], 16)),
    ("dspark_swa_indices", "window", lambda: specops.dspark_swa_indices(
        t32(1, 2).view(1, 2), t32(0, 1), t32(3), window=-300, num_speculative_tokens=1, block_size=4)),
    ("dspark_swa_indices", "query_start_loc", lambda: specops.dspark_swa_indices(
        t32(1, 2).view(1, 2), t32(0, -5), t32(3), window=2, num_speculative_tokens=1, block_size=4)),
    ("dspark_swa_indices", "cp_rank", lambda: specops.dspark_swa_indices(
        t32(1, 2).view(1, 2), t32(0, 1), t32(3), window=2, num_speculative_tokens=1, block_size=4, cp_rank=3)),
    ("cp_local_metadata", "query_start_loc", lambda: specops.cp_local_metadata(None, t32(3), 4, 1, 0)),
    ("advance_draft_steps", "num_steps", lambda: _draft_steps(num_steps=-1)),
    ("advance_draft_steps", "num_input_tokens", lambda: _draft_steps(num_input_tokens=-3)),
    ("advance_draft_steps", "num_input_tokens", lambda: _draft_steps(num_input_tokens=2**40)),
    ("advance_draft_steps", "num_reqs_padded", lambda: _draft_steps(num_reqs_padded=-1)),
    ("advance_draft_steps", "num_reqs_padded", lambda: _draft_steps(num_reqs_padded=2**35)),
    ("advance_draft_steps", "split_size", lambda: _draft_steps(split_size=0)),
]


@pytest.mark.parametrize("case", range(len(ALLOCATION_CASES)),
                         ids=[f"{op}-{name}-{i}" for i, (op, name, _) in enumerate(ALLOCATION_CASES)])
def test_wrappers_check_a_size_before_they_allocate_from_it(backend, case):
    _, name, call = ALLOCATION_CASES[case]
    with pytest.raises(ValueError) as error:
        call()
    assert re.search(names_pattern(name), str(error.value)), f"the error does not name {name}: {error.value}"


# The allocation-size rule (docs/hardening.md, "Sizes an op allocates from"): every size an op
# allocates an output from, per op, with the values past its bound, is its OpSpec's
# allocation_sizes (tests/op_specs/NAME.py). The call is the op table's valid call with every
# output the wrapper may allocate left out.
SIZE_CASES = [(spec, name, value) for spec in OP_TABLE for name, values in (spec.allocation_sizes or {}).items()
              for value in values]


def _with_outputs_left_out(spec: OpSpec) -> Call:
    call = spec.valid_call()
    for key in {key.split("[")[0] for key in spec.outputs}:
        if takes_none(spec, key):
            call[key] = None
    return call


# Ops whose wrapper takes its outputs as one object the op table's adapter always gives: their
# size rows are hand-written calls in ALLOCATION_CASES that leave the outputs to the wrapper.
SIZE_ROWS_IN_ALLOCATION_CASES = {"advance_draft_steps"}


def test_every_allocating_op_has_a_size_row():
    assert SIZE_ROWS_IN_ALLOCATION_CASES <= {op for op, _, _ in ALLOCATION_CASES}
    described = {spec.name for spec in OP_TABLE if spec.allocation_sizes is not None} | SIZE_ROWS_IN_ALLOCATION_CASES
    assert {spec.name for spec in OP_TABLE} == described, "give the op's OpSpec its allocation_sizes ({}: none)"


@pytest.mark.parametrize("spec,name,value", SIZE_CASES, ids=[f"{s.name}-{n}-{v}" for s, n, v in SIZE_CASES])
def test_every_size_an_op_allocates_from_is_bounded(backend, spec, name, value):
    """Once: 2**40 died in torch's allocator naming nothing, 2**31 - 1 quietly asked for 8 GiB an
    output. A size past its bound is a ValueError naming it, before anything is allocated."""
    call = _with_outputs_left_out(spec)
    call[name] = [value] * len(call[name]) if isinstance(call.get(name), list) else value
    with pytest.raises(ValueError) as error:
        spec.wrapper(**call)
    assert re.search(names_pattern(name), str(error.value)), f"the error does not name {name}: {error.value}"


@pytest.mark.parametrize("name,value", [("padded_num_tokens", 2**40), ("padded_num_tokens", 2**30),
                                        ("pcp_world_size", 2**30 - 1), ("pcp_world_size", 65537)])
def test_pcp_partition_bounds_what_it_allocates_from_on_every_backend(backend, name, value):
    """Once: padded_num_tokens=2**40 was a ValueError natively and a MemoryError on the reference;
    pcp_world_size=2**30 - 1 passed the native check and ended in std::bad_alloc."""
    arguments = dict(pcp_world_size=2, padded_num_tokens=None)
    arguments[name] = value
    counts = (torch.tensor([3, 1], dtype=torch.int32), torch.tensor([0, 4], dtype=torch.int32),
              torch.tensor([True, False]))
    with pytest.raises(ValueError) as error:
        specops.pcp_partition(*counts, arguments.pop("pcp_world_size"), **arguments)
    assert re.search(names_pattern(name), str(error.value)), f"the error does not name {name}: {error.value}"
    specops.pcp_partition(*counts, 65536 if name == "pcp_world_size" else 2, padded_num_tokens=4)
