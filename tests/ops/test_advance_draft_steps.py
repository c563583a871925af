"""advance_draft_steps: a hand-computed step, random steps on every backend against
advance_draft_step applied pass after pass (and cp_local_metadata / the RoPE gather / the slot
format for the other rows), opcheck, compile, bad input, host value checks."""

from __future__ import annotations

import pytest
import torch
from conftest import device_backends, examples
from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import assert_rejected_without_writes

import specops
from specops.ops.advance_draft_steps import empty_draft_steps
from specops.ops.registry import OPS
from specops.reference.cp_local_metadata import cp_local_metadata

PAD = specops.PAD_SLOT_ID
SENTINEL = 77


def t32(values):
    return torch.tensor(values, dtype=torch.int32)


def rope_cache(rows: int, dim: int = 4, dtype=torch.float32) -> torch.Tensor:
    return (torch.arange(rows * dim, dtype=torch.float32).view(rows, dim) + 1).to(dtype)


def filled(out):
    """Outputs full of a sentinel, so a write outside the contract shows up as a difference."""
    for tensor in (*out[:8], *out.slots, *out.slot_pairs):
        tensor.fill_(SENTINEL)
    return out


def test_example_two_passes_reset():
    # Two requests, target layout [0, 3, 5]: request 0 samples at token 1 (one rejected), request
    # 1 at token 4; max_model_len 12 makes request 1 reset in pass 3.
    rope = rope_cache(16, 2)
    positions = torch.tensor([4, 5, 6, 9, 10])
    table = t32([[1, 2, 3], [4, 5, 6]])
    steps = specops.advance_draft_steps(
        t32([0, 3, 5]), positions, t32([7, 11]), t32([1, 4]), t32([1, 0]), [table], 4, rope, num_steps=3,
        num_actual_tokens=5, num_input_tokens=6, max_model_len=12, target_slot_mappings=[torch.arange(5) + 20],
        num_reqs_padded=3)
    assert steps.positions[0].tolist()[:6] == [4, 5, 6, 9, 10, 0]
    assert steps.positions[1].tolist()[:3] == [6, 11, 0]
    assert steps.positions[2].tolist()[:3] == [7, 0, 0]
    assert steps.seq_lens.tolist() == [[7, 11, 0], [7, 12, 0], [8, 1, 0]]
    assert steps.query_start_loc.tolist() == [[0, 3, 5, 5], [0, 1, 2, 2], [0, 1, 2, 2]]
    assert steps.start_pos.tolist() == [[4, 9, 0], [6, 11, 0], [7, 0, 0]]
    assert steps.slots[0][0].tolist()[:6] == [20, 21, 22, 23, 24, PAD]
    # Pass 2: position 6 of row 0 (block 2, offset 2: slot 10), 11 of row 1 (block 6: slot 27).
    assert steps.slots[0][1].tolist()[:3] == [10, 27, PAD]
    assert steps.slots[0][2].tolist()[:3] == [11, PAD, PAD]
    assert steps.slot_pairs[0][1].tolist()[:3] == [[2, 2], [6, 3], [-1, 3]]
    assert torch.equal(steps.cos_sin[1, :3], rope[[6, 11, 0]])
    assert torch.equal(steps.local_cos_sin[2, :3], torch.cat([rope[[7, 0]], torch.zeros(1, 2)]))


@st.composite
def cases(draw):
    num_groups = draw(st.integers(1, 6))
    num_reqs = draw(st.integers(0, 5))
    limit = draw(st.integers(4, 30))
    query_lens = [draw(st.integers(1, 4)) for _ in range(num_reqs)]
    seq_lens = [draw(st.integers(q, limit)) for q in query_lens]
    return dict(
        num_groups=num_groups, num_steps=draw(st.sampled_from([1, 2, 3, 5])), limit=limit, query_lens=query_lens,
        seq_lens=seq_lens, rejected=[draw(st.integers(0, q - 1)) for q in query_lens],
        world=draw(st.sampled_from([1, 2])), split=draw(st.sampled_from([1, 2, 4])),
        block_sizes=[draw(st.sampled_from([2, 4, 8])) for _ in range(num_groups)],
        storage=[draw(st.sampled_from([2, 4, 16])) for _ in range(num_groups)],
        sharded=[draw(st.booleans()) for _ in range(num_groups)],
        enabled=[draw(st.booleans()) for _ in range(num_groups)],
        rule=draw(st.sampled_from(["reset", "clamp"])), extra_tokens=draw(st.integers(0, 3)),
        extra_reqs=draw(st.integers(0, 2)), idx=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
        slot_dtype=draw(st.sampled_from([torch.int64, torch.int32])),
        pair_dtype=draw(st.sampled_from([torch.int64, torch.int32])))


def _build(case):
    gen = torch.Generator().manual_seed(case["seed"])
    num_reqs = len(case["query_lens"])
    starts = [0]
    for q in case["query_lens"]:
        starts.append(starts[-1] + q)
    num_tokens = starts[-1]
    # Each request's tokens end at its seq_len (the target step's layout).
    positions = [s - q + j for q, s in zip(case["query_lens"], case["seq_lens"]) for j in range(q)]
    token_indices = [starts[r + 1] - 1 - case["rejected"][r] for r in range(num_reqs)]
    rows = num_reqs + 2
    idx = torch.randperm(rows, generator=gen)[:num_reqs].int() if case["idx"] else None
    world = case["world"]
    cols = [-(-(case["limit"] + case["num_steps"] + 2) // (bs * (world if sharded else 1))) + 1
            for bs, sharded in zip(case["block_sizes"], case["sharded"])]
    tables = [torch.randint(0, 1000, (rows, c), dtype=torch.int32, generator=gen) for c in cols]
    targets = [torch.randint(-1, 5000, (num_tokens + 1,), generator=gen) for _ in tables]
    rope = rope_cache(case["limit"] + case["num_steps"] + 4)
    return dict(query_start_loc=t32(starts + [SENTINEL]), positions=torch.tensor(positions + [SENTINEL]),
                seq_lens=t32(case["seq_lens"] + [SENTINEL]), token_indices=t32(token_indices),
                num_rejected_tokens=t32(case["rejected"]), block_tables=tables, block_sizes=case["block_sizes"],
                rope_cos_sin_cache=rope, num_steps=case["num_steps"], num_actual_tokens=num_tokens,
                num_input_tokens=num_tokens + case["extra_tokens"], max_model_len=case["limit"],
                target_slot_mappings=targets, past_max_model_len=case["rule"], idx_mapping=idx,
                storage_block_sizes=case["storage"], cp_sharded=case["sharded"], slot_mapping_enabled=case["enabled"],
                cp_world_size=world, cp_rank=world - 1, split_size=case["split"], split_rank=case["split"] - 1,
                num_reqs_padded=num_reqs + case["extra_reqs"])


def _outputs(call, case):
    steps = call["num_steps"]
    return filled(empty_draft_steps(steps, call["num_input_tokens"], call["num_reqs_padded"],
                                    call["num_reqs_padded"] + 1, call["split_size"], call["rope_cos_sin_cache"],
                                    [case["slot_dtype"]] * case["num_groups"], torch.device("cpu"),
                                    [case["pair_dtype"]] * case["num_groups"]))


def _expected_later_passes(call, case):
    """advance_draft_step applied pass after pass: (positions, seq_lens, slots per group) of passes 2..K."""
    num_reqs = call["token_indices"].numel()
    seq_lens = call["seq_lens"].clone()
    positions = call["positions"].clone()
    passes = []
    for k in range(1, call["num_steps"]):
        slots = [torch.full((call["num_reqs_padded"],), 555, dtype=case["slot_dtype"]) for _ in call["block_tables"]]
        first = k == 1
        with specops.backend("reference"):
            step = specops.advance_draft_step(
                positions, seq_lens, call["block_tables"], call["block_sizes"], max_model_len=call["max_model_len"],
                past_max_model_len=call["past_max_model_len"], token_indices=call["token_indices"] if first else None,
                num_rejected_tokens=call["num_rejected_tokens"] if first else None, idx_mapping=call["idx_mapping"],
                slot_mappings=slots, cp_sharded=call["cp_sharded"], slot_mapping_enabled=call["slot_mapping_enabled"],
                cp_world_size=call["cp_world_size"], cp_rank=call["cp_rank"], num_reqs_padded=num_reqs)
        positions = step.positions.clone()
        passes.append((positions.tolist(), seq_lens[:num_reqs].tolist(), [s.tolist() for s in slots]))
    return passes


@settings(max_examples=examples(20))
@given(case=cases())
# One pass takes no later-pass slots: num_reqs_padded past the pass-1 stream is no error then.
@example(case=dict(num_groups=1, num_steps=1, limit=4, query_lens=[], seq_lens=[], rejected=[], world=1, split=1,
                   block_sizes=[2], storage=[2], sharded=[False], enabled=[False], rule="reset", extra_tokens=0,
                   extra_reqs=1, idx=False, seed=0, slot_dtype=torch.int64, pair_dtype=torch.int64))
def test_random_steps_match_advance_draft_step_pass_after_pass(backend, case):
    call = _build(case)
    out = specops.advance_draft_steps(**call, out=_outputs(call, case))
    num_reqs, padded = call["token_indices"].numel(), call["num_reqs_padded"]
    split, rank = call["split_size"], call["split_rank"]
    for k, (positions, seq_lens, slots) in enumerate(_expected_later_passes(call, case), start=1):
        assert out.positions[k, :num_reqs].tolist() == positions, k
        assert out.seq_lens[k].tolist() == seq_lens + [0] * (out.seq_lens.size(1) - num_reqs), k
        for g, want in enumerate(slots):
            assert out.slots[g][k, :padded].tolist() == want[:num_reqs] + [PAD] * (padded - num_reqs), (k, g)
    for k in range(call["num_steps"]):
        first = k == 0
        tokens = call["num_actual_tokens"] if first else num_reqs
        stream = call["num_input_tokens"] if first else padded
        per_rank = -(-stream // split)
        pad = per_rank * split
        qsl = call["query_start_loc"][:num_reqs + 1] if first else torch.arange(num_reqs + 1, dtype=torch.int32)
        seq = out.seq_lens[k, :num_reqs]
        if first:
            assert torch.equal(seq, call["seq_lens"][:num_reqs])
            assert out.positions[0, :tokens].tolist() == call["positions"][:tokens].tolist()
        assert out.positions[k, tokens:pad].tolist() == [0] * (pad - tokens)
        assert out.positions[k, pad:].tolist() == [SENTINEL] * (out.positions.size(1) - pad)  # nothing past the stream
        rows = call["rope_cos_sin_cache"][out.positions[k, :pad]]
        assert torch.equal(out.cos_sin[k, :pad], rows)
        local = rows[rank * per_rank:(rank + 1) * per_rank].clone()
        local[max(tokens - rank * per_rank, 0):] = 0
        assert torch.equal(out.local_cos_sin[k, :per_rank], local)
        reqs_end = out.seq_lens.size(1)
        lqsl, lseq, start = (torch.zeros(reqs_end + 1, dtype=torch.int32), torch.zeros(reqs_end, dtype=torch.int32),
                             torch.zeros(reqs_end, dtype=torch.int32))
        cp_local_metadata(OPS["cp_local_metadata"].arguments(qsl, seq, stream, split, rank, True, lqsl, lseq, start))
        assert torch.equal(out.local_query_start_loc[k], lqsl), k
        assert torch.equal(out.local_seq_lens[k], lseq), k
        assert torch.equal(out.start_pos[k], start), k
        want_qsl = qsl.tolist() + [qsl[-1].item()] * (reqs_end - num_reqs)
        assert out.query_start_loc[k].tolist() == want_qsl
        for g in range(case["num_groups"]):
            raw = out.slots[g][k, :stream]
            if first:
                target = call["target_slot_mappings"][g][:tokens]
                if case["slot_dtype"] == torch.int32:
                    target = target.where(target <= 2**31 - 1, PAD)
                assert raw.tolist() == target.tolist() + [PAD] * (stream - tokens)
            block = case["storage"][g]
            pairs = torch.stack([raw.long().div(block, rounding_mode="floor"), raw.long().remainder(block)], 1)
            assert out.slot_pairs[g][k, :stream].tolist() == pairs.tolist(), (k, g)


def test_the_three_implementations_write_the_same_bytes():
    case = dict(num_groups=5, num_steps=4, limit=20, query_lens=[3, 1, 2], seq_lens=[10, 19, 5], rejected=[2, 0, 1],
                world=2, split=2, block_sizes=[4, 8, 2, 4, 8], storage=[16, 4, 2, 4, 8],
                sharded=[True, False, True, True, False], enabled=[True, True, False, True, True], rule="reset",
                extra_tokens=2, extra_reqs=1, idx=True, seed=3, slot_dtype=torch.int32, pair_dtype=torch.int64)
    results = []
    for name in ["native", *device_backends()]:
        call = _build(case)
        with specops.backend(name):
            results.append(specops.advance_draft_steps(**call, out=_outputs(call, case)))
    for other in results[1:]:
        for a, b in zip((*results[0][:8], *results[0].slots, *results[0].slot_pairs),
                        (*other[:8], *other.slots, *other.slot_pairs)):
            assert torch.equal(a, b)


def _opcheck_args():
    case = dict(num_groups=2, num_steps=3, limit=20, query_lens=[3, 1], seq_lens=[10, 19], rejected=[2, 0], world=1,
                split=2, block_sizes=[4, 8], storage=[16, 8], sharded=[True, True], enabled=[True, True],
                rule="clamp", extra_tokens=1, extra_reqs=1, idx=True, seed=1, slot_dtype=torch.int64,
                pair_dtype=torch.int32)
    call = _build(case)
    out = _outputs(call, case)
    return (call["query_start_loc"], call["positions"], call["seq_lens"], call["token_indices"],
            call["num_rejected_tokens"], call["idx_mapping"], call["block_tables"], [], call["target_slot_mappings"],
            call["rope_cos_sin_cache"], *out[:8], list(out.slots), list(out.slot_pairs), 3, call["num_actual_tokens"],
            call["num_input_tokens"], call["num_reqs_padded"], 20, 1, 2, 1, 1, 0, 1, [4, 8], [1, 1], [True, True],
            [True, True], [16, 8])


def test_opcheck():
    torch.library.opcheck(torch.ops.specops.advance_draft_steps.default, _opcheck_args())


def test_compiles_without_graph_break():
    args = _opcheck_args()

    def step(positions, seq_lens):
        out_positions, out_seq_lens = args[10].clone(), args[11].clone()
        torch.ops.specops.advance_draft_steps(args[0], positions, seq_lens, *args[3:10], out_positions, out_seq_lens,
                                              *args[12:])
        return out_positions + 1, out_seq_lens * 2

    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    expected = step(args[1].clone(), args[2].clone())
    actual = compiled(args[1].clone(), args[2].clone())
    assert all(torch.equal(a, e) for a, e in zip(actual, expected))


def _call(**change):
    call = dict(query_start_loc=t32([0, 2, 3]), positions=torch.tensor([5, 6, 9]), seq_lens=t32([7, 10]),
                token_indices=t32([1, 2]), num_rejected_tokens=t32([0, 0]), block_tables=[t32([[3, 4], [7, 8]])],
                block_sizes=8, rope_cos_sin_cache=rope_cache(16), num_steps=3, num_actual_tokens=3,
                num_input_tokens=4, max_model_len=14, target_slot_mappings=[torch.arange(3)], num_reqs_padded=2)
    call.update(change)
    call["out"] = filled(empty_draft_steps(call["num_steps"], max(call["num_input_tokens"], 0), 2, 2, 1,
                                           rope_cache(16), [torch.int64], torch.device("cpu")))
    return call


@pytest.mark.parametrize("change,argument", [
    (dict(positions=torch.tensor([5, -6, 9])), "positions"),
    (dict(positions=torch.tensor([5, 6, 16])), "positions"),
    (dict(token_indices=t32([1, 3])), "token_indices"),
    (dict(num_rejected_tokens=t32([8, 0])), "num_rejected_tokens"),
    (dict(num_actual_tokens=2), "num_actual_tokens"),
    (dict(query_start_loc=t32([0, 3, 2])), "query_start_loc"),
    # Past the 2-column table of block size 8 in pass 2 (position 16), inside the RoPE cache.
    (dict(positions=torch.tensor([5, 6, 15]), max_model_len=30, rope_cos_sin_cache=rope_cache(40)),
     "draft position 16 of request 1"),
    (dict(positions=torch.tensor([5, 6, 15]), max_model_len=30), "rope_cos_sin_cache"),
])
def test_native_rejects_invalid_values_and_writes_nothing(change, argument):
    call = _call(**change)
    with specops.backend("native"):
        with pytest.raises(ValueError, match=argument):
            specops.advance_draft_steps(**call)
    assert (call["out"].positions == SENTINEL).all() and (call["out"].slots[0] == SENTINEL).all()


@pytest.mark.parametrize("change,argument", [
    (dict(num_steps=0), "num_steps"),
    (dict(max_model_len=0), "max_model_len"),
    (dict(past_max_model_len="wrap"), "past_max_model_len"),
    (dict(num_input_tokens=2), "num_input_tokens"),
    (dict(seq_lens=t32([6])), "seq_lens"),
    (dict(num_rejected_tokens=t32([0])), "num_rejected_tokens"),
    (dict(target_slot_mappings=[torch.arange(2)]), "target_slot_mappings"),
    (dict(storage_block_sizes=0), "storage_block_sizes"),
    (dict(split_size=2, split_rank=2), "split_size"),
    (dict(rope_cos_sin_cache=rope_cache(16, dtype=torch.float64)), "rope_cos_sin_cache"),
])
def test_bad_metadata_names_the_argument(backend, change, argument):
    call = _call(**change)
    with pytest.raises((ValueError, RuntimeError), match=argument):
        specops.advance_draft_steps(**call)
    assert (call["out"].positions == SENTINEL).all()


def test_an_output_sharing_memory_is_rejected(backend):
    call = _call()
    call["out"] = call["out"]._replace(start_pos=call["out"].local_seq_lens)
    with pytest.raises((ValueError, RuntimeError), match="must not share memory"):
        specops.advance_draft_steps(**call)
