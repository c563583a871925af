"""tree_slot_mappings: worked examples (two groups, CP), random trees of up to five groups
against the plain-Python contract on every backend, the device paths' PAD for values the host op
rejects, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes
from tree_kv_expectations import tree_slots

import specops

PAD = specops.PAD_SLOT_ID
I32, I64 = torch.int32, torch.int64


def t32(values):
    return torch.tensor(values, dtype=I32)


def test_example_two_groups_padded(backend):
    # Request 0: positions 5, 6, 7; request 1: 14, 15, 16 (D = 3).
    tables = [t32([[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]]), t32([[3, 4, 5], [6, 7, 8]])]
    slots = specops.tree_slot_mappings(torch.tensor([5, 14]), tables, [4, 8], 3, num_tokens_padded=8)
    # Block size 4: 5 -> block 1 (id 11) offset 1; 14 -> block 3 (id 23) offset 2; 16 -> block 4 (id 24).
    assert slots[0].tolist() == [45, 46, 47, 94, 95, 96, PAD, PAD]
    # Block size 8: 5 -> block 0 (id 3) offset 5; 14 -> block 1 (id 7) offset 6; 16 -> block 2 (id 8).
    assert slots[1].tolist() == [29, 30, 31, 62, 63, 64, PAD, PAD]
    assert slots[0].dtype == I64 and slots[0].numel() == 8


def test_example_context_parallel_rank_one_through_idx_mapping(backend):
    # W = 2, I = 1: rank 1 stores the odd positions, position p at local position p // 2.
    # Group 1 is not CP-sharded (one rank stores all of it), group 2 is disabled.
    tables = [t32([[1, 2], [7, 9]]), t32([[1, 2], [7, 9]]), t32([[1, 2], [7, 9]])]
    out = [torch.full((4,), 555, dtype=I32) for _ in tables]
    slots = specops.tree_slot_mappings(t32([3]), tables, 4, 4, idx_mapping=t32([1]), slot_mappings=out,
                                       cp_world_size=2, cp_rank=1, cp_sharded=[True, False, True],
                                       slot_mapping_enabled=[True, True, False])
    assert slots[0] is out[0]
    assert out[0].tolist() == [29, PAD, 30, PAD]  # 3 -> local 1, 5 -> local 2 of block 7
    assert out[1].tolist() == [31, 36, 37, 38]  # 3 of block 7, then 4, 5, 6 of block 9
    assert out[2].tolist() == [PAD] * 4


def test_an_unmapped_row_is_pad(backend):
    slots = specops.tree_slot_mappings(t32([0, 2]), [t32([[1, 2], [3, 4]])], 4, 2, idx_mapping=t32([-1, 0]))
    assert slots[0].tolist() == [PAD, PAD, 6, 7]


@st.composite
def trees(draw):
    num_groups = draw(st.integers(1, 5))
    num_reqs = draw(st.integers(0, 5))
    draft_token_num = draw(st.integers(1, 9))
    world = draw(st.sampled_from([1, 2, 4]))
    block_sizes = [draw(st.sampled_from([1, 2, 4, 8])) for _ in range(num_groups)]
    interleave = draw(st.sampled_from([i for i in (1, 2) if all(b % i == 0 for b in block_sizes)]))
    rows = num_reqs + 2
    idx = draw(st.permutations(list(range(rows)) + [-1]))[:num_reqs] if draw(st.booleans()) else None
    return dict(num_groups=num_groups, draft_token_num=draft_token_num, world=world, rank=draw(st.integers(0, world - 1)),
                interleave=interleave, block_sizes=block_sizes, rows=rows,
                verified=[draw(st.integers(0, 40)) for _ in range(num_reqs)], idx=idx,
                sharded=[draw(st.booleans()) for _ in range(num_groups)],
                enabled=[draw(st.booleans()) for _ in range(num_groups)],
                len_dtype=draw(st.sampled_from([I64, I32])), slot_dtype=draw(st.sampled_from([I64, I32])),
                extra=draw(st.integers(0, 3)), seed=draw(st.integers(0, 2**16)),
                with_num_blocks=draw(st.booleans()))


@settings(max_examples=examples(25))
@given(tree=trees())
def test_random_trees_match_the_contract(backend, tree):
    generator = torch.Generator().manual_seed(tree["seed"])
    draft_token_num = tree["draft_token_num"]
    num_tokens = len(tree["verified"]) * draft_token_num
    # Tables wide enough for every position below 40 + D on one rank, random distinct block ids.
    cols = [-(-(40 + draft_token_num) // bs) for bs in tree["block_sizes"]]
    tables = [torch.randperm(tree["rows"] * c, generator=generator).view(tree["rows"], c).to(I32) + 100 * g
              for g, c in enumerate(cols)]
    num_blocks = [t32([c] * tree["rows"]) for c in cols] if tree["with_num_blocks"] else None
    slots = [torch.full((num_tokens + tree["extra"],), 555, dtype=tree["slot_dtype"]) for _ in tables]
    result = specops.tree_slot_mappings(
        torch.tensor(tree["verified"], dtype=tree["len_dtype"]), tables, tree["block_sizes"], draft_token_num,
        idx_mapping=t32(tree["idx"]) if tree["idx"] is not None else None, slot_mappings=slots,
        cp_world_size=tree["world"], cp_rank=tree["rank"], cp_interleave=tree["interleave"],
        cp_sharded=tree["sharded"], slot_mapping_enabled=tree["enabled"], num_blocks=num_blocks)
    want = tree_slots(tree["verified"], [t.tolist() for t in tables], tree["block_sizes"], draft_token_num,
                      idx_mapping=tree["idx"], cp=(tree["world"], tree["rank"], tree["interleave"]),
                      cp_sharded=tree["sharded"], enabled=tree["enabled"])
    for g in range(tree["num_groups"]):
        assert result[g].tolist() == want[g] + [PAD] * tree["extra"], f"group {g}"


def test_every_rank_maps_each_position_once(backend):
    """Under CP the ranks partition the tree: each token has a slot on exactly one rank."""
    table = [t32([[5, 6, 7, 8], [9, 10, 11, 12]])]
    verified = t32([3, 9])
    per_rank = [specops.tree_slot_mappings(verified, table, 4, 6, cp_world_size=4, cp_rank=rank, cp_interleave=2)[0]
                for rank in range(4)]
    stored = torch.stack([(slots != PAD) for slots in per_rank]).sum(0)
    assert stored.tolist() == [1] * 12


@pytest.mark.parametrize("change,want", [
    (dict(verified_seq_len=torch.tensor([-1, 2])), [PAD, PAD, 14, 15]),
    (dict(verified_seq_len=torch.tensor([2**31 - 1, 2])), [PAD, PAD, 14, 15]),
    (dict(verified_seq_len=torch.tensor([2**63 - 1, 2])), [PAD, PAD, 14, 15]),
    (dict(verified_seq_len=torch.tensor([8, 2])), [PAD, PAD, 14, 15]),  # past the table's 2 blocks of 4
    (dict(idx_mapping=t32([5, 1])), [PAD, PAD, 14, 15]),  # a row past the table
    (dict(num_blocks=[t32([2, 0])]), [2, 3, PAD, PAD]),  # past row 1's allocated blocks
    (dict(slot_mappings=[torch.full((4,), 555, dtype=I32)], block_tables=[t32([[2**29, 0], [3, 4]])]),
     [PAD, PAD, 14, 15]),  # past an int32 output
])
def test_values_the_host_op_rejects_are_pad_on_the_device_paths(change, want):
    call = dict(verified_seq_len=torch.tensor([2, 2]), block_tables=[t32([[0, 1], [3, 4]])], block_sizes=4,
                draft_token_num=2)
    call.update(change)
    for name in device_backends():
        with specops.backend(name):
            slots = specops.tree_slot_mappings(**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                                  for k, v in call.items()})
        assert slots[0].tolist() == want, name
    with specops.backend("native"):
        out = [torch.full((4,), 555, dtype=call["slot_mappings"][0].dtype if "slot_mappings" in call else I64)]
        with pytest.raises(ValueError):
            specops.tree_slot_mappings(**{**call, "slot_mappings": out})
        assert out[0].tolist() == [555] * 4


@pytest.mark.parametrize("change,argument", [
    (dict(verified_seq_len=torch.tensor([-3, 2])), "verified_seq_len"),
    (dict(verified_seq_len=torch.tensor([7, 2])), "block_tables"),
    (dict(idx_mapping=t32([0, 2])), "idx_mapping"),
    (dict(num_blocks=[t32([1, 0])]), "num_blocks"),
    (dict(block_tables=[t32([[2**29, 1], [3, 4]])], slot_mappings=[torch.full((4,), 555, dtype=I32)]),
     "slot_mappings"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    call = dict(verified_seq_len=torch.tensor([2, 2]), block_tables=[t32([[0, 1], [3, 4]])], block_sizes=4,
                draft_token_num=2, slot_mappings=[torch.full((4,), 555)])
    call.update(change)
    with specops.backend("native"):
        before = call["slot_mappings"][0].clone()
        with pytest.raises(ValueError, match=argument):
            specops.tree_slot_mappings(**call)
        assert torch.equal(call["slot_mappings"][0], before)


def _call(**change):
    call = dict(verified_seq_len=torch.tensor([2, 2]), block_tables=[t32([[0, 1], [3, 4]])], block_sizes=4,
                draft_token_num=2, slot_mappings=[torch.full((4,), 555)])
    call.update(change)
    return call


@pytest.mark.parametrize("change,argument", [
    (dict(draft_token_num=0), "draft_token_num"),
    (dict(cp_world_size=2, cp_rank=2), "cp_rank"),
    (dict(verified_seq_len=torch.tensor([[2, 2]])), "verified_seq_len"),
    (dict(verified_seq_len=torch.tensor([2.0, 2.0])), "verified_seq_len"),
    (dict(idx_mapping=t32([0])), "idx_mapping"),
    (dict(slot_mappings=[torch.full((3,), 555)]), "slot_mappings"),
    (dict(slot_mappings=[torch.full((4,), 555)] * 2), "slot_mappings"),
    (dict(num_tokens_padded=5), "num_tokens_padded"),
    (dict(block_sizes=[4, 4]), "block_sizes"),
    (dict(num_blocks=[t32([1, 2]), t32([1, 2])]), "num_blocks"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = _call(**change)
    out = call["slot_mappings"][0]
    before = out.clone()
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.tree_slot_mappings(**call)
    assert torch.equal(out, before)


def test_a_slot_mapping_sharing_verified_seq_len_is_rejected(backend):
    verified = torch.tensor([2, 2])
    call = _call(verified_seq_len=verified, slot_mappings=[verified], draft_token_num=1)
    assert_rejected_without_writes(specops.tree_slot_mappings, call, argument="verified_seq_len",
                                   written=("verified_seq_len",))


def _opcheck_args():
    tables = [t32([[10, 11, 12, 13, 14], [20, 21, 22, 23, 24]]), t32([[3, 4, 5], [6, 7, 8]])]
    return (torch.tensor([5, 14]), tables, t32([1, 0]), [torch.zeros(8, dtype=I64), torch.zeros(8, dtype=I32)], [],
            3, 8, 1, 0, 1, [4, 8], [1, 1], [True, True], [True, True])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.tree_slot_mappings.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(verified, out0, out1):
        slots = specops.tree_slot_mappings(verified, args[1], [4, 8], 3, idx_mapping=args[2],
                                           slot_mappings=[out0, out1], num_tokens_padded=8)
        return slots[0] + 1, slots[1] * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[0].clone(), args[3][0].clone(), args[3][1].clone())
    actual = compiled(args[0].clone(), args[3][0].clone(), args[3][1].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def test_a_tree_past_its_rows_whole_allocation_blocks_is_mapped_token_by_token(backend):
    # Blocks of 2 tokens, 2 per allocation block, rows of 3 columns: the last allocation block is
    # half there. The tree at 2 (positions 2..5) reaches column 2 (the native op's per-token path),
    # the tree at 0 does not (its run path); both give compute_slot_mapping's slots.
    table = t32([[10, 11, 12], [30, 31, 32]])
    slots = specops.tree_slot_mappings(t32([2, 0]), [table], 2, 4, blocks_per_kv_block=2)
    want = tree_slots([2, 0], [table.tolist()], [2], 4, blocks_per_kv_block=[2])
    assert slots[0].tolist() == want[0] == [22, 23, 24, 25, 60, 61, 62, 63]
