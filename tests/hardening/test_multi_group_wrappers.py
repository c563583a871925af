"""The multi-group ops against their single-group ops, and the sizes their wrappers allocate from
(docs/changelog.md, third round).

- Every value the native single op rejects, placed in either group of the multi op, is rejected
  by the native multi op, naming that group's arguments, before any write (once,
  dspark_swa_indices_multi wrote PAD for a slot past int32 that dspark_swa_indices rejects).
- A wrapper that allocates outputs checks every value it sizes them from first: negative or
  huge widths, a negative query_start_loc[R], None where a tensor belongs, a float size, each a
  ValueError naming the argument on every backend (once torch's "negative dimension", a
  TypeError, or a 21 TB allocation).
"""

from __future__ import annotations

import re

import pytest
import torch
from op_specs._spec import Bad, get_arg, names_pattern, tensor_keys
from op_specs.dspark_swa_indices import DSPARK, _dspark_valid
from op_specs.dspark_swa_indices_multi import _dspark_multi_valid

import specops

# The single op's per-group arguments and their multi-op lists; everything else is shared.
PER_GROUP = {"block_table": "block_tables", "window": "windows", "block_size": "block_sizes", "width": "widths",
             "out": "out", "out_lens": "out_lens"}
SHARED = ("query_start_loc", "seq_lens", "num_speculative_tokens", "num_tokens", "cp_size", "cp_rank")


def _in_group(single: dict, group: int) -> dict:
    """The multi op's valid call with `single`'s group in position `group` (the other group is
    the valid call's second) and single's shared arguments."""
    multi = _dspark_multi_valid()
    other = {plural: multi[plural][1] for plural in PER_GROUP.values()}
    call = {name: single[name] for name in SHARED}
    for name, plural in PER_GROUP.items():
        entries = [other[plural], other[plural]]
        entries[group] = single[name]
        call[plural] = entries
    return call


def _multi_name(name: str, group: int) -> str:
    return f"{PER_GROUP[name]}[{group}]" if name in PER_GROUP else name


VALUE_CASES = [(case, group) for case in DSPARK.value_errors() for group in (0, 1)]


@pytest.mark.parametrize("case,group", VALUE_CASES, ids=[f"{c.label}-group{g}" for c, g in VALUE_CASES])
def test_the_multi_op_rejects_what_the_single_op_rejects_in_every_group(case: Bad, group: int):
    single = _dspark_valid()
    case.change(single)
    with specops.backend("native"):
        with pytest.raises(ValueError):
            specops.dspark_swa_indices(**single)
        call = _in_group(single, group)
        before = {key: get_arg(call, key).clone() for key in tensor_keys(call)}
        with pytest.raises(ValueError) as error:
            specops.dspark_swa_indices_multi(**call)
    for name in case.names:
        assert re.search(names_pattern(_multi_name(name, group)), str(error.value)), (
            f"the error does not name {_multi_name(name, group)}: {error.value}")
    for key, value in before.items():
        assert torch.equal(get_arg(call, key), value), f"a rejected call wrote {key}"


@pytest.mark.parametrize("group", [0, 1])
def test_each_group_built_alone_matches_the_multi_op(backend, group):
    """The same groups accepted: the multi op writes each group's single-op result."""
    single = _dspark_valid()
    call = _in_group(single, group)
    out, out_lens = specops.dspark_swa_indices_multi(**call)
    expected, expected_lens = specops.dspark_swa_indices(**_dspark_valid())
    assert torch.equal(out[group], expected) and torch.equal(out_lens[group], expected_lens)


def _i32(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _dspark_multi(**change):
    """dspark_swa_indices_multi with its outputs left to the wrapper."""
    call = _dspark_multi_valid()
    call.pop("out"), call.pop("out_lens")
    call.pop("num_tokens")
    call.update(change)
    return lambda: specops.dspark_swa_indices_multi(**call)


def _format_multi(**change):
    call = dict(slot_mappings=[torch.arange(6), torch.arange(6)], block_sizes=[4, 2])
    call.update(change)
    return lambda: specops.format_slot_mapping_blocks_multi(**call)


def _fused(**change):
    call = dict(num_computed_tokens=_i32(4, 9), num_accepted_tokens=_i32(0, 0), prev_positions=_i32(-1, -1),
                valid_sampled_token_count=_i32(0, 0), prev_num_draft_tokens=_i32(0, 0),
                cpu_num_computed_tokens=_i32(4, 9), query_start_loc=_i32(0, 2, 3),
                block_tables=[torch.arange(8, dtype=torch.int32).view(2, 4)], block_sizes=16)
    call.update(change)
    return lambda: specops.prepare_spec_decode_inputs(**call)


SIZING_CASES = [
    ("dspark widths[1] negative", "widths[1]", _dspark_multi(widths=[4, -3])),
    ("dspark widths[0] 2^40", "widths[0]", _dspark_multi(widths=[2**40, 3])),
    ("dspark widths[1] past int32 rows", "widths[1]", _dspark_multi(widths=[4, 2**31 - 1])),
    ("dspark widths[0] float", "widths[0]", _dspark_multi(widths=[4.0, 3])),
    ("dspark one width as a float", "widths", _dspark_multi(widths=4.5)),
    ("dspark windows[1] negative", "windows[1]", _dspark_multi(widths=None, windows=[2, -129])),
    ("dspark query_start_loc[R] negative", "query_start_loc", _dspark_multi(query_start_loc=_i32(0, 2, -3),
                                                                           seq_lens=_i32(6, 8))),
    ("dspark query_start_loc not from 0", "query_start_loc", _dspark_multi(query_start_loc=_i32(5, 6, 2**31 - 1))),
    ("dspark query_start_loc None", "query_start_loc", _dspark_multi(query_start_loc=None)),
    ("dspark block_tables None", "block_tables", _dspark_multi(block_tables=None)),
    ("dspark block_tables[1] None", "block_tables[1]", _dspark_multi(block_tables=[_i32(1, 2).view(1, 2), None])),
    ("dspark num_tokens float", "num_tokens", _dspark_multi(num_tokens=4.0)),
    ("dspark num_tokens negative", "num_tokens", _dspark_multi(num_tokens=-8)),
    ("dspark num_tokens past int32", "num_tokens", _dspark_multi(num_tokens=2**40)),
    ("dspark cp_size float", "cp_size", _dspark_multi(cp_size=2.0)),
    ("dspark cp_size 0", "cp_size", _dspark_multi(cp_size=0)),
    ("dspark num_speculative_tokens None", "num_speculative_tokens", _dspark_multi(num_speculative_tokens=None)),
    ("dspark out None in a list", "out[1]", _dspark_multi(out=[torch.zeros(4, 1, 4, dtype=torch.int32), None],
                                                          num_tokens=4)),
    ("format num_slots negative", "num_slots", _format_multi(num_slots=-1)),
    ("format num_slots 2^40", "num_slots", _format_multi(num_slots=2**40)),
    ("format num_slots float", "num_slots", _format_multi(num_slots=4.0)),
    ("format slot_mappings None", "slot_mappings", _format_multi(slot_mappings=None)),
    ("format slot_mappings[1] None", "slot_mappings[1]", _format_multi(slot_mappings=[torch.arange(6), None])),
    ("format block_sizes[1] float", "block_sizes[1]", _format_multi(block_sizes=[4, 2.0])),
    ("fused block_tables None", "block_tables", _fused(block_tables=None)),
    ("fused block_tables[0] None", "block_tables[0]", _fused(block_tables=[None])),
    ("fused num_tokens_padded float", "num_tokens_padded", _fused(num_tokens_padded=4.0)),
    ("fused num_tokens_padded 2^40 on the host", "num_tokens_padded", _fused(num_tokens_padded=-(2**40))),
    ("fused num_reqs_padded float", "num_reqs_padded", _fused(num_reqs_padded=2.5)),
    ("fused slot_mappings[0] None", "slot_mappings[0]", _fused(slot_mappings=[None],
                                                               positions=torch.zeros(3, dtype=torch.int64),
                                                               seq_lens=_i32(0, 0))),
]


@pytest.mark.parametrize("label,name,call", SIZING_CASES, ids=[c[0] for c in SIZING_CASES])
def test_multi_group_wrappers_check_what_they_size_outputs_from(backend, label, name, call):
    with pytest.raises(ValueError) as error:
        call()
    assert re.search(names_pattern(name), str(error.value)), f"{label}: the error does not name {name}: {error.value}"


def test_the_valid_calls_of_the_sizing_cases_are_taken(backend):
    """The cases above differ from these in one argument each."""
    out, out_lens = _dspark_multi()()
    assert [t.shape for t in out] == [(3, 1, 4), (3, 1, 3)] and [t.shape for t in out_lens] == [(3,), (3,)]
    assert [t.shape for t in _format_multi()()] == [(6, 2), (6, 2)]
    assert _fused()().positions.shape == (3,)
