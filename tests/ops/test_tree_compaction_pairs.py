"""tree_compaction_pairs: the worked example of the issue (path [0, 2, 3]), the pairs applied to a
simulated KV cache (in place in j order, and under CP across ranks), random accepted paths of up
to five groups against the plain-Python contract on every backend, the device paths' clamps for
values the host op rejects, opcheck, compile, bad input."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes
from tree_kv_expectations import compaction, slot

import specops

PAD = specops.PAD_SLOT_ID
I32, I64 = torch.int32, torch.int64


def t32(values):
    return torch.tensor(values, dtype=I32)


def rows(first: int, num_rows: int, cols: int) -> torch.Tensor:
    return torch.tensor([[first + 100 * r + c for c in range(cols)] for r in range(num_rows)], dtype=I32)


def _example(**change):
    # D = 4, S = 4. Request 0: verified prefix 10, accepted path i = [0, 2, 3]; request 1: 20, [0, 1].
    call = dict(accept_index=t32([[0, 2, 3, -1], [4, 5, -1, -1]]), accept_token_num=t32([2, 1]),
                verified_seq_len=torch.tensor([10, 20]), block_tables=[rows(100, 2, 8)], block_sizes=4,
                draft_token_num=4, next_seq_lens=torch.zeros(2, dtype=I64), num_accepted_tokens=torch.zeros(2, dtype=I32))
    call.update(change)
    return call


def test_example_path_0_2_3(backend):
    pairs = specops.tree_compaction_pairs(**_example())
    # Row 0's blocks are 100..107: position 12 (node 2) is slot 400 + 12 = 412, its final position 11 is 411.
    # Request 1 accepted nodes 0 and 1 in place: nothing moves.
    assert pairs.src_slots.tolist() == [[PAD, 412, 413, PAD, PAD, PAD, PAD, PAD]]
    assert pairs.dst_slots.tolist() == [[PAD, 411, 412, PAD, PAD, PAD, PAD, PAD]]
    assert pairs.next_seq_lens.tolist() == [13, 22]
    assert pairs.num_accepted_tokens.tolist() == [3, 2]
    assert pairs.src_slots.dtype == I64 and pairs.src_slots.shape == (1, 8)


def _kv_of_tree(table, verified, draft_token_num, block_size):
    """A one-rank KV cache (slot -> (request, tree index)) after the tree's tokens were stored."""
    return {slot(table, r, base + i, block_size): (r, i) for r, base in enumerate(verified)
            for i in range(draft_token_num)}


def test_the_pairs_applied_in_j_order_compact_the_path_in_place(backend):
    call = _example()
    pairs = specops.tree_compaction_pairs(**call)
    table = call["block_tables"][0].tolist()
    kv = _kv_of_tree(table, [10, 20], 4, 4)
    for src, dst in zip(pairs.src_slots[0].tolist(), pairs.dst_slots[0].tolist()):
        if src != PAD and dst != PAD:
            kv[dst] = kv[src]
    assert [kv[slot(table, 0, 10 + j, 4)] for j in range(3)] == [(0, 0), (0, 2), (0, 3)]
    assert [kv[slot(table, 1, 20 + j, 4)] for j in range(2)] == [(1, 0), (1, 1)]
    # The hazard the order avoids: in decreasing j, pair j = 2 overwrites position 12 before pair
    # j = 1 reads it.
    kv = _kv_of_tree(table, [10, 20], 4, 4)
    for src, dst in reversed(list(zip(pairs.src_slots[0].tolist(), pairs.dst_slots[0].tolist()))):
        if src != PAD and dst != PAD:
            kv[dst] = kv[src]
    assert kv[slot(table, 0, 11, 4)] == (0, 3)


@st.composite
def paths(draw, max_reqs=5):
    """SGLang's verify output for random accepted paths: node indices increasing from the root
    (a parent precedes its children in tree order), -1 past each path (or garbage: never read)."""
    draft_token_num = draw(st.integers(1, 9))
    num_steps = draw(st.integers(1, draft_token_num))
    index, counts = [], []
    for r in range(draw(st.integers(0, max_reqs))):
        count = draw(st.integers(0, num_steps - 1))
        path = [0] + sorted(draw(st.permutations(range(1, draft_token_num)))[:count])
        tail = [draw(st.sampled_from([-1, -1, 0, 99, -(2**31)])) for _ in range(num_steps - count - 1)]
        index.append([r * draft_token_num + i for i in path] + tail)
        counts.append(count)
    return draft_token_num, num_steps, index, counts


@st.composite
def compactions(draw):
    draft_token_num, num_steps, index, counts = draw(paths())
    num_groups = draw(st.integers(1, 5))
    world = draw(st.sampled_from([1, 2, 4]))
    block_sizes = [draw(st.sampled_from([1, 2, 4, 8])) for _ in range(num_groups)]
    num_reqs = len(counts)
    return dict(draft_token_num=draft_token_num, num_steps=num_steps, index=index, counts=counts,
                num_groups=num_groups, world=world, rank=draw(st.integers(0, world - 1)),
                interleave=draw(st.sampled_from([i for i in (1, 2) if all(b % i == 0 for b in block_sizes)])),
                block_sizes=block_sizes, verified=[draw(st.integers(0, 40)) for _ in range(num_reqs)],
                idx=draw(st.permutations(list(range(num_reqs + 2)) + [-1]))[:num_reqs] if draw(st.booleans()) else None,
                sharded=[draw(st.booleans()) for _ in range(num_groups)],
                enabled=[draw(st.booleans()) for _ in range(num_groups)],
                index_dtype=draw(st.sampled_from([I32, I64])), len_dtype=draw(st.sampled_from([I64, I32])),
                slot_dtype=draw(st.sampled_from([I64, I32])), seed=draw(st.integers(0, 2**16)),
                requests=draw(st.booleans()), with_num_blocks=draw(st.booleans()))


def _tables(case):
    generator = torch.Generator().manual_seed(case["seed"])
    num_rows = len(case["counts"]) + 2
    cols = [-(-(40 + case["draft_token_num"]) // bs) for bs in case["block_sizes"]]
    return [torch.randperm(num_rows * c, generator=generator).view(num_rows, c).to(I32) + 100 * g
            for g, c in enumerate(cols)], cols


def _run(case, tables, cols, accept_index, counts, verified):
    num_reqs = len(verified)
    num_rows = num_reqs + 2
    out = dict(src_slots=torch.full((case["num_groups"], accept_index.numel()), 555, dtype=case["slot_dtype"]),
               dst_slots=torch.full((case["num_groups"], accept_index.numel()), 555, dtype=case["slot_dtype"]))
    if case["requests"]:
        out.update(next_seq_lens=torch.full((num_reqs,), 555, dtype=case["len_dtype"]),
                   num_accepted_tokens=torch.full((num_reqs,), 555, dtype=I32))
    return specops.tree_compaction_pairs(
        accept_index, counts, torch.tensor(verified, dtype=case["len_dtype"]), tables, case["block_sizes"],
        case["draft_token_num"], idx_mapping=t32(case["idx"]) if case["idx"] is not None else None,
        cp_world_size=case["world"], cp_rank=case["rank"], cp_interleave=case["interleave"],
        cp_sharded=case["sharded"], slot_mapping_enabled=case["enabled"],
        num_blocks=[t32([c] * num_rows) for c in cols] if case["with_num_blocks"] else None, **out)


def _check(case, tables, result, index, counts, verified):
    src, dst, next_seq_lens, num_accepted = compaction(
        index, counts, verified, [t.tolist() for t in tables], case["block_sizes"], case["draft_token_num"],
        idx_mapping=case["idx"], cp=(case["world"], case["rank"], case["interleave"]), cp_sharded=case["sharded"],
        enabled=case["enabled"])
    for g in range(case["num_groups"]):
        assert result.src_slots[g].tolist() == src[g], f"group {g}"
        assert result.dst_slots[g].tolist() == dst[g], f"group {g}"
    if case["requests"]:
        assert result.next_seq_lens.tolist() == next_seq_lens
        assert result.num_accepted_tokens.tolist() == num_accepted


@settings(max_examples=examples(25))
@given(case=compactions())
def test_random_paths_match_the_contract(backend, case):
    tables, cols = _tables(case)
    accept_index = torch.tensor(case["index"], dtype=case["index_dtype"]).view(-1, case["num_steps"])
    result = _run(case, tables, cols, accept_index, t32(case["counts"]), case["verified"])
    _check(case, tables, result, case["index"], case["counts"], case["verified"])


@settings(max_examples=examples(20))
@given(case=compactions(), data=st.data())
def test_device_paths_clamp_and_mask_what_the_host_op_rejects(case, data):
    """Accept counts past the envelope or negative, indices of another request or none, a
    verified_seq_len that is negative or past 2^31 - 1: the device paths write the contract's
    clamped values, the native op rejects the call before any write."""
    tables, cols = _tables(case)
    num_reqs = len(case["counts"])
    if num_reqs == 0:
        return
    index = [list(row) for row in case["index"]]
    counts = list(case["counts"])
    verified = list(case["verified"])
    r = data.draw(st.integers(0, num_reqs - 1))
    kind = data.draw(st.sampled_from(["count", "index", "verified"]))  # each one rejected whatever the groups
    if kind == "count":
        counts[r] = data.draw(st.sampled_from([-1, case["num_steps"], case["num_steps"] + 5, 2**31 - 1, -(2**31)]))
    elif kind == "index":
        j = data.draw(st.integers(0, counts[r]))
        index[r][j] = data.draw(st.sampled_from([-1, (r + 1) * case["draft_token_num"], 2**31 - 1, -(2**31)]))
    else:
        verified[r] = data.draw(st.sampled_from([-1, -(2**31)]))
    accept_index = torch.tensor(index, dtype=case["index_dtype"]).view(-1, case["num_steps"])
    for name in device_backends():
        with specops.backend(name):
            result = _run(case, tables, cols, accept_index, t32(counts), verified)
        _check(case, tables, result, index, counts, verified)
    with specops.backend("native"):
        with pytest.raises(ValueError):
            _run(case, tables, cols, accept_index, t32(counts), verified)


@pytest.mark.parametrize("base", [2**31 - 1, 2**31, 2**63 - 1])
def test_a_verified_prefix_past_every_table_moves_nothing_on_the_device_paths(base):
    call = _example(verified_seq_len=torch.tensor([base, 20]))
    for name in device_backends():
        with specops.backend(name):
            pairs = specops.tree_compaction_pairs(**{k: (v.clone() if isinstance(v, torch.Tensor) else v)
                                                     for k, v in call.items()})
        assert pairs.src_slots.tolist() == [[PAD] * 8] and pairs.dst_slots.tolist() == [[PAD] * 8], name
        # The sum wraps at the int64 end, as an add on the device does.
        assert pairs.next_seq_lens.tolist() == [(base + 3 + 2**63) % 2**64 - 2**63, 22], name


def test_context_parallel_ranks_move_send_and_receive(backend):
    """Every rank's entries, applied as docs/tree_kv.md says (sends read first, local moves in j
    order, receives last), leave each accepted node's KV at its final position on the rank that
    stores that position."""
    world, interleave, block_size, draft_token_num = 2, 2, 4, 8
    verified = [5, 2]
    paths = [[0, 1, 4, 6], [0, 3]]
    accept_index = t32([[r * draft_token_num + i for i in p] + [-1] * (5 - len(p)) for r, p in enumerate(paths)])
    counts = t32([len(p) - 1 for p in paths])
    table = rows(10, 2, 4)
    tables = table.tolist()
    cp = lambda rank: (world, rank, interleave)  # noqa: E731
    kv = [{} for _ in range(world)]
    for rank in range(world):
        for r, base in enumerate(verified):
            for i in range(draft_token_num):
                at = slot(tables, r, base + i, block_size, cp=cp(rank))
                if at != PAD:
                    kv[rank][at] = (r, i)
    entries = []
    for rank in range(world):
        pairs = specops.tree_compaction_pairs(accept_index, counts, torch.tensor(verified), [table], block_size,
                                              draft_token_num, cp_world_size=world, cp_rank=rank,
                                              cp_interleave=interleave)
        entries.append(list(zip(pairs.src_slots[0].tolist(), pairs.dst_slots[0].tolist())))
    sent = {e: kv[rank][s] for rank in range(world) for e, (s, d) in enumerate(entries[rank]) if s != PAD and d == PAD}
    for rank in range(world):
        for s, d in entries[rank]:
            if s != PAD and d != PAD:
                kv[rank][d] = kv[rank][s]
    received = 0
    for rank in range(world):
        for e, (s, d) in enumerate(entries[rank]):
            if s == PAD and d != PAD:
                kv[rank][d] = sent[e]
                received += 1
    assert received == len(sent) > 0  # this layout has moves across ranks, each one sent and received once
    for r, path in enumerate(paths):
        for j, i in enumerate(path):
            owner = [rank for rank in range(world) if slot(tables, r, verified[r] + j, block_size, cp=cp(rank)) != PAD]
            assert len(owner) == 1
            at = slot(tables, r, verified[r] + j, block_size, cp=cp(owner[0]))
            assert kv[owner[0]][at] == (r, i), (r, j)


@pytest.mark.parametrize("change,argument", [
    (dict(accept_token_num=t32([4, 1])), "accept_token_num"),
    (dict(accept_token_num=t32([-1, 1])), "accept_token_num"),
    (dict(accept_index=t32([[0, 2, 4, -1], [4, 5, -1, -1]])), "accept_index"),
    (dict(accept_index=t32([[0, -1, 3, -1], [4, 5, -1, -1]])), "accept_index"),
    (dict(verified_seq_len=torch.tensor([-1, 20])), "verified_seq_len"),
    (dict(verified_seq_len=torch.tensor([30, 20])), "block_tables"),
    (dict(idx_mapping=t32([0, 2])), "idx_mapping"),
    (dict(num_blocks=[t32([8, 5])]), "num_blocks"),
    (dict(block_tables=[rows(2**29, 2, 8)], src_slots=torch.zeros(1, 8, dtype=I32)), "src_slots"),
    (dict(next_seq_lens=torch.zeros(2, dtype=I32), verified_seq_len=torch.tensor([2**31 - 3, 20]),
          slot_mapping_enabled=False), "next_seq_lens"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    call = _example(src_slots=torch.full((1, 8), 555), dst_slots=torch.full((1, 8), 555))
    call.update(change)
    written = ("src_slots", "dst_slots", "next_seq_lens", "num_accepted_tokens")
    with specops.backend("native"):
        assert_rejected_without_writes(specops.tree_compaction_pairs, call, argument=argument, written=written,
                                       errors=ValueError)


@pytest.mark.parametrize("change,argument", [
    (dict(draft_token_num=0), "draft_token_num"),
    (dict(cp_world_size=2, cp_rank=2), "cp_rank"),
    (dict(accept_index=t32([0, 2, 3, -1])), "accept_index"),
    (dict(accept_index=torch.zeros(2, 0, dtype=I32)), "accept_index"),
    (dict(accept_index=torch.zeros(2, 4)), "accept_index"),
    (dict(accept_token_num=t32([2])), "accept_token_num"),
    (dict(verified_seq_len=torch.tensor([10])), "verified_seq_len"),
    (dict(idx_mapping=t32([0])), "idx_mapping"),
    (dict(src_slots=torch.zeros(1, 7, dtype=I64)), "src_slots"),
    (dict(dst_slots=torch.zeros(2, 8, dtype=I64)), "dst_slots"),
    (dict(dst_slots=torch.zeros(1, 8)), "dst_slots"),
    (dict(next_seq_lens=torch.zeros(3, dtype=I64)), "next_seq_lens"),
    (dict(num_accepted_tokens=torch.zeros(2)), "num_accepted_tokens"),
    (dict(block_sizes=[4, 4]), "block_sizes"),
    (dict(cp_sharded=[True, True]), "cp_sharded"),
    (dict(num_blocks=[t32([8, 8]), t32([8, 8])]), "num_blocks"),
    (dict(num_blocks=[t32([8])]), "num_blocks"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = _example(src_slots=torch.full((1, 8), 555), dst_slots=torch.full((1, 8), 555))
    call.update(change)
    assert_rejected_without_writes(specops.tree_compaction_pairs, call, argument=argument,
                                   written=("src_slots", "next_seq_lens", "num_accepted_tokens"))


def test_an_output_sharing_an_input_is_rejected(backend):
    call = _example(src_slots=torch.full((1, 8), 555), dst_slots=torch.full((1, 8), 555))
    call["next_seq_lens"] = call["verified_seq_len"]
    assert_rejected_without_writes(specops.tree_compaction_pairs, call, argument="next_seq_lens",
                                   written=("src_slots", "dst_slots"))


def _opcheck_args():
    call = _example()
    return (call["accept_index"], call["accept_token_num"], call["verified_seq_len"],
            [rows(100, 2, 8), rows(5, 2, 4)], t32([1, 0]), torch.zeros(2, 8, dtype=I64), torch.zeros(2, 8, dtype=I32),
            [], 4, 1, 0, 1, [4, 8], [1, 1], [True, True], [True, True], torch.zeros(2, dtype=I64),
            torch.zeros(2, dtype=I32))


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.tree_compaction_pairs.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(accept_index, counts, verified, src, dst, next_seq_lens):
        pairs = specops.tree_compaction_pairs(accept_index, counts, verified, args[3], [4, 8], 4,
                                              idx_mapping=args[4], src_slots=src, dst_slots=dst,
                                              next_seq_lens=next_seq_lens)
        return pairs.src_slots + 1, pairs.dst_slots * 2, pairs.next_seq_lens - 1

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    fresh = lambda: (args[0].clone(), args[1].clone(), args[2].clone(), args[5].clone(), args[6].clone(),  # noqa: E731
                     args[16].clone())
    expected = step(*fresh())
    actual = compiled(*fresh())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))
