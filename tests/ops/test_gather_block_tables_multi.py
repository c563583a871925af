"""gather_block_tables_multi: every KV-cache group's batch table in one call. Hand-computed rows of
three groups (full, sliding-window, narrow), random groups (0 to 6: more than one launch) equal
to one gather_block_tables call per group on every backend and byte-equal across the backends,
one op call and the launches it makes, opcheck, compile, bad input, aliasing."""

from __future__ import annotations

import re

import pytest
import torch
from conftest import BACKENDS, examples
from host_syncs import OpLog
from hypothesis import given, settings
from hypothesis import strategies as st
from op_specs._spec import get_arg, set_arg
from op_specs.gather_block_tables import _gather_valid, _gather_values
from op_specs.gather_block_tables_multi import _gather_multi_valid
from strategies import assert_same, make_block_source

import specops
from specops.triton_kernels import gather_block_tables_multi as triton_module
from specops.triton_kernels._groups import MAX_GROUPS

NULL = specops.NULL_BLOCK_ID
STALE = 777

# Batch: request rows 2, -1 (none), 0; padded to 4 rows; out rows past 4 are not this step's.
IDX_MAPPING = [2, -1, 0]
NUM_COMPUTED_TOKENS = [13, 5, 30]
# Group 0: full attention, 4 columns.
SRC_0 = [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
COUNTS_0 = [3, 4, 2]
# Group 1: a sliding window of reach 6 over blocks of 4: row 2 (first position 30) masks
# (30 - 6) // 4 = 6 entries, all of its 5; row 0 (position 13) masks 7 // 4 = 1.
SRC_1 = [[21, 22, 23, 24, 25], [26, 27, 28, 29, 30], [31, 32, 33, 34, 35]]
COUNTS_1 = [4, 1, 5]
# Group 2: full attention, out wider than its 2-column source.
SRC_2 = [[41, 42], [43, 44], [45, 46]]
COUNTS_2 = [1, 2, 2]


def _i32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def _hand_call() -> dict:
    return dict(src_block_tables=[_i32(SRC_0), _i32(SRC_1), _i32(SRC_2)],
                num_blocks=[_i32(COUNTS_0), _i32(COUNTS_1), _i32(COUNTS_2)], idx_mapping=_i32(IDX_MAPPING),
                out=[torch.full((5, 4), STALE, dtype=torch.int32), torch.full((6, 5), STALE, dtype=torch.int32),
                     torch.full((4, 3), STALE, dtype=torch.int32)],
                num_reqs_padded=4, num_computed_tokens=_i32(NUM_COMPUTED_TOKENS), sliding_window_reach=[0, 6, 0],
                block_sizes=[16, 4, 16])


def test_hand_computed_three_groups(backend):
    call = _hand_call()
    out = specops.gather_block_tables_multi(**call)
    assert out == call["out"]
    assert out[0].tolist() == [[9, 10, NULL, NULL], [NULL] * 4, [1, 2, 3, NULL], [NULL] * 4, [STALE] * 4]
    assert out[1].tolist() == [[NULL] * 5, [NULL] * 5, [NULL, 22, 23, 24, NULL], [NULL] * 5, [STALE] * 5,
                               [STALE] * 5]
    assert out[2].tolist() == [[45, 46, NULL], [NULL] * 3, [41, NULL, NULL], [NULL] * 3]


def test_without_counts_no_group_masks(backend):
    call = dict(_hand_call(), num_computed_tokens=None)
    out = specops.gather_block_tables_multi(**call)
    assert out[1][:4].tolist() == [[31, 32, 33, 34, 35], [NULL] * 5, [21, 22, 23, 24, NULL], [NULL] * 5]


def _random_call(draw, num_groups: int, with_counts: bool) -> dict:
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    rows = draw(st.integers(1, 6))
    num_reqs = draw(st.integers(0, 7))
    padded = num_reqs + draw(st.integers(0, 3))
    call = dict(src_block_tables=[], num_blocks=[], out=[], sliding_window_reach=[], block_sizes=[],
                idx_mapping=torch.randint(-1, rows, (num_reqs,), generator=generator).to(
                    draw(st.sampled_from([torch.int32, torch.int64]))),
                num_reqs_padded=padded, num_computed_tokens=None)
    for _ in range(num_groups):
        cols, out_cols = draw(st.integers(0, 6)), draw(st.integers(0, 9))
        table, _ = make_block_source(generator, rows + draw(st.integers(0, 2)), cols)
        call["src_block_tables"].append(table)
        call["num_blocks"].append(
            torch.randint(0, min(cols, out_cols) + 1, (table.size(0),), dtype=torch.int32, generator=generator))
        # Dirty rows everywhere: a larger batch's leftovers in and past the padded extent.
        call["out"].append(torch.randint(1, 1 << 20, (padded + draw(st.integers(0, 2)), out_cols), dtype=torch.int32,
                                         generator=generator))
        sliding = draw(st.booleans())
        call["sliding_window_reach"].append(draw(st.sampled_from([1, 5, 40])) if sliding else 0)
        call["block_sizes"].append(draw(st.sampled_from([1, 4, 16])) if sliding else draw(st.sampled_from([0, 16])))
    if with_counts:
        most_rows = max([rows, *(t.size(0) for t in call["src_block_tables"])])
        call["num_computed_tokens"] = torch.randint(0, 100, (most_rows + draw(st.integers(0, 2)),), dtype=torch.int32,
                                                    generator=generator)
    return call


def _copied(call: dict) -> dict:
    return {name: [t.clone() for t in value] if name in ("src_block_tables", "num_blocks", "out")
            else value.clone() if isinstance(value, torch.Tensor) else value for name, value in call.items()}


def _single_op_outputs(call: dict) -> list[torch.Tensor]:
    """One gather_block_tables call per group on copies of the outputs."""
    result = []
    for g, src in enumerate(call["src_block_tables"]):
        out = call["out"][g].clone()
        specops.gather_block_tables(src, call["num_blocks"][g], call["idx_mapping"], out,
                                    num_reqs_padded=call["num_reqs_padded"],
                                    num_computed_tokens=call["num_computed_tokens"],
                                    sliding_window_reach=call["sliding_window_reach"][g],
                                    block_size=call["block_sizes"][g] or None)
        result.append(out)
    return result


@settings(max_examples=examples(40))  # the Triton interpreter runs each example's programs one by one
@given(data=st.data(), num_groups=st.integers(0, 6), with_counts=st.booleans())
def test_every_group_is_the_single_op_on_every_backend(data, num_groups, with_counts):
    call = _random_call(data.draw, num_groups, with_counts)
    results = {}
    for name in BACKENDS:
        with specops.backend(name):
            expected = _single_op_outputs(call)
            mine = _copied(call)
            out = specops.gather_block_tables_multi(**mine)
        for g in range(num_groups):
            assert_same(out[g], expected[g], f"{name}: group {g} against gather_block_tables")
        results[name] = out
    for name, out in results.items():  # byte equality of the implementations
        for g in range(num_groups):
            assert_same(out[g], results[BACKENDS[0]][g], f"group {g}: {name} against {BACKENDS[0]}")


def test_one_op_call_gathers_every_group():
    call = _hand_call()
    with specops.backend("native"), OpLog() as log:
        specops.gather_block_tables_multi(**call)
    assert log.op_names() == ["gather_block_tables_multi"]


class _CountedKernel:
    """The multi-group kernel with its launches counted (each launch's NUM_GROUPS kept)."""

    def __init__(self, kernel):
        self.kernel, self.groups = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.groups.append(kwargs["NUM_GROUPS"])
            return self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.parametrize("num_groups", [0, 1, 3, MAX_GROUPS, MAX_GROUPS + 2])
def test_one_launch_per_max_groups(monkeypatch, num_groups):
    counted = _CountedKernel(triton_module._gather_block_tables_multi_kernel)
    monkeypatch.setattr(triton_module, "_gather_block_tables_multi_kernel", counted)
    hand = _hand_call()
    call = dict(hand, **{name: [hand[name][g % 3] for g in range(num_groups)]
                         for name in ("src_block_tables", "num_blocks", "sliding_window_reach", "block_sizes")})
    call["out"] = [hand["out"][g % 3].clone() for g in range(num_groups)]
    with specops.backend("triton"):
        out = specops.gather_block_tables_multi(**call)
    assert counted.groups == [min(MAX_GROUPS, num_groups - start) for start in range(0, num_groups, MAX_GROUPS)]
    for g in range(num_groups):
        with specops.backend("native"):
            (expected,) = _single_op_outputs(dict(call, **{name: [call[name][g]] for name in (
                "src_block_tables", "num_blocks", "sliding_window_reach", "block_sizes")}, out=[hand["out"][g % 3]]))
        assert_same(out[g], expected, f"group {g}")


def test_no_groups_checks_the_batch_and_writes_nothing(backend):
    assert specops.gather_block_tables_multi([], [], _i32(IDX_MAPPING), [], num_reqs_padded=3) == []
    assert specops.gather_block_tables_multi([], [], _i32(IDX_MAPPING), []) == []
    with pytest.raises(ValueError, match="num_reqs_padded"):
        specops.gather_block_tables_multi([], [], _i32(IDX_MAPPING), [], num_reqs_padded=2)


def test_num_reqs_padded_defaults_to_the_outputs_rows(backend):
    call = _hand_call()
    call["out"] = [t[:4] for t in call["out"]]
    del call["num_reqs_padded"]
    specops.gather_block_tables_multi(**call)
    assert call["out"][0][3].tolist() == [NULL] * 4
    with pytest.raises(ValueError, match="num_reqs_padded must be given"):
        specops.gather_block_tables_multi(**dict(_hand_call(), num_reqs_padded=None))


def _opcheck_args(idx_dtype, masked):
    call = _hand_call()
    return (call["src_block_tables"], call["num_blocks"], call["idx_mapping"].to(idx_dtype), call["out"], 4,
            call["num_computed_tokens"] if masked else None, call["sliding_window_reach"], call["block_sizes"])


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("masked", [False, True])
def test_opcheck(idx_dtype, masked):
    torch.library.opcheck(torch.ops.specops.gather_block_tables_multi.default, _opcheck_args(idx_dtype, masked))


def test_compiles_without_graph_break():
    tables, counts, idx_mapping, out, padded, num_computed_tokens, reach, block_sizes = _opcheck_args(torch.int32, True)

    def step(table_0, table_1, table_2, idx_mapping, num_computed_tokens, out_0, out_1, out_2):
        specops.gather_block_tables_multi([table_0, table_1, table_2], counts, idx_mapping, [out_0, out_1, out_2],
                                          num_reqs_padded=padded, num_computed_tokens=num_computed_tokens + 0,
                                          sliding_window_reach=reach, block_sizes=block_sizes)
        return out_0 + 1, out_1 * 2, out_2 - 1

    args = (*tables, idx_mapping, num_computed_tokens, *out)
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(*(t.clone() for t in args))
    for actual, wanted in zip(compiled(*args), expected):
        assert_same(actual, wanted)


def _set(name, index, value):
    return lambda call: set_arg(call, f"{name}[{index}]", value)


def _out_over(key):
    """out[1] placed over another tensor of the call (which keeps its values)."""
    def change(call):
        source = get_arg(call, key)
        buffer = torch.full((source.numel() + 40,), STALE, dtype=torch.int32)
        buffer[:source.numel()] = source.flatten()
        call["out"][1] = buffer[: 6 * 5].view(6, 5)
        set_arg(call, key, buffer[:source.numel()].view(source.shape))
    return change


BAD_INPUTS = [
    ("out must have one entry per source table", lambda call: call.update(out=call["out"][:2])),
    ("block_sizes", lambda call: call.update(block_sizes=[16, 4])),
    (r"num_blocks\[2\]", _set("num_blocks", 2, _i32([1, 2]))),
    (r"src_block_tables\[1\]", _set("src_block_tables", 1, torch.tensor(SRC_1, dtype=torch.int64))),
    (r"out\[2\]", _set("out", 2, torch.full((3, 3), STALE, dtype=torch.int32))),  # fewer rows than num_reqs_padded
    (r"out\[0\]", _set("out", 0, torch.full((5, 4), STALE, dtype=torch.int64))),
    (r"sliding_window_reach\[1\]", lambda call: call.update(sliding_window_reach=[0, -6, 0])),
    (r"block_sizes\[1\] must be given", lambda call: call.update(block_sizes=[16, 0, 16])),
    (r"num_computed_tokens must have at least src_block_tables\[0\]", lambda call: call.update(
        num_computed_tokens=_i32([1, 2]))),
    ("idx_mapping", lambda call: call.update(idx_mapping=torch.tensor(IDX_MAPPING, dtype=torch.int16))),
    ("num_reqs_padded", lambda call: call.update(num_reqs_padded=2)),
    (r"out\[1\] must not share memory with out\[0\]", lambda call: call["out"].__setitem__(1, call["out"][0])),
    (r"out\[1\] must not share memory with src_block_tables\[2\]", _out_over("src_block_tables[2]")),
    (r"out\[1\] must not share memory with num_blocks\[0\]", _out_over("num_blocks[0]")),
    (r"out\[1\] must not share memory with num_computed_tokens", _out_over("num_computed_tokens")),
    (r"out\[1\] must not share memory with idx_mapping", _out_over("idx_mapping")),
]


def _assert_rejected(call, argument) -> str:
    written = [t.clone() for t in call["out"]]
    with pytest.raises(ValueError, match=argument) as error:
        specops.gather_block_tables_multi(**call)
    for g, (t, before) in enumerate(zip(call["out"], written)):
        assert torch.equal(t, before), f"a rejected call wrote out[{g}]"
    return str(error.value)


@pytest.mark.parametrize("argument,change", BAD_INPUTS, ids=[f"{i}" for i in range(len(BAD_INPUTS))])
def test_bad_input_names_the_argument_and_writes_nothing(backend, argument, change):
    call = _hand_call()
    change(call)
    _assert_rejected(call, argument)


# gather_block_tables' own rejected values, each placed in either group of a two-group call (the
# other group the multi op table's second, valid for the batch), names that group's arguments.
SINGLE_VALUES = [(case, group) for case in _gather_values() for group in (0, 1)]
PER_GROUP = {"src_block_table": "src_block_tables", "num_blocks": "num_blocks", "out": "out",
             "sliding_window_reach": "sliding_window_reach", "block_size": "block_sizes"}


@pytest.mark.parametrize("case,group", SINGLE_VALUES, ids=[f"{c.label}-group{g}" for c, g in SINGLE_VALUES])
def test_native_rejects_the_single_ops_values_in_either_group_before_any_write(case, group):
    single = _gather_valid()
    case.change(single)
    multi = _gather_multi_valid()
    call = dict(idx_mapping=single["idx_mapping"], num_reqs_padded=single["num_reqs_padded"],
                num_computed_tokens=torch.cat([single["num_computed_tokens"], _i32([7])]))
    for name, plural in PER_GROUP.items():
        entries = [multi[plural][1], multi[plural][1]]
        entries[group] = single[name]
        call[plural] = entries
    names = [f"{PER_GROUP[name]}[{group}]" if name in PER_GROUP else name for name in case.names]
    if names == ["idx_mapping"]:
        names.append(f"src_block_tables[{group}]")  # past this group's table, not the other's
    with specops.backend("native"):
        message = _assert_rejected(call, None)
    for name in names:
        assert re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", message), f"{name}: {message}"
