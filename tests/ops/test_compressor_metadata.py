"""compressor_metadata: vllm-ascend's AI-core kernel (no golden file: it cannot run here), cases
worked by hand in the shape of vllm-ascend's own test
(tests/e2e/nightly/single_node/ops/singlecard_ops/test_compressor_metadata.py: C4 / C128 prefill,
decode, rows crossing a block, invalid rows), random calls against a plain-Python restatement of
the contract on every backend, opcheck and compile."""

from __future__ import annotations

import pytest
import torch
from conftest import BACKENDS, examples
from hypothesis import given, settings
from hypothesis import strategies as st

import specops

BLOCK = 128
FLAT, PAIRS = 1, 2


def _rope(rows: int = 2048, dim: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.arange(rows * dim, dtype=torch.float32).reshape(rows, dim)
    return values.to(torch.bfloat16), (values * 0.25).to(torch.bfloat16)


def _run(ratio, query_start_loc, start_pos, block_table, num_rows, fmt=PAIRS, rope=None):
    cos, sin = rope if rope is not None else _rope()
    return specops.compressor_metadata(cos, sin, torch.tensor(query_start_loc, dtype=torch.int32),
                                       torch.tensor(start_pos, dtype=torch.int32),
                                       torch.tensor(block_table, dtype=torch.int32), BLOCK, fmt, ratio, num_rows,
                                       len(start_pos))


def _invalid(count: int) -> list[list[int]]:
    return [[-1, BLOCK - 1]] * count


def test_c4_prefill_of_131_tokens(backend):
    # From position 0, 131 tokens complete 131 // 4 = 32 groups: compressed positions 0..31 in
    # block 1 (the table's first entry); the 33rd row is padding.
    out = _run(4, (0, 131), (0,), ((1, 0, 0, 0, 0, 0),), 33)
    assert out.slot_mapping.tolist() == [[1, p] for p in range(32)] + _invalid(1)
    cos, sin = _rope()
    # Row p's RoPE rows are those of the group's first position, 4p.
    assert torch.equal(out.compress_cos[:32, 0, 0], cos[0:128:4])
    assert torch.equal(out.compress_sin[:32, 0, 0], sin[0:128:4])
    assert out.compress_cos[32].eq(1).all() and out.compress_sin[32].eq(0).all()
    assert out.compress_cos.shape == (33, 1, 1, 8)
    flat = _run(4, (0, 131), (0,), ((1, 0, 0, 0, 0, 0),), 33, fmt=FLAT)
    assert flat.slot_mapping.tolist() == [BLOCK + p for p in range(32)] + [-1]


def test_two_c4_prefills_packed_in_request_order(backend):
    out = _run(4, (0, 131, 262), (0, 0), ((1, 0, 0, 0, 0, 0), (3, 0, 0, 0, 0, 0)), 67)
    assert out.slot_mapping.tolist() == [[1, p] for p in range(32)] + [[3, p] for p in range(32)] + _invalid(3)


def test_decodes_complete_a_group_only_at_its_boundary(backend):
    # 2 tokens from 133 end at 135: no group completes (135 // 4 = 133 // 4 = 33). From 130, 2
    # tokens complete group 32 (132 // 4 - 130 // 4 = 1).
    assert _run(4, (0, 2, 4, 6, 8), (133, 0, 0, 0), ((1,) * 6, (0,) * 6, (0,) * 6, (0,) * 6), 2).slot_mapping.tolist() \
        == _invalid(2)
    out = _run(4, (0, 2, 4), (130, 133), ((5, 0, 0, 0, 0, 0), (6, 0, 0, 0, 0, 0)), 3)
    assert out.slot_mapping.tolist() == [[5, 32]] + _invalid(2)


def test_c128_groups(backend):
    assert _run(128, (0, 131), (0,), ((2,),), 2).slot_mapping.tolist() == [[2, 0]] + _invalid(1)
    assert _run(128, (0, 131, 262), (0, 0), ((2,), (4,)), 4).slot_mapping.tolist() == [[2, 0], [4, 0]] + _invalid(2)
    # From 254, 2 tokens end at 256: group 1 completes, offset 1 of block 7; from 257, none.
    assert _run(128, (0, 2, 4), (254, 257), ((7,), (8,)), 2).slot_mapping.tolist() == [[7, 1]] + _invalid(1)


def test_rows_crossing_a_block_of_the_logical_table(backend):
    # C4: 8 tokens from 508 complete groups 127 and 128: the last offset of block 10, the first of 11.
    assert _run(4, (0, 8), (508,), ((10, 11),), 2).slot_mapping.tolist() == [[10, 127], [11, 0]]
    # C128: 256 tokens from 16256 complete groups 127 and 128.
    rope = _rope(rows=16512)
    out = _run(128, (0, 256), (16256,), ((20, 21),), 2, rope=rope)
    assert out.slot_mapping.tolist() == [[20, 127], [21, 0]]
    assert torch.equal(out.compress_cos[:, 0, 0], rope[0][[127 * 128, 128 * 128]])


def test_invalid_rows(backend):
    # A negative block id, a position past the table's width, and one past the RoPE table.
    out = _run(4, (0, 8, 12, 16), (0, 508, 600), ((-1, 0), (9, 9), (9, 9)), 4, rope=_rope(rows=610))
    # Request 0: groups 0, 1 in block -1 (invalid); request 1: groups 127 (block 9, offset 127)
    # and... only one (512 // 4 - 508 // 4 = 1); request 2: group 150 at block index 1 is inside
    # the table but its RoPE row 600 is the table's row 600 < 610: valid.
    assert out.slot_mapping.tolist() == _invalid(2) + [[9, 127], [9, 22]]
    past_rope = _run(4, (0, 4), (608,), ((9, 9, 9, 9, 9, 9),), 1, rope=_rope(rows=610))
    assert past_rope.slot_mapping.tolist() == [[9, 24]]
    past_rope = _run(4, (0, 4), (612,), ((9, 9, 9, 9, 9, 9),), 1, rope=_rope(rows=610))
    assert past_rope.slot_mapping.tolist() == _invalid(1) and past_rope.compress_cos.eq(1).all()
    past_table = _run(4, (0, 4), (512,), ((9,),), 1)
    assert past_table.slot_mapping.tolist() == _invalid(1)


def restated(rope_cos, rope_sin, query_start_loc, start_pos, block_table, ratio, num_rows, fmt):
    """The contract row by row in plain Python (ints that never wrap): (cos rows, sin rows,
    slots). Rows past num_rows are never built (a length near 2^32 completes 2^30 groups)."""
    dim = len(rope_cos[0])
    cos, sin, slots = [], [], []
    for r, start in enumerate(start_pos):
        length = query_start_loc[r + 1] - query_start_loc[r]
        count = (start + length) // ratio - start // ratio if start >= 0 and length > 0 else 0
        for i in range(min(count, max(num_rows - len(slots), 0))):
            p = start // ratio + i
            ok = p // BLOCK < len(block_table[r]) and p * ratio < len(rope_cos)
            block = block_table[r][p // BLOCK] if ok else -1
            ok = ok and block >= 0 and (fmt == PAIRS or block * BLOCK + p % BLOCK < 2**31)
            cos.append(rope_cos[p * ratio] if ok else [1.0] * dim)
            sin.append(rope_sin[p * ratio] if ok else [0.0] * dim)
            slots.append(([block, p % BLOCK] if fmt == PAIRS else block * BLOCK + p % BLOCK) if ok else
                         ([-1, BLOCK - 1] if fmt == PAIRS else -1))
    pad = ([-1, BLOCK - 1] if fmt == PAIRS else -1)
    rows = len(slots)
    return ((cos + [[1.0] * dim] * num_rows)[:num_rows], (sin + [[0.0] * dim] * num_rows)[:num_rows],
            (slots + [pad] * num_rows)[:num_rows]) if rows < num_rows else (cos[:num_rows], sin[:num_rows],
                                                                              slots[:num_rows])


@st.composite
def calls(draw):
    ratio = draw(st.sampled_from([4, 128]))
    reqs = draw(st.integers(0, 5))
    lengths = [draw(st.integers(0, 300)) for _ in range(reqs)]
    starts = [draw(st.one_of(st.integers(-3, 700), st.just(0))) for _ in range(reqs)]
    width = draw(st.integers(1, 8))
    table = [[draw(st.integers(-1, 50)) for _ in range(width)] for _ in range(reqs)]
    rope_rows = draw(st.integers(1, 1100))
    num_rows = draw(st.integers(0, 80))
    fmt = draw(st.sampled_from([FLAT, PAIRS]))
    return ratio, [0] + [sum(lengths[:i + 1]) for i in range(reqs)], starts, table, rope_rows, num_rows, fmt


@pytest.mark.parametrize("name", BACKENDS)
@settings(max_examples=examples(10))
@given(call=calls())
def test_random_calls_against_the_restatement(name, call):
    ratio, qsl, starts, table, rope_rows, num_rows, fmt = call
    cos, sin = _rope(rows=rope_rows, dim=4)
    cos, sin = cos.float(), sin.float()
    table_tensor = torch.tensor(table, dtype=torch.int32).reshape(len(starts), -1 if starts else 1)
    with specops.backend(name):
        out = specops.compressor_metadata(cos, sin, torch.tensor(qsl, dtype=torch.int32),
                                          torch.tensor(starts, dtype=torch.int32), table_tensor, BLOCK, fmt, ratio,
                                          num_rows, len(starts))
    expected = restated(cos.tolist(), sin.tolist(), qsl, starts, table, ratio, num_rows, fmt)
    assert out.compress_cos.reshape(num_rows, 4).tolist() == expected[0]
    assert out.compress_sin.reshape(num_rows, 4).tolist() == expected[1]
    assert out.slot_mapping.tolist() == expected[2]


@pytest.mark.parametrize("argument,change", [("slot_mapping_format", dict(fmt=3)), ("num_reqs_actual", dict(reqs=5)),
                                             ("kv_block_size", dict(block_size=0))])
def test_bad_arguments_name_themselves(backend, argument, change):
    cos, sin = _rope()
    with pytest.raises(ValueError, match=argument):
        specops.compressor_metadata(cos, sin, torch.tensor([0, 4], dtype=torch.int32),
                                    torch.tensor([0], dtype=torch.int32), torch.tensor([[1]], dtype=torch.int32),
                                    change.get("block_size", BLOCK), change.get("fmt", PAIRS), 4, 2,
                                    change.get("reqs", 1))


def _schema_args():
    cos, sin = _rope(rows=64, dim=4)
    return (cos, sin, torch.tensor([0, 9, 12], dtype=torch.int32), torch.tensor([3, 0], dtype=torch.int32),
            torch.tensor([[4, 5], [6, 7]], dtype=torch.int32), BLOCK, PAIRS, 4, 2,
            torch.empty(4, 1, 1, 4, dtype=torch.bfloat16), torch.empty(4, 1, 1, 4, dtype=torch.bfloat16),
            torch.empty(4, 2, dtype=torch.int32))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.compressor_metadata.default, _schema_args())


def test_compiles_without_graph_break():
    args = _schema_args()

    def step(qsl):
        out = specops.compressor_metadata(args[0], args[1], qsl + 0, args[3], args[4], BLOCK, PAIRS, 4, 4, 2)
        return out.slot_mapping + 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    assert compiled(args[2]).tolist() == step(args[2]).tolist()
